package ir

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Conversion between *Tensor and gorgonia.org/tensor's *tensor.Dense, the
// tensor type of attnrun's public run API.
//
// Both directions share the backing slice whenever they can (no copy): a
// Dense made by ToDense aliases the Tensor's Data and vice versa. They copy
// only for a gorgonia view that is not contiguous (a transposed or strided
// view is materialized), for a scalar Dense (gorgonia hides a scalar's
// backing slice), and for gorgonia's platform-sized int and uint, which
// become int64 and uint64.
//
// Quirks of gorgonia handled here:
//   - Rank 0: a scalar Tensor (empty Shape, one element) becomes a Dense of
//     shape () and back.
//   - Zero-size dims: gorgonia panics when a Dense with a zero dim is built
//     from a backing slice or when its Data is read, so ToDense builds such
//     a Dense with tensor.NewDense and FromDense never reads its data; the
//     shape (e.g. (0, 3)) survives the round trip.
//   - float16 and bfloat16 have no gorgonia dtype: they travel as a uint16
//     Dense holding the IEEE bit patterns. FromDense gives such a Dense back
//     as Uint16; FromDenseAs(d, Float16) restores the element type.

// DenseDType returns the gorgonia dtype that holds elements of dt. Float16
// and BFloat16 map to tensor.Uint16 (their bit patterns).
func DenseDType(dt DType) (tensor.Dtype, error) {
	switch dt.Storage() {
	case Float:
		return tensor.Float32, nil
	case Double:
		return tensor.Float64, nil
	case Uint16:
		return tensor.Uint16, nil
	case Int64:
		return tensor.Int64, nil
	case Int32:
		return tensor.Int32, nil
	case Int16:
		return tensor.Int16, nil
	case Int8:
		return tensor.Int8, nil
	case Uint8:
		return tensor.Uint8, nil
	case Uint32:
		return tensor.Uint32, nil
	case Uint64:
		return tensor.Uint64, nil
	case Bool:
		return tensor.Bool, nil
	case String:
		return tensor.String, nil
	}
	return tensor.Dtype{}, fmt.Errorf("dtype %v has no gorgonia tensor type", dt)
}

// DTypeOfDense returns the DType of a gorgonia dtype. tensor.Uint16 maps to
// Uint16 (see FromDenseAs for float16); tensor.Int and tensor.Uint map to
// Int64 and Uint64, the types FromDense converts them to. Complex and
// pointer dtypes have no DType.
func DTypeOfDense(dt tensor.Dtype) (DType, error) {
	switch dt {
	case tensor.Float32:
		return Float, nil
	case tensor.Float64:
		return Double, nil
	case tensor.Uint16:
		return Uint16, nil
	case tensor.Int64, tensor.Int:
		return Int64, nil
	case tensor.Int32:
		return Int32, nil
	case tensor.Int16:
		return Int16, nil
	case tensor.Int8:
		return Int8, nil
	case tensor.Uint8:
		return Uint8, nil
	case tensor.Uint32:
		return Uint32, nil
	case tensor.Uint64, tensor.Uint:
		return Uint64, nil
	case tensor.Bool:
		return Bool, nil
	case tensor.String:
		return String, nil
	}
	return Undefined, fmt.Errorf("gorgonia dtype %v has no attnrun dtype", dt)
}

// ToDense wraps t as a gorgonia Dense sharing t's backing slice. Float16 and
// BFloat16 tensors become uint16 Dense values (bit patterns).
func ToDense(t *Tensor) (*tensor.Dense, error) {
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("to dense: %w", err)
	}
	gdt, err := DenseDType(t.DType)
	if err != nil {
		return nil, fmt.Errorf("to dense: %w", err)
	}
	shape := tensor.Shape(append([]int{}, t.Shape...))
	if t.Len() == 0 {
		// gorgonia panics on an empty backing slice; NewDense allocates
		// nothing for a zero-size shape and keeps the shape.
		return tensor.NewDense(gdt, shape), nil
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(t.Data)), nil
}

// FromDense returns d as a Tensor sharing d's backing slice where possible
// (see the package notes on conversion). A uint16 Dense becomes a Uint16
// tensor; use FromDenseAs to read it as float16.
func FromDense(d *tensor.Dense) (*Tensor, error) {
	if d == nil {
		return nil, fmt.Errorf("from dense: nil tensor")
	}
	dt, err := DTypeOfDense(d.Dtype())
	if err != nil {
		return nil, fmt.Errorf("from dense: %w", err)
	}
	return fromDense(d, dt)
}

// FromDenseDeclared is FromDense for a value declared of type declared: a
// Dense of declared's storage type (uint16 for float16 and bfloat16, uint8
// or int8 for the narrow types) is read as declared.
func FromDenseDeclared(d *tensor.Dense, declared DType) (*Tensor, error) {
	if d != nil && declared.Known() && declared.Storage() != declared {
		if want, err := DenseDType(declared); err == nil && d.Dtype() == want {
			return FromDenseAs(d, declared)
		}
	}
	return FromDense(d)
}

// FromDenseAs is FromDense with the element type given: dt must be stored
// in d's gorgonia dtype (Float16 and BFloat16 in a uint16 Dense; any other
// dt must equal what FromDense would give).
func FromDenseAs(d *tensor.Dense, dt DType) (*Tensor, error) {
	if d == nil {
		return nil, fmt.Errorf("from dense: nil tensor")
	}
	want, err := DenseDType(dt)
	if err != nil {
		return nil, fmt.Errorf("from dense: %w", err)
	}
	got := d.Dtype()
	if got == tensor.Int {
		got = tensor.Int64
	} else if got == tensor.Uint {
		got = tensor.Uint64
	}
	if got != want {
		return nil, fmt.Errorf("from dense: a %v Dense cannot hold %v elements", d.Dtype(), dt)
	}
	return fromDense(d, dt)
}

func fromDense(d *tensor.Dense, dt DType) (*Tensor, error) {
	shape := append([]int{}, d.Shape()...)
	n := NumElements(shape)
	if n < 0 {
		return nil, fmt.Errorf("from dense: invalid shape %v", shape)
	}
	if n == 0 {
		// Reading Data of a zero-size Dense panics in gorgonia.
		return &Tensor{DType: dt, Shape: shape, Data: MakeSlice(dt, 0)}, nil
	}
	if d.IsMasked() {
		return nil, fmt.Errorf("from dense: masked tensors are not supported")
	}
	if !d.DataOrder().IsRowMajor() {
		return nil, fmt.Errorf("from dense: column-major tensors are not supported")
	}
	if d.RequiresIterator() && d.IsMaterializable() {
		m, ok := d.Materialize().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("from dense: materializing a view gave %T", d.Materialize())
		}
		d = m
	}
	if len(shape) == 0 {
		return scalarFromDense(d.Data(), dt)
	}
	data, err := trimSlice(d.Data(), int(n))
	if err != nil {
		return nil, fmt.Errorf("from dense: shape %v: %w", shape, err)
	}
	return &Tensor{DType: dt, Shape: shape, Data: data}, nil
}

// scalarFromDense wraps the value gorgonia returns for a rank-0 Dense.
func scalarFromDense(v any, dt DType) (*Tensor, error) {
	var data any
	switch x := v.(type) {
	case float32:
		data = []float32{x}
	case float64:
		data = []float64{x}
	case uint16:
		data = []uint16{x}
	case int64:
		data = []int64{x}
	case int:
		data = []int64{int64(x)}
	case int32:
		data = []int32{x}
	case int16:
		data = []int16{x}
	case int8:
		data = []int8{x}
	case uint8:
		data = []uint8{x}
	case uint32:
		data = []uint32{x}
	case uint64:
		data = []uint64{x}
	case uint:
		data = []uint64{uint64(x)}
	case bool:
		data = []bool{x}
	case string:
		data = []string{x}
	default:
		return nil, fmt.Errorf("from dense: unsupported scalar %T", v)
	}
	return &Tensor{DType: dt, Shape: []int{}, Data: data}, nil
}

// trimSlice returns the first n elements of a backing slice, converting
// platform int and uint to int64 and uint64.
func trimSlice(v any, n int) (any, error) {
	short := func(l int) error { return fmt.Errorf("backing slice has %d elements, want %d", l, n) }
	switch s := v.(type) {
	case []float32:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []float64:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []uint16:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []int64:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []int32:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []int16:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []int8:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []uint8:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []uint32:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []uint64:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []bool:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []string:
		if len(s) < n {
			return nil, short(len(s))
		}
		return s[:n:n], nil
	case []int:
		if len(s) < n {
			return nil, short(len(s))
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(s[i])
		}
		return out, nil
	case []uint:
		if len(s) < n {
			return nil, short(len(s))
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(s[i])
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported backing slice %T", v)
}
