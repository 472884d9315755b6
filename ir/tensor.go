package ir

import (
	"fmt"
	"math"
	"strings"
)

// Tensor is a dense row-major tensor. Data holds the backing slice, whose Go
// type follows DType: []float32, []float64, []uint16 (float16 bit patterns),
// []int64, []int32, []int16, []int8, []uint8, []uint16, []uint32, []uint64,
// []bool or []string. A scalar has an empty Shape and one element.
type Tensor struct {
	DType DType
	Shape []int
	Data  any
	// External, when set, says that Data holds the bytes of a file (a
	// model's external data, or raw_data embedded in the model file itself,
	// often memory-mapped): an encoder may refer
	// to the file instead of copying the bytes (see onnx.EncodeExternal),
	// so that large weights reach a backend process without passing
	// through a message. Data must then not be modified. A backend that
	// packed such a weight for every reader may release it: Data nil (see
	// Released).
	External *ExternalData
}

// Released reports whether t is a weight whose bytes are only in its file:
// a backend dropped its data once every reader had it packed (graph
// Options.ReleasePackedWeights). Its DType and Shape still hold.
func (t *Tensor) Released() bool { return t != nil && t.Data == nil && t.External != nil }

// ExternalData locates a tensor's bytes in a file, as ONNX's external data
// does: Location is relative to Dir, the model's directory (absolute, with
// symbolic links resolved), and the bytes are [Offset, Offset+Length).
type ExternalData struct {
	Dir      string
	Location string
	Offset   int64
	Length   int64
	// Mapped says that the tensor's data is a private mapping of exactly
	// these bytes of the file (plus the start of its first page), not a
	// copy: dropping its pages loses nothing.
	Mapped bool
	// File is the identity of the file the bytes were loaded from (zero
	// when unknown). Whoever opens Location again by path (a backend
	// decoding a reference, a WeightStore) refuses a file that is not
	// this one: a model renamed over the path, or rewritten in place,
	// would otherwise give the loaded graph another model's weights.
	File FileIdentity
}

// FileIdentity tells one version of a file from another: which file it is
// (device and inode: a file renamed over a path is another file) and what
// it held (size, and modification time in nanoseconds since the Unix
// epoch: a file written in place changes them).
type FileIdentity struct {
	Dev, Ino  uint64
	Size      int64
	ModTimeNs int64
}

// Known reports whether id was recorded (is not the zero value).
func (id FileIdentity) Known() bool { return id != FileIdentity{} }

// NumElements returns the product of dims (1 for a scalar). It returns -1 if
// a dim is negative or the product overflows int64.
func NumElements(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return -1
		}
		n *= int64(d)
	}
	return n
}

// NewTensor allocates a zero-filled tensor. It panics on a negative dim: callers
// validate shapes from untrusted input before allocating.
func NewTensor(dt DType, shape []int) *Tensor {
	n := NumElements(shape)
	if n < 0 {
		panic(fmt.Sprintf("ir.NewTensor: invalid shape %v", shape))
	}
	return &Tensor{DType: dt, Shape: append([]int(nil), shape...), Data: MakeSlice(dt, int(n))}
}

// MakeSlice allocates a zero-filled backing slice of n elements of type dt.
func MakeSlice(dt DType, n int) any {
	switch dt.Storage() {
	case Float:
		return make([]float32, n)
	case Double:
		return make([]float64, n)
	case Uint16:
		return make([]uint16, n)
	case Int64:
		return make([]int64, n)
	case Int32:
		return make([]int32, n)
	case Int16:
		return make([]int16, n)
	case Int8:
		return make([]int8, n)
	case Uint8:
		return make([]uint8, n)
	case Uint32:
		return make([]uint32, n)
	case Uint64:
		return make([]uint64, n)
	case Bool:
		return make([]bool, n)
	case String:
		return make([]string, n)
	}
	panic(fmt.Sprintf("ir.MakeSlice: unsupported dtype %v", dt))
}

// FromSlice wraps data (not copied) as a tensor of the given shape. The
// element type is taken from the slice's Go type; float16 data must be built
// with DType set explicitly.
func FromSlice(shape []int, data any) *Tensor {
	return &Tensor{DType: dtypeOfSlice(data), Shape: append([]int(nil), shape...), Data: data}
}

// Scalar returns a rank-0 tensor holding v.
func Scalar[T float32 | float64 | int64 | int32 | bool](v T) *Tensor {
	return FromSlice(nil, []T{v})
}

func dtypeOfSlice(data any) DType {
	switch data.(type) {
	case []float32:
		return Float
	case []float64:
		return Double
	case []int64:
		return Int64
	case []int32:
		return Int32
	case []int16:
		return Int16
	case []int8:
		return Int8
	case []uint8:
		return Uint8
	case []uint16:
		return Uint16
	case []uint32:
		return Uint32
	case []uint64:
		return Uint64
	case []bool:
		return Bool
	case []string:
		return String
	}
	return Undefined
}

// Len returns the number of elements in the backing slice.
func (t *Tensor) Len() int {
	switch d := t.Data.(type) {
	case []float32:
		return len(d)
	case []float64:
		return len(d)
	case []int64:
		return len(d)
	case []int32:
		return len(d)
	case []int16:
		return len(d)
	case []int8:
		return len(d)
	case []uint8:
		return len(d)
	case []uint16:
		return len(d)
	case []uint32:
		return len(d)
	case []uint64:
		return len(d)
	case []bool:
		return len(d)
	case []string:
		return len(d)
	}
	return 0
}

// Rank returns len(Shape).
func (t *Tensor) Rank() int { return len(t.Shape) }

// Bytes returns the in-memory size of the data.
func (t *Tensor) Bytes() int64 { return int64(t.Len()) * int64(t.DType.Size()) }

// Check verifies that the data slice matches DType and Shape.
func (t *Tensor) Check() error {
	if t == nil {
		return fmt.Errorf("nil tensor")
	}
	n := NumElements(t.Shape)
	if n < 0 {
		return fmt.Errorf("invalid shape %v", t.Shape)
	}
	want := t.DType.Storage()
	if got := dtypeOfSlice(t.Data); got != want {
		return fmt.Errorf("tensor of dtype %v holds %T", t.DType, t.Data)
	}
	if int64(t.Len()) != n {
		return fmt.Errorf("shape %v needs %d elements, data has %d", t.Shape, n, t.Len())
	}
	return nil
}

// Float32s returns the backing slice of a float32 tensor (nil otherwise).
func (t *Tensor) Float32s() []float32 { s, _ := t.Data.([]float32); return s }

// Int64s returns the backing slice of an int64 tensor (nil otherwise).
func (t *Tensor) Int64s() []int64 { s, _ := t.Data.([]int64); return s }

// Bools returns the backing slice of a bool tensor (nil otherwise).
func (t *Tensor) Bools() []bool { s, _ := t.Data.([]bool); return s }

// AsInt64s converts the elements of an integer or bool tensor to int64 (a
// copy unless the tensor already is int64). It is meant for small index and
// shape tensors. The narrow integers (int4, uint4, int2, uint2) count; the
// narrow floats do not.
func (t *Tensor) AsInt64s() ([]int64, error) {
	if t.DType.NarrowFloat() {
		return nil, fmt.Errorf("expected an integer tensor, got %v", t.DType)
	}
	switch d := t.Data.(type) {
	case []int64:
		return d, nil
	case []int32:
		return widen(d), nil
	case []int16:
		return widen(d), nil
	case []int8:
		return widen(d), nil
	case []uint8:
		return widen(d), nil
	case []uint16:
		if t.DType == Uint16 {
			return widen(d), nil
		}
	case []uint32:
		return widen(d), nil
	case []uint64:
		return widen(d), nil
	case []bool:
		out := make([]int64, len(d))
		for i, b := range d {
			if b {
				out[i] = 1
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("expected an integer tensor, got %v", t.DType)
}

func widen[T int32 | int16 | int8 | uint8 | uint16 | uint32 | uint64](s []T) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	c := NewTensor(t.DType, t.Shape)
	CopyData(c.Data, t.Data)
	return c
}

// CopyData copies src into dst, two backing slices of the same Go type
// (as Tensor.Data holds); the two must have the same Go type.
func CopyData(dst, src any) {
	switch d := dst.(type) {
	case []float32:
		copy(d, src.([]float32))
	case []float64:
		copy(d, src.([]float64))
	case []int64:
		copy(d, src.([]int64))
	case []int32:
		copy(d, src.([]int32))
	case []int16:
		copy(d, src.([]int16))
	case []int8:
		copy(d, src.([]int8))
	case []uint8:
		copy(d, src.([]uint8))
	case []uint16:
		copy(d, src.([]uint16))
	case []uint32:
		copy(d, src.([]uint32))
	case []uint64:
		copy(d, src.([]uint64))
	case []bool:
		copy(d, src.([]bool))
	case []string:
		copy(d, src.([]string))
	}
}

// SliceData returns elements [lo, hi) of a backing slice (as Tensor.Data
// holds), sharing its memory; nil for another type.
func SliceData(data any, lo, hi int) any {
	switch d := data.(type) {
	case []float32:
		return d[lo:hi]
	case []float64:
		return d[lo:hi]
	case []int64:
		return d[lo:hi]
	case []int32:
		return d[lo:hi]
	case []int16:
		return d[lo:hi]
	case []int8:
		return d[lo:hi]
	case []uint8:
		return d[lo:hi]
	case []uint16:
		return d[lo:hi]
	case []uint32:
		return d[lo:hi]
	case []uint64:
		return d[lo:hi]
	case []bool:
		return d[lo:hi]
	case []string:
		return d[lo:hi]
	}
	return nil
}

// ClearData sets every element of a backing slice (as Tensor.Data holds) to
// its zero value.
func ClearData(data any) {
	switch d := data.(type) {
	case []float32:
		clear(d)
	case []float64:
		clear(d)
	case []int64:
		clear(d)
	case []int32:
		clear(d)
	case []int16:
		clear(d)
	case []int8:
		clear(d)
	case []uint8:
		clear(d)
	case []uint16:
		clear(d)
	case []uint32:
		clear(d)
	case []uint64:
		clear(d)
	case []bool:
		clear(d)
	case []string:
		clear(d)
	}
}

// ShapeString formats a shape as "1x512x768" ("scalar" for rank 0).
func ShapeString(shape []int) string {
	if len(shape) == 0 {
		return "scalar"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return strings.Join(parts, "x")
}

// String describes the tensor briefly: dtype, shape and the first values.
func (t *Tensor) String() string {
	return fmt.Sprintf("%v[%s] %s", t.DType, ShapeString(t.Shape), t.Preview(6))
}

// Preview formats up to n leading elements.
func (t *Tensor) Preview(n int) string {
	var b strings.Builder
	b.WriteByte('[')
	l := t.Len()
	for i := 0; i < l && i < n; i++ {
		if i > 0 {
			b.WriteString(" ")
		}
		switch d := t.Data.(type) {
		case []float32:
			fmt.Fprintf(&b, "%.6g", d[i])
		case []float64:
			fmt.Fprintf(&b, "%.6g", d[i])
		case []uint16:
			if t.DType == Float16 {
				fmt.Fprintf(&b, "%.4g", Float16ToFloat32(d[i]))
			} else {
				fmt.Fprint(&b, d[i])
			}
		case []int64:
			fmt.Fprint(&b, d[i])
		case []int32:
			fmt.Fprint(&b, d[i])
		case []int16:
			fmt.Fprint(&b, d[i])
		case []int8:
			fmt.Fprint(&b, d[i])
		case []uint8:
			if t.DType.NarrowFloat() {
				fmt.Fprintf(&b, "%.4g", NarrowFloatToFloat32(t.DType, d[i]))
			} else {
				fmt.Fprint(&b, d[i])
			}
		case []uint32:
			fmt.Fprint(&b, d[i])
		case []uint64:
			fmt.Fprint(&b, d[i])
		case []bool:
			fmt.Fprint(&b, d[i])
		case []string:
			fmt.Fprintf(&b, "%q", d[i])
		}
	}
	if l > n {
		b.WriteString(" …")
	}
	b.WriteByte(']')
	return b.String()
}
