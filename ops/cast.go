package ops

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/attnrun/attnrun/ir"
)

// Cast converts a tensor's elements to the type named by attribute `to`;
// CastLike converts to the type of its second input. Conversions follow C
// (and numpy): float to integer truncates toward zero, integer narrowing
// wraps, anything to bool is `!= 0` (NaN is true), bool to a number is 0 or
// 1, and float16 converts through float32. String conversions (Cast-9+)
// parse and print numbers; bfloat16 (Cast-13+) converts through float32
// with round-to-nearest-even.
//
// The narrow types (ir.DType.Narrow) join at 19 (float8, with attribute
// `saturate`), 21 (int4, uint4), 23 (float4e2m1), 24 (float8e8m0, with
// attribute `round_mode`) and 25 (int2, uint2). A float converts to float8
// or float4 rounding to nearest even; out of range, `saturate` (default 1)
// gives ±max, else ±Inf (e5m2) or NaN. Up to Cast-23 a saturating cast of
// ±Inf to the fnuz encodings gives NaN; from 24 on it gives ±max too (the
// two versions' tables differ). To float8e8m0 the value rounds up, down or
// to nearest (`round_mode`) to a power of two. To a narrow integer a value
// converts as to int64 and keeps its low bits (-9 to int4 is 7), as Cast
// does for every integer narrowing. From a narrow type the value converts
// exactly to float32 or int64 first.

// castTypesAt returns the types Cast and CastLike convert between in the
// version starting at opset since: numeric and bool types; string from 9;
// bfloat16 from 13; narrow types from 19 (narrowTypesAt).
func castTypesAt(since int) []ir.DType {
	types := append([]ir.DType{}, plainTypes...)
	if since >= 9 {
		types = append(types, ir.String)
	}
	if since >= 13 {
		types = append(types, ir.BFloat16)
	}
	return append(types, narrowTypesAt(since)...)
}

func init() {
	for _, r := range versions(1, 6, 9, 13, 19, 21, 23, 24, 25) {
		types, since := castTypesAt(r[0]), r[0]
		doc := "elementwise type conversion to attribute `to`"
		switch {
		case since >= 24:
			doc += " (narrow floats with saturate; float8e8m0 with round_mode)"
		case since >= 19:
			doc += " (narrow floats rounded to nearest even, with saturate)"
		}
		Register(&Schema{
			OpType: "Cast", Since: r[0], Until: r[1], MinInputs: 1, MaxInputs: 1,
			TypeInput: 0, DTypes: types,
			Infer: inferCast(types, since), Run: runCast(types, since),
			Doc: doc,
		})
	}
	for _, r := range versions(15, 19, 21, 23, 24, 25) {
		types, since := castTypesAt(r[0]), r[0]
		Register(&Schema{
			OpType: "CastLike", Since: r[0], Until: r[1], MinInputs: 2, MaxInputs: 2,
			TypeInput: 0, DTypes: types, NarrowInputs: []int{1},
			Infer: inferCastLike(types, since), Run: runCastLike(types, since),
			Doc: "elementwise type conversion to the type of the second input",
		})
	}
}

// castTypeNames are Cast-1's names for attribute `to` (a string there).
var castTypeNames = map[string]ir.DType{
	"FLOAT": ir.Float, "UINT8": ir.Uint8, "INT8": ir.Int8, "UINT16": ir.Uint16, "INT16": ir.Int16,
	"INT32": ir.Int32, "INT64": ir.Int64, "BOOL": ir.Bool, "FLOAT16": ir.Float16, "DOUBLE": ir.Double,
	"UINT32": ir.Uint32, "UINT64": ir.Uint64,
}

// castTarget reads and validates attribute `to` (a type name before opset
// 6, a TensorProto data type number after).
func castTarget(n *ir.Node, allowed []ir.DType, since int) (ir.DType, error) {
	a := n.Attr("to")
	if a == nil {
		return 0, n.Errorf("missing required attribute \"to\"")
	}
	var dt ir.DType
	if since < 6 {
		name := strings.ToUpper(string(a.String))
		if a.Type != ir.AttrString {
			return 0, n.Errorf("attribute \"to\" of Cast-1 must be a type name such as \"FLOAT\", got %v", a.Type)
		}
		t, ok := castTypeNames[name]
		if !ok {
			return 0, n.Errorf("attribute \"to\" = %q is not a type name Cast-1 knows", a.String)
		}
		dt = t
	} else {
		v, err := n.AttrInt("to", 0)
		if err != nil {
			return 0, n.Errorf("%w", err)
		}
		if v < math.MinInt32 || v > math.MaxInt32 {
			return 0, n.Errorf("attribute \"to\" = %d is not a data type", v)
		}
		dt = ir.DType(v)
	}
	if !slices.Contains(allowed, dt) {
		if dt.Narrow() {
			return 0, n.Errorf("cannot cast to %v: %s-%d does not define it (a later opset does)", dt, n.OpType, since)
		}
		return 0, n.Errorf("cannot cast to %v (attribute \"to\" = %d); casts go to %s", dt, int32(dt), typeList(allowed))
	}
	return dt, nil
}

// castOptions are the attributes of Cast-19 and later that shape a
// conversion to a narrow float type.
type castOptions struct {
	// saturate: out-of-range values become ±max (else ±Inf or NaN).
	saturate bool
	// fnuzInfNaN: a saturating cast of ±Inf to a fnuz float8 gives NaN
	// (Cast-19 to 23) rather than ±max (Cast-24 on).
	fnuzInfNaN bool
	// e8m0 is the rounding mode to float8e8m0.
	e8m0 ir.E8M0Rounding
}

// defaultCastOptions are the attribute defaults of the latest Cast.
var defaultCastOptions = castOptions{saturate: true, e8m0: ir.E8M0Up}

// castAttrs reads Cast's saturate (19 on) and round_mode (24 on).
func castAttrs(n *ir.Node, since int) (castOptions, error) {
	o := defaultCastOptions
	o.fnuzInfNaN = since < 24
	if since < 19 {
		return o, nil
	}
	s, err := n.AttrInt("saturate", 1)
	if err != nil {
		return o, n.Errorf("%w", err)
	}
	if s != 0 && s != 1 {
		return o, n.Errorf("attribute saturate = %d must be 0 or 1", s)
	}
	o.saturate = s == 1
	if since < 24 {
		return o, nil
	}
	mode, err := n.AttrString("round_mode", "up")
	if err != nil {
		return o, n.Errorf("%w", err)
	}
	switch mode {
	case "up":
		o.e8m0 = ir.E8M0Up
	case "down":
		o.e8m0 = ir.E8M0Down
	case "nearest":
		o.e8m0 = ir.E8M0Nearest
	default:
		return o, n.Errorf("attribute round_mode = %q is not up, down or nearest", mode)
	}
	return o, nil
}

func inferCast(allowed []ir.DType, since int) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := needValues(n, in, 1); err != nil {
			return nil, err
		}
		to, err := castTarget(n, allowed, since)
		if err != nil {
			return nil, err
		}
		if _, err := castAttrs(n, since); err != nil {
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

func runCast(allowed []ir.DType, since int) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 1); err != nil {
			return nil, err
		}
		to, err := castTarget(n, allowed, since)
		if err != nil {
			return nil, err
		}
		o, err := castAttrs(n, since)
		if err != nil {
			return nil, err
		}
		if err := checkType(n, "input", in[0].DType, allowed); err != nil {
			return nil, err
		}
		out, err := castTensor(ctx, in[0], to, o)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

func inferCastLike(allowed []ir.DType, since int) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := needValues(n, in, 2); err != nil {
			return nil, err
		}
		for i, what := range []string{"input", "target_type"} {
			if err := checkType(n, what, in[i].Type.DType, allowed); err != nil {
				return nil, err
			}
		}
		if _, err := castAttrs(n, since); err != nil {
			return nil, err
		}
		return []Value{castValue(in[0], in[1].Type.DType)}, nil
	}
}

func runCastLike(allowed []ir.DType, since int) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 2); err != nil {
			return nil, err
		}
		for i, what := range []string{"input", "target_type"} {
			if err := checkType(n, what, in[i].DType, allowed); err != nil {
				return nil, err
			}
		}
		o, err := castAttrs(n, since)
		if err != nil {
			return nil, err
		}
		out, err := castTensor(ctx, in[0], in[1].DType, o)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

// CastTensor returns a new tensor holding t's elements converted to type to
// with the latest Cast's rules (and attribute defaults).
func CastTensor(t *ir.Tensor, to ir.DType) (*ir.Tensor, error) {
	return castTensor(nil, t, to, defaultCastOptions)
}

// castTensor is CastTensor with the output from ctx's allocator and the
// node's options.
func castTensor(ctx *Context, t *ir.Tensor, to ir.DType, o castOptions) (*ir.Tensor, error) {
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
	if t.DType.Narrow() || to.Narrow() {
		if err := castNarrow(out, t, o); err != nil {
			return nil, err
		}
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
		err = castNumericThreads(computeThreads(ctx), out, t.Data)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// castParallelMin is the fewest elements a thread of a Cast takes.
const castParallelMin = 1 << 16

// castNumericThreads is castNumeric split over up to threads threads: a
// causal mask's bool → float32 Cast at S=16384 (268 M elements) took 1.7 s
// on one.
func castNumericThreads(threads int, out *ir.Tensor, src any) error {
	n := out.Len()
	if threads <= 1 || n < 2*castParallelMin {
		return castNumeric(out, src)
	}
	var mu sync.Mutex
	var first error
	computeParallel(threads, n, castParallelMin, func(lo, hi int) {
		part := &ir.Tensor{DType: out.DType, Shape: []int{hi - lo}, Data: ir.SliceData(out.Data, lo, hi)}
		if err := castNumeric(part, ir.SliceData(src, lo, hi)); err != nil {
			mu.Lock()
			first = cmp.Or(first, err)
			mu.Unlock()
		}
	})
	return first
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
		return castFrom(out, boolBytes(s))
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
