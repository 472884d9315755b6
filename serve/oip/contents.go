package oip

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/serve/v2pb"
)

// contentsField names the typed field of InferTensorContents that carries
// a datatype ("" for FP16 and BF16, which only travel raw).
func contentsField(dt ir.DType) string {
	switch dt {
	case ir.Bool:
		return "bool_contents"
	case ir.Int8, ir.Int16, ir.Int32:
		return "int_contents"
	case ir.Int64:
		return "int64_contents"
	case ir.Uint8, ir.Uint16, ir.Uint32:
		return "uint_contents"
	case ir.Uint64:
		return "uint64_contents"
	case ir.Float:
		return "fp32_contents"
	case ir.Double:
		return "fp64_contents"
	}
	return ""
}

// filledFields lists the typed fields of c that hold values.
func filledFields(c *v2pb.InferTensorContents) []string {
	var f []string
	add := func(n int, name string) {
		if n > 0 {
			f = append(f, name)
		}
	}
	add(len(c.GetBoolContents()), "bool_contents")
	add(len(c.GetIntContents()), "int_contents")
	add(len(c.GetInt64Contents()), "int64_contents")
	add(len(c.GetUintContents()), "uint_contents")
	add(len(c.GetUint64Contents()), "uint64_contents")
	add(len(c.GetFp32Contents()), "fp32_contents")
	add(len(c.GetFp64Contents()), "fp64_contents")
	add(len(c.GetBytesContents()), "bytes_contents")
	return f
}

// FromContents decodes a tensor from the typed contents of a gRPC message:
// the field that matches the datatype must hold exactly the tensor's
// elements and no other field may hold any; narrow integer types are range
// checked. FP16 and BF16 have no typed field and must come raw.
func FromContents(dt ir.DType, shape []int, c *v2pb.InferTensorContents) (*ir.Tensor, error) {
	want := contentsField(dt)
	if want == "" {
		return nil, Errorf(InvalidArgument, "%s has no typed contents: send it in raw_input_contents", Datatype(dt))
	}
	for _, f := range filledFields(c) {
		if f != want {
			return nil, Errorf(InvalidArgument, "%s data belongs in %s, but %s is set", Datatype(dt), want, f)
		}
	}
	t := ir.NewTensor(dt, shape)
	got, bad := 0, -1
	switch d := t.Data.(type) {
	case []bool:
		if got = len(c.GetBoolContents()); got == len(d) {
			copy(d, c.GetBoolContents())
		}
	case []float32:
		got, bad = convertInto(d, c.GetFp32Contents())
	case []float64:
		got, bad = convertInto(d, c.GetFp64Contents())
	case []int64:
		got, bad = convertInto(d, c.GetInt64Contents())
	case []uint64:
		got, bad = convertInto(d, c.GetUint64Contents())
	case []int32:
		got, bad = convertInto(d, c.GetIntContents())
	case []int16:
		got, bad = convertInto(d, c.GetIntContents())
	case []int8:
		got, bad = convertInto(d, c.GetIntContents())
	case []uint32:
		got, bad = convertInto(d, c.GetUintContents())
	case []uint16:
		got, bad = convertInto(d, c.GetUintContents())
	case []uint8:
		got, bad = convertInto(d, c.GetUintContents())
	}
	if got != t.Len() {
		return nil, Errorf(InvalidArgument, "%s has %d values for shape %v, which has %d elements", want, got, shape, t.Len())
	}
	if bad >= 0 {
		return nil, Errorf(InvalidArgument, "%s value %d is out of range for %s", want, bad, Datatype(dt))
	}
	return t, nil
}

type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// convertInto converts src into dst when their lengths match. It returns
// len(src) and the index of the first value the conversion changed (-1:
// none).
func convertInto[D, S number](dst []D, src []S) (n, bad int) {
	bad = -1
	if len(dst) != len(src) {
		return len(src), bad
	}
	for i, v := range src {
		dst[i] = D(v)
		if bad < 0 && S(dst[i]) != v && v == v { // NaN converts to NaN
			bad = i
		}
	}
	return len(src), bad
}

// ToContents encodes a tensor as typed gRPC contents. ok is false for FP16
// and BF16, which have no typed field.
func ToContents(t *ir.Tensor) (c *v2pb.InferTensorContents, ok bool) {
	c = &v2pb.InferTensorContents{}
	switch t.DType {
	case ir.Bool:
		c.BoolContents = t.Data.([]bool)
	case ir.Float:
		c.Fp32Contents = t.Data.([]float32)
	case ir.Double:
		c.Fp64Contents = t.Data.([]float64)
	case ir.Int64:
		c.Int64Contents = t.Data.([]int64)
	case ir.Uint64:
		c.Uint64Contents = t.Data.([]uint64)
	case ir.Int32:
		c.IntContents = t.Data.([]int32)
	case ir.Int16:
		c.IntContents = widen[int32](t.Data.([]int16))
	case ir.Int8:
		c.IntContents = widen[int32](t.Data.([]int8))
	case ir.Uint32:
		c.UintContents = t.Data.([]uint32)
	case ir.Uint16:
		c.UintContents = widen[uint32](t.Data.([]uint16))
	case ir.Uint8:
		c.UintContents = widen[uint32](t.Data.([]uint8))
	default:
		return nil, false
	}
	return c, true
}

func widen[D, S number](src []S) []D {
	out := make([]D, len(src))
	for i, v := range src {
		out[i] = D(v)
	}
	return out
}
