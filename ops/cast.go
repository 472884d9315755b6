package ops

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/attnrun/attnrun/ir"
)

// Cast converts a tensor's elements to the type named by attribute `to`;
// CastLike converts to the type of its second input. Conversions follow C
// (and numpy): float to integer truncates toward zero, integer narrowing
// wraps, anything to bool is `!= 0` (NaN is true), bool to a number is 0 or
// 1, and float16 converts through float32. String conversions (Cast-9+)
// parse and print numbers; bfloat16 (Cast-13+) converts through float32
// with round-to-nearest-even. Cast-19's `saturate` is not supported.

// castTypes13 are the types Cast takes from opset 13 on: bfloat16 joins.
var castTypes13 = append(append([]ir.DType{}, AllTypes...), ir.BFloat16)

func init() {
	Register(&Schema{
		OpType: "Cast", Since: 6, Until: 8, MinInputs: 1, MaxInputs: 1,
		TypeInput: 0, DTypes: plainTypes,
		Infer: inferCast(plainTypes), Run: runCast(plainTypes),
		Doc: "elementwise type conversion to attribute `to` (numeric and bool types)",
	})
	Register(&Schema{
		OpType: "Cast", Since: 9, Until: 12, MinInputs: 1, MaxInputs: 1,
		TypeInput: 0, DTypes: AllTypes,
		Infer: inferCast(AllTypes), Run: runCast(AllTypes),
		Doc: "elementwise type conversion to attribute `to` (numeric, bool and string types)",
	})
	Register(&Schema{
		OpType: "Cast", Since: 13, Until: 18, MinInputs: 1, MaxInputs: 1,
		TypeInput: 0, DTypes: castTypes13,
		Infer: inferCast(castTypes13), Run: runCast(castTypes13),
		Doc: "elementwise type conversion to attribute `to` (numeric incl. bfloat16, bool and string types)",
	})
	Register(&Schema{
		OpType: "CastLike", Since: 15, Until: 18, MinInputs: 2, MaxInputs: 2,
		TypeInput: 0, DTypes: castTypes13,
		Infer: inferCastLike, Run: runCastLike,
		Doc: "elementwise type conversion to the type of the second input",
	})
}

// castTarget reads and validates attribute `to`.
func castTarget(n *ir.Node, allowed []ir.DType) (ir.DType, error) {
	if n.Attr("to") == nil {
		return 0, n.Errorf("missing required attribute \"to\"")
	}
	v, err := n.AttrInt("to", 0)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, n.Errorf("attribute \"to\" = %d is not a data type", v)
	}
	dt := ir.DType(v)
	if !slices.Contains(allowed, dt) {
		return 0, n.Errorf("cannot cast to %v (attribute \"to\" = %d); casts go to %s", dt, v, typeList(allowed))
	}
	return dt, nil
}

func inferCast(allowed []ir.DType) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := needValues(n, in, 1); err != nil {
			return nil, err
		}
		to, err := castTarget(n, allowed)
		if err != nil {
			return nil, err
		}
		return []Value{castValue(in[0], to)}, nil
	}
}

// castValue is the output Value of casting v to type to; it keeps the
// symbolic contents of integer shape values cast between integer types.
func castValue(v Value, to ir.DType) Value {
	t := v.Type
	t.DType = to
	t.Shape = slices.Clone(t.Shape)
	out := Value{Type: t}
	if v.Sym != nil && v.Type.DType.IsInt() && (to == ir.Int64 || to == ir.Int32) {
		out.Sym = slices.Clone(v.Sym)
	}
	return out
}

func runCast(allowed []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 1); err != nil {
			return nil, err
		}
		to, err := castTarget(n, allowed)
		if err != nil {
			return nil, err
		}
		if err := checkType(n, "input", in[0].DType, allowed); err != nil {
			return nil, err
		}
		out, err := castTensor(ctx, in[0], to)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

func inferCastLike(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := needValues(n, in, 2); err != nil {
		return nil, err
	}
	for i, what := range []string{"input", "target_type"} {
		if err := checkType(n, what, in[i].Type.DType, castTypes13); err != nil {
			return nil, err
		}
	}
	return []Value{castValue(in[0], in[1].Type.DType)}, nil
}

func runCastLike(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkTensors(n, in, 2); err != nil {
		return nil, err
	}
	for i, what := range []string{"input", "target_type"} {
		if err := checkType(n, what, in[i].DType, castTypes13); err != nil {
			return nil, err
		}
	}
	out, err := castTensor(ctx, in[0], in[1].DType)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{out}, nil
}

// CastTensor returns a new tensor holding t's elements converted to type to
// with Cast's rules.
func CastTensor(t *ir.Tensor, to ir.DType) (*ir.Tensor, error) { return castTensor(nil, t, to) }

// castTensor is CastTensor with the output from ctx's allocator.
func castTensor(ctx *Context, t *ir.Tensor, to ir.DType) (*ir.Tensor, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if !t.DType.Known() {
		return nil, fmt.Errorf("cannot cast from %v", t.DType)
	}
	out, err := newOutput(ctx, to, t.Shape)
	if err != nil {
		return nil, err
	}
	if t.DType == to {
		ir.CopyData(out.Data, t.Data)
		return out, nil
	}
	switch {
	case to == ir.String:
		err = castToString(out.Data.([]string), t)
	case t.DType == ir.String:
		err = castFromString(out, t.Data.([]string))
	case to == ir.Float16:
		// Through float32: convert to a float32 tensor first.
		var f *ir.Tensor
		if f, err = CastTensor(t, ir.Float); err == nil {
			float32ToHalf(out.Data.([]uint16), f.Data.([]float32))
		}
	case t.DType == ir.Float16:
		err = castNumeric(out, halfToFloat32(t.Data.([]uint16)))
	case to == ir.BFloat16:
		var f *ir.Tensor
		if f, err = CastTensor(t, ir.Float); err == nil {
			dst := out.Data.([]uint16)
			for i, v := range f.Data.([]float32) {
				dst[i] = ir.Float32ToBFloat16(v)
			}
		}
	case t.DType == ir.BFloat16:
		src := t.Data.([]uint16)
		f := make([]float32, len(src))
		for i, v := range src {
			f[i] = ir.BFloat16ToFloat32(v)
		}
		err = castNumeric(out, f)
	default:
		err = castNumeric(out, t.Data)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// castNumeric converts src (a numeric or bool slice, never float16 bits) into
// out, whose type is not float16 or string.
func castNumeric(out *ir.Tensor, src any) error {
	switch s := src.(type) {
	case []float32:
		return castFrom(out, s)
	case []float64:
		return castFrom(out, s)
	case []int64:
		return castFrom(out, s)
	case []int32:
		return castFrom(out, s)
	case []int16:
		return castFrom(out, s)
	case []int8:
		return castFrom(out, s)
	case []uint8:
		return castFrom(out, s)
	case []uint16:
		return castFrom(out, s)
	case []uint32:
		return castFrom(out, s)
	case []uint64:
		return castFrom(out, s)
	case []bool:
		b := make([]uint8, len(s))
		for i, v := range s {
			if v {
				b[i] = 1
			}
		}
		return castFrom(out, b)
	}
	return fmt.Errorf("cannot cast %T", src)
}

// castFrom converts numeric s into out.
func castFrom[S numElem](out *ir.Tensor, s []S) error {
	switch d := out.Data.(type) {
	case []float32:
		convertInto(d, s)
	case []float64:
		convertInto(d, s)
	case []int64:
		convertInto(d, s)
	case []int32:
		convertInto(d, s)
	case []int16:
		convertInto(d, s)
	case []int8:
		convertInto(d, s)
	case []uint8:
		convertInto(d, s)
	case []uint16:
		if out.DType == ir.Float16 {
			return fmt.Errorf("internal: float16 target in castFrom")
		}
		convertInto(d, s)
	case []uint32:
		convertInto(d, s)
	case []uint64:
		convertInto(d, s)
	case []bool:
		for i, v := range s {
			d[i] = v != 0
		}
	default:
		return fmt.Errorf("cannot cast to %v", out.DType)
	}
	return nil
}

// convertInto sets d[i] = D(s[i]) with Go's (C-like) conversion rules.
func convertInto[S, D numElem](d []D, s []S) {
	s = s[:len(d)]
	for i, v := range s {
		d[i] = D(v)
	}
}

// castToString prints each element: floats in the shortest form that
// reads back exactly ("0.5", "1e-07", "NaN", "INF", "-INF" as numpy and
// ONNX's reference do), integers in decimal, bools as "True"/"False".
func castToString(dst []string, t *ir.Tensor) error {
	switch s := t.Data.(type) {
	case []float32:
		for i, v := range s {
			dst[i] = formatFloat(float64(v), 32)
		}
	case []float64:
		for i, v := range s {
			dst[i] = formatFloat(v, 64)
		}
	case []uint16:
		for i, v := range s {
			if t.DType == ir.Float16 {
				dst[i] = formatFloat(float64(ir.Float16ToFloat32(v)), 32)
			} else {
				dst[i] = strconv.FormatUint(uint64(v), 10)
			}
		}
	case []bool:
		for i, v := range s {
			dst[i] = "False"
			if v {
				dst[i] = "True"
			}
		}
	default:
		ints, err := t.AsInt64s()
		if err != nil {
			return err
		}
		if u, ok := s.([]uint64); ok {
			for i, v := range u {
				dst[i] = strconv.FormatUint(v, 10)
			}
			return nil
		}
		for i, v := range ints {
			dst[i] = strconv.FormatInt(v, 10)
		}
	}
	return nil
}

func formatFloat(v float64, bits int) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "INF"
	case math.IsInf(v, -1):
		return "-INF"
	}
	return strconv.FormatFloat(v, 'g', -1, bits)
}

// castFromString parses each element into out's type.
func castFromString(out *ir.Tensor, src []string) error {
	if out.DType == ir.Bool {
		d := out.Data.([]bool)
		for i, s := range src {
			s = strings.TrimSpace(s)
			if b, err := strconv.ParseBool(s); err == nil {
				d[i] = b
				continue
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return fmt.Errorf("element %d: cannot parse %q as bool", i, src[i])
			}
			d[i] = f != 0
		}
		return nil
	}
	if out.DType.IsInt() {
		ints := make([]int64, len(src))
		for i, s := range src {
			s = strings.TrimSpace(s)
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				f, ferr := strconv.ParseFloat(s, 64)
				if ferr != nil {
					return fmt.Errorf("element %d: cannot parse %q as %v", i, src[i], out.DType)
				}
				v = int64(f)
			}
			ints[i] = v
		}
		if out.DType == ir.Uint64 { // keep values above MaxInt64
			d := out.Data.([]uint64)
			for i, s := range src {
				if u, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64); err == nil {
					d[i] = u
				} else {
					d[i] = uint64(ints[i])
				}
			}
			return nil
		}
		return castFrom(out, ints)
	}
	fl := make([]float64, len(src))
	for i, s := range src {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil && !isRangeErr(err) {
			return fmt.Errorf("element %d: cannot parse %q as %v", i, src[i], out.DType)
		}
		fl[i] = v
	}
	switch out.DType {
	case ir.Float16:
		f32 := convertSlice[float64, float32](fl)
		float32ToHalf(out.Data.([]uint16), f32)
		return nil
	case ir.Float, ir.Double:
		return castFrom(out, fl)
	}
	return fmt.Errorf("cannot cast string to %v", out.DType)
}

// isRangeErr reports a ParseFloat overflow, whose result (±Inf or 0) is kept.
func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
