package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// Common dtype sets for Schema.DTypes.
var (
	FloatTypes   = []ir.DType{ir.Float, ir.Double, ir.Float16}
	IntTypes     = []ir.DType{ir.Int8, ir.Int16, ir.Int32, ir.Int64, ir.Uint8, ir.Uint16, ir.Uint32, ir.Uint64}
	NumericTypes = append(append([]ir.DType{}, FloatTypes...), IntTypes...)
	AllTypes     = append(append([]ir.DType{}, NumericTypes...), ir.Bool, ir.String)
)

// narrowTypesAt returns the narrow element types (ir.DType.Narrow) that
// ONNX's ops defined on every tensor type allow from opset since on: float8
// from 19 (IR 9), int4 and uint4 from 21 (IR 10), float4e2m1 from 23 (IR 11),
// float8e8m0 from 24 (IR 12), int2 and uint2 from 25 (IR 13).
func narrowTypesAt(since int) []ir.DType {
	var out []ir.DType
	for _, step := range []struct {
		opset int
		types []ir.DType
	}{
		{19, []ir.DType{ir.Float8E4M3FN, ir.Float8E4M3FNUZ, ir.Float8E5M2, ir.Float8E5M2FNUZ}},
		{21, []ir.DType{ir.Uint4, ir.Int4}},
		{23, []ir.DType{ir.Float4E2M1}},
		{24, []ir.DType{ir.Float8E8M0}},
		{25, []ir.DType{ir.Uint2, ir.Int2}},
	} {
		if since >= step.opset {
			out = append(out, step.types...)
		}
	}
	return out
}

// anyTypesAt returns the element types attnrun moves for an op that ONNX
// defines on every tensor type (Reshape, Identity, Transpose...), in the
// version starting at opset since: AllTypes, bfloat16 from 13 on, and the
// narrow types of narrowTypesAt.
func anyTypesAt(since int) []ir.DType {
	out := append([]ir.DType{}, AllTypes...)
	if since >= 13 {
		out = append(out, ir.BFloat16)
	}
	return append(out, narrowTypesAt(since)...)
}

// NormAxis maps a possibly negative axis into [0, rank) or fails.
func NormAxis(axis int64, rank int) (int, error) {
	if axis < -int64(rank) || axis >= int64(rank) {
		return 0, fmt.Errorf("axis %d is out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += int64(rank)
	}
	return int(axis), nil
}

// BroadcastShapes returns the numpy broadcast of concrete shapes.
func BroadcastShapes(shapes ...[]int) ([]int, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make([]int, rank)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			switch {
			case d == out[off+i] || d == 1:
			case out[off+i] == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("shapes %v are not broadcastable", shapes)
			}
		}
	}
	return out, nil
}

// BroadcastDims is BroadcastShapes over symbolic shapes: equal symbols stay,
// a 1 yields to the other dim, and an unknown pairing gives an unknown dim.
func BroadcastDims(shapes ...ir.Shape) (ir.Shape, error) {
	rank := 0
	for _, s := range shapes {
		rank = max(rank, len(s))
	}
	out := make(ir.Shape, rank)
	for i := range out {
		out[i] = ir.Dim{Value: 1}
	}
	for _, s := range shapes {
		off := rank - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case d == o || (d.Known() && d.Value == 1):
			case o.Known() && o.Value == 1:
				out[off+i] = d
			case d.Known() && o.Known():
				return nil, fmt.Errorf("shapes %v are not broadcastable", shapes)
			case d.Known():
				out[off+i] = d // a symbol must equal the concrete size (or be 1)
			case o.Known():
			default:
				out[off+i] = ir.UnknownDim
			}
		}
	}
	return out, nil
}

// Known makes a fully known TypeInfo.
func Known(dt ir.DType, shape []int) ir.TypeInfo {
	return ir.TypeInfo{DType: dt, Shape: ir.ShapeOf(shape), RankKnown: true}
}

// Typed makes a Value from a type alone.
func Typed(dt ir.DType, shape ir.Shape) Value {
	return Value{Type: ir.TypeInfo{DType: dt, Shape: shape, RankKnown: true}}
}

// UnknownRank makes a Value of known dtype and unknown rank.
func UnknownRank(dt ir.DType) Value { return Value{Type: ir.TypeInfo{DType: dt}} }
