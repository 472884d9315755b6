package ops

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// The int8 (and narrower) path of quantized models: QuantizeLinear,
// DequantizeLinear and DynamicQuantizeLinear; MatMulInteger is in
// matmul_integer.go.
//
// QuantizeLinear: y = saturate(round(x / y_scale) + y_zero_point), the
// division in the type of y_scale (promoted with x's as numpy does: int32 x
// divides in float64; precision, from opset 23, names the type instead) and
// rounded half to even; y has y_zero_point's type (output_dtype from 21,
// else uint8). To float8 the quotient converts with Cast's rules (saturate,
// default 1, clips to ±max) and the zero point is not added, to float4e2m1
// it is added before converting, as ONNX's reference does.
//
// DequantizeLinear: y = (x - x_zero_point) * x_scale computed in float32
// (numpy's promotion of the reference), then rounded to x_scale's type or,
// from opset 23, output_dtype. A float8 x must have a zero zero point, a
// float4e2m1 x's is ignored, as in the reference; int32 x has none.
//
// Granularity, from y_scale's shape: a scalar (or one element) quantizes
// per tensor; a 1-D scale of x.shape[axis] elements per axis (opset 13 on,
// axis default 1); a scale of x's rank with dim ceil(x.shape[axis] /
// block_size) along axis blocked (opset 21 on, block_size > 0). The zero
// point has the scale's shape.
//
// Versions: 10 per tensor, int8/uint8; 13 per axis; 19 float8, saturate,
// float16 and bfloat16 x and scale; 21 int16/uint16, int4/uint4, blocked,
// output_dtype; 23 float4e2m1, precision (Q), output_dtype (DQ), scale
// type independent of x; 24 float8e8m0 scales; 25 int2/uint2.
//
// DynamicQuantizeLinear (opset 11) quantizes a float32 tensor to uint8 with
// the scale and zero point its range gives: scale = (max(x, 0) - min(x, 0)) /
// 255, zero point = round(clamp(-min(x, 0) / scale, 0, 255)), all in float32
// as ONNX's reference computes them.

// quantTypesAt returns the quantized types (y of QuantizeLinear, x of
// DequantizeLinear besides int32) of the version starting at opset since.
func quantTypesAt(since int) []ir.DType {
	out := []ir.DType{ir.Int8, ir.Uint8}
	steps := []struct {
		opset int
		types []ir.DType
	}{
		{19, []ir.DType{ir.Float8E4M3FN, ir.Float8E4M3FNUZ, ir.Float8E5M2, ir.Float8E5M2FNUZ}},
		{21, []ir.DType{ir.Int16, ir.Uint16, ir.Uint4, ir.Int4}},
		{23, []ir.DType{ir.Float4E2M1}},
		{25, []ir.DType{ir.Uint2, ir.Int2}},
	}
	for _, s := range steps {
		if since >= s.opset {
			out = append(out, s.types...)
		}
	}
	return out
}

// quantFloatTypesAt are the float types of x (Q) and of the scale before
// opset 23: float32 before 19, then float16 and bfloat16 too.
func quantFloatTypesAt(since int) []ir.DType {
	if since < 19 {
		return []ir.DType{ir.Float}
	}
	return []ir.DType{ir.Float, ir.Float16, ir.BFloat16}
}

func init() {
	for _, r := range versions(10, 13, 19, 21, 23, 24, 25) {
		v := quantVersion{since: r[0]}
		xTypes := append(quantFloatTypesAt(r[0]), ir.Int32)
		Register(&Schema{
			Domain: DomainONNX, OpType: "QuantizeLinear", Since: r[0], Until: r[1],
			MinInputs: 2, MaxInputs: 3, TypeInput: 0, DTypes: xTypes, NarrowInputs: []int{1, 2},
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferQuantize(n, in, v) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runQuantize(ctx, n, in, v)
			},
			Doc: "y = saturate(round(x / y_scale) + y_zero_point): per tensor, per axis or (from 21) blocked",
		})
		Register(&Schema{
			Domain: DomainONNX, OpType: "DequantizeLinear", Since: r[0], Until: r[1],
			MinInputs: 2, MaxInputs: 3, TypeInput: 0, DTypes: append(quantTypesAt(r[0]), ir.Int32), NarrowInputs: []int{1, 2},
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferDequantize(n, in, v) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runDequantize(ctx, n, in, v)
			},
			Doc: "y = (x - x_zero_point) * x_scale: per tensor, per axis or (from 21) blocked",
		})
	}
	Register(&Schema{
		Domain: DomainONNX, OpType: "DynamicQuantizeLinear", Since: 11, Until: MaxOpset,
		MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: []ir.DType{ir.Float},
		Infer: inferDynamicQuantize, Run: runDynamicQuantize,
		Doc: "uint8 quantization of a float32 tensor with the scale and zero point of its range",
	})
}

// quantVersion is the QuantizeLinear/DequantizeLinear version.
type quantVersion struct{ since int }

// scaleTypes are the scale types of a version (x is Q's input, or Undefined).
func (v quantVersion) scaleTypes(x ir.DType, quantize bool) []ir.DType {
	switch {
	case v.since < 19:
		return []ir.DType{ir.Float}
	case v.since < 23 && quantize:
		return []ir.DType{x} // y_scale has x's type (T1)
	case v.since < 23:
		return quantFloatTypesAt(v.since)
	}
	out := quantFloatTypesAt(v.since)
	if quantize {
		out = append(out, ir.Int32)
	}
	if v.since >= 24 {
		out = append(out, ir.Float8E8M0)
	}
	return out
}

// quantAttrs are the attributes of a Q/DQ node.
type quantAttrs struct {
	axis      int64
	blockSize int64
	saturate  bool
	outType   ir.DType // output_dtype (Undefined when absent)
	precision ir.DType // QuantizeLinear's precision (Undefined when absent)
}

func parseQuantAttrs(n *ir.Node, v quantVersion, quantize bool) (quantAttrs, error) {
	a := quantAttrs{axis: 1, saturate: true}
	var err error
	if v.since >= 13 {
		if a.axis, err = n.AttrInt("axis", 1); err != nil {
			return a, n.Errorf("%w", err)
		}
	}
	if v.since >= 19 && quantize {
		s, err := n.AttrInt("saturate", 1)
		if err != nil {
			return a, n.Errorf("%w", err)
		}
		if s != 0 && s != 1 {
			return a, n.Errorf("attribute saturate = %d must be 0 or 1", s)
		}
		a.saturate = s == 1
	}
	if v.since >= 21 {
		if a.blockSize, err = n.AttrInt("block_size", 0); err != nil {
			return a, n.Errorf("%w", err)
		}
		if a.blockSize < 0 {
			return a, n.Errorf("block_size %d is negative", a.blockSize)
		}
	}
	if (quantize && v.since >= 21) || (!quantize && v.since >= 23) {
		o, err := n.AttrInt("output_dtype", 0)
		if err != nil {
			return a, n.Errorf("%w", err)
		}
		a.outType = ir.DType(o)
	}
	if quantize && v.since >= 23 {
		p, err := n.AttrInt("precision", 0)
		if err != nil {
			return a, n.Errorf("%w", err)
		}
		a.precision = ir.DType(p)
		if a.precision != ir.Undefined && !slices.Contains([]ir.DType{ir.Float, ir.Float16, ir.BFloat16, ir.Double}, a.precision) {
			return a, n.Errorf("precision %v is not a float type", a.precision)
		}
	}
	return a, nil
}

// quantizeOutType decides QuantizeLinear's output type.
func quantizeOutType(n *ir.Node, zp Value, a quantAttrs, v quantVersion) (ir.DType, error) {
	t := ir.Uint8
	if a.outType != ir.Undefined {
		t = a.outType
	}
	if zp.Present() {
		if a.outType != ir.Undefined && a.outType != zp.Type.DType {
			return 0, n.Errorf("output_dtype %v differs from y_zero_point's type %v", a.outType, zp.Type.DType)
		}
		t = zp.Type.DType
	}
	if !slices.Contains(quantTypesAt(v.since), t) {
		return 0, n.Errorf("cannot quantize to %v at this version (QuantizeLinear-%d takes %s)", t, v.since, typeList(quantTypesAt(v.since)))
	}
	return t, nil
}

// dequantizeOutType decides DequantizeLinear's output type.
func dequantizeOutType(n *ir.Node, scale ir.DType, a quantAttrs) (ir.DType, error) {
	t := scale
	if a.outType != ir.Undefined {
		t = a.outType
	}
	if t != ir.Float && t != ir.Float16 && t != ir.BFloat16 {
		return 0, n.Errorf("cannot dequantize to %v (give output_dtype float, float16 or bfloat16)", t)
	}
	return t, nil
}

// checkQuantParams checks the scale and zero point types at inference.
func checkQuantParams(n *ir.Node, in []Value, v quantVersion, quantize bool, qType ir.DType) error {
	x, scale := in[0].Type, in[1].Type
	if err := checkType(n, "scale", scale.DType, v.scaleTypes(x.DType, quantize)); err != nil {
		return err
	}
	if zp := inVal(in, 2); zp.Present() {
		if zp.Type.DType != qType {
			return n.Errorf("zero point is %v, want %v", zp.Type.DType, qType)
		}
		sc, ok1 := scale.Shape.Concrete()
		zc, ok2 := zp.Type.Shape.Concrete()
		oneEach := ok1 && ok2 && ir.NumElements(sc) == 1 && ir.NumElements(zc) == 1 // a scalar and a [1] agree
		if scale.RankKnown && zp.Type.RankKnown && !oneEach && !slices.Equal(scale.Shape, zp.Type.Shape) {
			return n.Errorf("zero point has shape %v, the scale %v: they must be equal", zp.Type.Shape, scale.Shape)
		}
	}
	if scale.RankKnown && len(scale.Shape) > 1 && v.since < 21 {
		return n.Errorf("scale must be a scalar or 1-D before opset 21 (blocked quantization), got shape %v", scale.Shape)
	}
	if scale.RankKnown && len(scale.Shape) > 0 && v.since < 13 {
		if c, ok := scale.Shape.Concrete(); !ok || ir.NumElements(c) != 1 {
			return n.Errorf("scale must be a scalar before opset 13 (per-axis quantization), got shape %v", scale.Shape)
		}
	}
	return nil
}

func inferQuantize(n *ir.Node, in []Value, v quantVersion) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	if err := checkType(n, "x", in[0].Type.DType, append(quantFloatTypesAt(v.since), ir.Int32)); err != nil {
		return nil, err
	}
	a, err := parseQuantAttrs(n, v, true)
	if err != nil {
		return nil, err
	}
	out, err := quantizeOutType(n, inVal(in, 2), a, v)
	if err != nil {
		return nil, err
	}
	if err := checkQuantParams(n, in, v, true, out); err != nil {
		return nil, err
	}
	x := in[0].Type
	return []Value{{Type: ir.TypeInfo{DType: out, RankKnown: x.RankKnown, Shape: copyShape(x.Shape)}}}, nil
}

func inferDequantize(n *ir.Node, in []Value, v quantVersion) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	a, err := parseQuantAttrs(n, v, false)
	if err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkType(n, "x", x.DType, append(quantTypesAt(v.since), ir.Int32)); err != nil {
		return nil, err
	}
	if err := checkQuantParams(n, in, v, false, x.DType); err != nil {
		return nil, err
	}
	out, err := dequantizeOutType(n, in[1].Type.DType, a)
	if err != nil {
		return nil, err
	}
	return []Value{{Type: ir.TypeInfo{DType: out, RankKnown: x.RankKnown, Shape: copyShape(x.Shape)}}}, nil
}

// quantParamIndex returns, for each element of a tensor of shape shape, the
// index of its scale (and zero point) element, for a scale of shape sshape.
func quantParamIndex(shape, sshape []int, a quantAttrs) ([]int, error) {
	n := shapeProd(shape)
	idx := make([]int, n)
	if shapeProd(sshape) == 1 {
		return idx, nil // per tensor
	}
	axis, err := NormAxis(a.axis, len(shape))
	if err != nil {
		return nil, err
	}
	inner := shapeProd(shape[axis+1:])
	dim := shape[axis]
	if len(sshape) == 1 && a.blockSize == 0 {
		if sshape[0] != dim {
			return nil, fmt.Errorf("scale has %d elements, axis %d of the input %v has %d", sshape[0], axis, shape, dim)
		}
		for i := range idx {
			idx[i] = (i / inner) % dim
		}
		return idx, nil
	}
	if a.blockSize <= 0 {
		return nil, fmt.Errorf("scale of shape %v needs block_size for blocked quantization", sshape)
	}
	if len(sshape) != len(shape) {
		return nil, fmt.Errorf("scale has rank %d, the input %d: blocked quantization needs equal ranks", len(sshape), len(shape))
	}
	for d := range shape {
		want := shape[d]
		if d == axis {
			want = int((int64(dim) + a.blockSize - 1) / a.blockSize)
		}
		if sshape[d] != want {
			return nil, fmt.Errorf("scale has shape %v; with block_size %d along axis %d the input %v needs %d there", sshape, a.blockSize, axis, shape, want)
		}
	}
	sStrides := contiguousStrides(sshape)
	coord := make([]int, len(shape))
	for i := range idx {
		off := 0
		for d, c := range coord {
			if d == axis {
				c /= int(a.blockSize)
			}
			off += c * sStrides[d]
		}
		idx[i] = off
		for d := len(coord) - 1; d >= 0; d-- {
			coord[d]++
			if coord[d] < shape[d] {
				break
			}
			coord[d] = 0
		}
	}
	return idx, nil
}

// floatValues widens a float, integer or narrow tensor to float64.
func floatValues(t *ir.Tensor) ([]float64, error) {
	if t.DType.NarrowFloat() {
		t = widenNarrow(t)
	}
	w, err := castTensor(nil, t, ir.Double, defaultCastOptions)
	if err != nil {
		return nil, err
	}
	return w.Data.([]float64), nil
}

// roundTo rounds a float64 to the float type p, as arithmetic in p would.
func roundTo(p ir.DType, x float64) float64 {
	switch p {
	case ir.Float:
		return float64(float32(x))
	case ir.Float16:
		return float64(ir.Float16ToFloat32(ir.Float32ToFloat16(float32(x))))
	case ir.BFloat16:
		return float64(ir.BFloat16ToFloat32(ir.Float32ToBFloat16(float32(x))))
	}
	return x
}

// divisionType is numpy's result type of x / scale: equal float types keep
// theirs, float16 with bfloat16 gives float32, a float with a wider one the
// wider, and int32 on either side float64.
func divisionType(x, scale ir.DType) ir.DType {
	rank := map[ir.DType]int{ir.Float16: 1, ir.BFloat16: 1, ir.Float8E8M0: 0, ir.Float: 2, ir.Double: 3}
	switch {
	case x == ir.Int32 || scale == ir.Int32:
		return ir.Double
	case x == scale:
		return x
	case rank[x] == rank[scale] && rank[x] == 1:
		return ir.Float
	case rank[x] >= rank[scale]:
		return x
	}
	return scale
}

func runQuantize(ctx *Context, n *ir.Node, in []*ir.Tensor, v quantVersion) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	vals := constValues(in)
	if _, err := inferQuantize(n, vals, v); err != nil {
		return nil, err
	}
	a, _ := parseQuantAttrs(n, v, true)
	x, scale := in[0], in[1]
	outType, _ := quantizeOutType(n, inVal(vals, 2), a, v)
	pidx, xs, ss, zs, err := quantOperands(n, in, a)
	if err != nil {
		return nil, err
	}
	p := a.precision
	if p == ir.Undefined {
		p = divisionType(x.DType, scale.DType)
	}
	out, err := newOutput(ctx, outType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	q := make([]float64, len(xs))
	for i, xv := range xs {
		s := roundTo(p, ss[pidx[i]])
		q[i] = roundTo(p, roundTo(p, xv)/s)
	}
	switch {
	case outType.NarrowFloat() && outType != ir.Float4E2M1:
		d := out.Data.([]uint8)
		for i, v := range q {
			d[i] = ir.NarrowFloatFrom(outType, v, a.saturate)
		}
	case outType == ir.Float4E2M1:
		d := out.Data.([]uint8)
		for i, v := range q {
			d[i] = ir.NarrowFloatFrom(outType, roundTo(p, v+zs[pidx[i]]), true)
		}
	default:
		lo, hi := quantRange(outType)
		ints := make([]int64, len(q))
		for i, v := range q {
			r := math.RoundToEven(v) + zs[pidx[i]]
			if math.IsNaN(r) {
				r = float64(lo) // numpy's rint(NaN) as int32 is INT_MIN, which clips to lo
			}
			ints[i] = int64(min(max(r, float64(lo)), float64(hi)))
		}
		if err := castFrom(out, ints); err != nil { // in range: exact, narrow types included
			return nil, n.Errorf("%w", err)
		}
	}
	return []*ir.Tensor{out}, nil
}

// quantOperands returns the values of x, the scale and the zero point (0
// when absent) as float64, and for each element of x the index of its scale
// and zero point.
func quantOperands(n *ir.Node, in []*ir.Tensor, a quantAttrs) (pidx []int, xs, ss, zs []float64, err error) {
	x, scale, zp := in[0], in[1], inTensor(in, 2)
	if pidx, err = quantParamIndex(x.Shape, scale.Shape, a); err != nil {
		return nil, nil, nil, nil, n.Errorf("%w", err)
	}
	if xs, err = floatValues(x); err != nil {
		return nil, nil, nil, nil, n.Errorf("x: %w", err)
	}
	if ss, err = floatValues(scale); err != nil {
		return nil, nil, nil, nil, n.Errorf("scale: %w", err)
	}
	zs = make([]float64, len(ss))
	if zp != nil {
		if zs, err = floatValues(zp); err != nil {
			return nil, nil, nil, nil, n.Errorf("zero point: %w", err)
		}
	}
	return pidx, xs, ss, zs, nil
}

// quantRange is the saturation range of a quantized integer type.
func quantRange(dt ir.DType) (int64, int64) {
	if lo, hi, ok := ir.NarrowIntRange(dt); ok {
		return lo, hi
	}
	switch dt {
	case ir.Int8:
		return math.MinInt8, math.MaxInt8
	case ir.Uint8:
		return 0, math.MaxUint8
	case ir.Int16:
		return math.MinInt16, math.MaxInt16
	case ir.Uint16:
		return 0, math.MaxUint16
	}
	return math.MinInt32, math.MaxInt32
}

// constValues wraps tensors as constant Values (nil stays absent).
func constValues(in []*ir.Tensor) []Value {
	vals := make([]Value, len(in))
	for i, t := range in {
		if t != nil {
			vals[i] = Value{Type: Known(t.DType, t.Shape), Const: t}
		}
	}
	return vals
}

func runDequantize(ctx *Context, n *ir.Node, in []*ir.Tensor, v quantVersion) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 2); err != nil {
		return nil, err
	}
	vals := constValues(in)
	inf, err := inferDequantize(n, vals, v)
	if err != nil {
		return nil, err
	}
	a, _ := parseQuantAttrs(n, v, false)
	x, zp := in[0], inTensor(in, 2)
	pidx, xs, ss, zs, err := quantOperands(n, in, a)
	if err != nil {
		return nil, err
	}
	if zp != nil {
		switch {
		case x.DType == ir.Int32:
			for _, z := range zs {
				if z != 0 {
					return nil, n.Errorf("an int32 x has no zero point (it must be 0, got %g)", z)
				}
			}
		case x.DType.NarrowFloat() && x.DType != ir.Float4E2M1:
			for _, z := range zs {
				if z != 0 {
					return nil, n.Errorf("a %v x must have a zero zero point, got %g", x.DType, z)
				}
			}
		case x.DType == ir.Float4E2M1:
			clear(zs) // ignored, as ONNX's reference does
		}
	}
	y := make([]float32, len(xs))
	for i, xv := range xs {
		k := pidx[i]
		y[i] = (float32(xv) - float32(zs[k])) * float32(ss[k])
	}
	out, err := newOutput(ctx, inf[0].Type.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	switch d := out.Data.(type) {
	case []float32:
		copy(d, y)
	case []uint16:
		for i, f := range y {
			if out.DType == ir.BFloat16 {
				d[i] = ir.Float32ToBFloat16(f)
			} else {
				d[i] = ir.Float32ToFloat16(f)
			}
		}
	}
	return []*ir.Tensor{out}, nil
}

func inferDynamicQuantize(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkType(n, "x", x.DType, []ir.DType{ir.Float}); err != nil {
		return nil, err
	}
	return []Value{
		{Type: ir.TypeInfo{DType: ir.Uint8, RankKnown: x.RankKnown, Shape: copyShape(x.Shape)}},
		Typed(ir.Float, ir.Shape{}), Typed(ir.Uint8, ir.Shape{}),
	}, nil
}

func runDynamicQuantize(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkType(n, "x", x.DType, []ir.DType{ir.Float}); err != nil {
		return nil, err
	}
	xs := x.Float32s()
	if len(xs) == 0 {
		return nil, n.Errorf("cannot quantize an empty tensor (it has no range)")
	}
	var lo, hi float32
	for _, v := range xs {
		lo, hi = min(lo, v), max(hi, v)
	}
	scale := float32(1)
	if hi != lo {
		scale = hi - lo
	}
	scale /= 255
	zp := float32(math.RoundToEven(float64(min(max(0-lo/scale, 0), 255))))
	y, err := newOutput(ctx, ir.Uint8, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	d := y.Data.([]uint8)
	for i, v := range xs {
		q := float32(math.RoundToEven(float64(v/scale))) + zp
		d[i] = uint8(min(max(q, 0), 255))
	}
	return []*ir.Tensor{y, ir.Scalar(scale), ir.FromSlice(nil, []uint8{uint8(zp)})}, nil
}
