package ops

import (
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// LayerNormalization (opset 17): normalize X over its dims from axis on,
// then scale and shift. The optional Mean and InvStdDev outputs are float32
// (stash_type 1, the only stash type attnrun takes) of shape
// X.shape[:axis] followed by ones.
//
// Float32 rows of a multiple of 16 elements run on AVX-512 kernels
// (kernel.RowMoments16, NormRow16): the mean and the squared deviations
// summed in float32 with 64 partial sums, the rounded mean corrected by
// the sum of the deviations from it, then one pass writing the row. Other
// rows, other types and other CPUs accumulate in float64.

func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "LayerNormalization", Since: 17, Until: MaxOpset,
		MinInputs: 2, MaxInputs: 3, TypeInput: 0, DTypes: FloatTypes,
		Infer: inferLayerNorm, Run: runLayerNorm,
		Doc: "(x - mean) / sqrt(var + epsilon) * scale + bias over dims from axis",
	})
}

// layerNormAttrs are LayerNormalization's attributes.
type layerNormAttrs struct {
	axis    int64
	epsilon float32
}

func parseLayerNorm(n *ir.Node) (layerNormAttrs, error) {
	var a layerNormAttrs
	var err error
	if a.axis, err = n.AttrInt("axis", -1); err != nil {
		return a, n.Errorf("%w", err)
	}
	if a.epsilon, err = n.AttrFloat("epsilon", 1e-5); err != nil {
		return a, n.Errorf("%w", err)
	}
	stash, err := n.AttrInt("stash_type", 1)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if stash != int64(ir.Float) {
		return a, n.Errorf("stash_type %d is not supported (only 1, float32)", stash)
	}
	if len(n.Outputs) > 3 {
		return a, n.Errorf("has %d outputs, at most 3 (Y, Mean, InvStdDev)", len(n.Outputs))
	}
	return a, nil
}

func inferLayerNorm(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	attrs, err := parseLayerNorm(n)
	if err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkComputeDType(n, "input X", x.DType, FloatTypes); err != nil {
		return nil, err
	}
	for i := 1; i < len(in) && i < 3; i++ {
		if in[i].Present() && in[i].Type.DType != x.DType {
			return nil, n.Errorf("input %s has element type %v, X has %v", []string{"", "Scale", "B"}[i], in[i].Type.DType, x.DType)
		}
	}
	nOut := max(1, len(n.Outputs))
	out := make([]Value, nOut)
	if !x.RankKnown {
		out[0] = UnknownRank(x.DType)
		for i := 1; i < nOut; i++ {
			out[i] = UnknownRank(ir.Float)
		}
		return out, nil
	}
	axis, err := NormAxis(attrs.axis, len(x.Shape))
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	norm := x.Shape[axis:]
	for i := 1; i < len(in) && i < 3; i++ {
		p := in[i].Type
		if !in[i].Present() || !p.RankKnown {
			continue
		}
		if !dimsBroadcastTo(p.Shape, norm) {
			return nil, n.Errorf("%s of shape %s does not broadcast to the normalized shape %s (X %s, axis %d)",
				[]string{"", "Scale", "B"}[i], shapeText(p.Shape), shapeText(norm), shapeText(x.Shape), attrs.axis)
		}
	}
	out[0] = Typed(x.DType, append(ir.Shape{}, x.Shape...))
	stat := append(ir.Shape{}, x.Shape[:axis]...)
	for range norm {
		stat = append(stat, ir.Dim{Value: 1})
	}
	for i := 1; i < nOut; i++ {
		out[i] = Typed(ir.Float, append(ir.Shape{}, stat...))
	}
	return out, nil
}

// dimsBroadcastTo reports whether shape s may broadcast unidirectionally to
// target, as far as known dims tell.
func dimsBroadcastTo(s, target ir.Shape) bool {
	if len(s) > len(target) {
		return false
	}
	off := len(target) - len(s)
	for i, d := range s {
		t := target[off+i]
		if d.Known() && t.Known() && d.Value != 1 && d.Value != t.Value {
			return false
		}
	}
	return true
}

// expandTo broadcasts src (of shape srcShape) unidirectionally to shape
// target, returning src itself when the shapes already match in size.
func expandTo[T any](src []T, srcShape, target []int) ([]T, bool) {
	if len(srcShape) > len(target) {
		return nil, false
	}
	off := len(target) - len(srcShape)
	strides := make([]int, len(target))
	s := 1
	same := off == 0 // a shorter source broadcasts over the leading dims
	for i := len(srcShape) - 1; i >= 0; i-- {
		d, t := srcShape[i], target[off+i]
		switch {
		case d == t:
			strides[off+i] = s
		case d == 1:
			same = false
		default:
			return nil, false
		}
		s *= d
	}
	total := int(ir.NumElements(target))
	if same {
		return src, true
	}
	out := make([]T, total)
	idx := make([]int, len(target))
	p := 0
	for o := range out {
		out[o] = src[p]
		for d := len(target) - 1; d >= 0; d-- {
			idx[d]++
			p += strides[d]
			if idx[d] < target[d] {
				break
			}
			p -= strides[d] * idx[d]
			idx[d] = 0
		}
	}
	return out, true
}

func runLayerNorm(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 2); err != nil {
		return nil, err
	}
	attrs, err := parseLayerNorm(n)
	if err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkComputeDType(n, "input X", x.DType, FloatTypes); err != nil {
		return nil, err
	}
	axis, err := NormAxis(attrs.axis, x.Rank())
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	norm := x.Shape[axis:]
	size := int(ir.NumElements(norm))
	rows := int(ir.NumElements(x.Shape[:axis]))
	var params [2][]float64 // scale, bias expanded to the normalized shape
	for i := 1; i < len(in) && i < 3; i++ {
		p := in[i]
		if p == nil {
			continue
		}
		name := []string{"", "Scale", "B"}[i]
		if p.DType != x.DType {
			return nil, n.Errorf("input %s has element type %v, X has %v", name, p.DType, x.DType)
		}
		expand := func() any {
			e, _ := expandTo(floats64Of(p), p.Shape, norm)
			return e
		}
		// Scale and bias are weights: widened and expanded once per
		// executor, not every run.
		e, _ := ctx.memoOf(i, layerNormParamKey{p, ir.ShapeString(norm)}, expand).([]float64)
		if e == nil {
			e, _ = expand().([]float64)
		}
		if e == nil {
			return nil, n.Errorf("%s of shape %v does not broadcast to the normalized shape %v (X %v, axis %d)", name, p.Shape, norm, x.Shape, attrs.axis)
		}
		params[i-1] = e
	}
	scale, bias := params[0], params[1]

	y, err := newOutput(ctx, x.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	outs := []*ir.Tensor{y}
	var ms, is []float32 // Mean and InvStdDev, when the node has them
	if len(n.Outputs) > 1 {
		stat := append([]int{}, x.Shape[:axis]...)
		for range norm {
			stat = append(stat, 1)
		}
		mean, invStd := ir.NewTensor(ir.Float, stat), ir.NewTensor(ir.Float, stat)
		ms, is = mean.Float32s(), invStd.Float32s()
		outs = append(outs, mean, invStd)
	}
	eps := float64(attrs.epsilon)

	rowStats := func(xr []float64, r int) (float64, float64) {
		mu, q := meanSquares(xr)
		inv := 1 / math.Sqrt(q/float64(size)+eps)
		if ms != nil {
			ms[r], is[r] = float32(mu), float32(inv)
		}
		return mu, inv
	}
	threads := computeThreads(ctx)
	minChunk := max(1, 1<<14/max(1, size))
	switch x.DType {
	case ir.Float:
		xs, ys := x.Float32s(), y.Float32s()
		if kernel.AVX512 && size >= 16 && size%16 == 0 {
			sc, bi := layerNormParams32(ctx, in, norm, params)
			computeParallel(threads, rows, minChunk, func(lo, hi int) {
				for r := lo; r < hi; r++ {
					xr, yr := xs[r*size:(r+1)*size], ys[r*size:(r+1)*size]
					mu, sd, m2 := kernel.RowMoments16(&xr[0], size)
					delta := float64(sd) / float64(size)
					q := max(0, float64(m2)-float64(sd)*delta)
					inv := float32(1 / math.Sqrt(q/float64(size)+eps))
					if ms != nil {
						ms[r], is[r] = float32(float64(mu)-delta), inv
					}
					kernel.NormRow16(&yr[0], &xr[0], size, mu, float32(delta), inv, &sc[0], &bi[0])
				}
			})
			break
		}
		computeParallel(threads, rows, minChunk, func(lo, hi int) {
			buf := make([]float64, size)
			for r := lo; r < hi; r++ {
				xr := xs[r*size : (r+1)*size]
				for i, v := range xr {
					buf[i] = float64(v)
				}
				mu, inv := rowStats(buf, r)
				layerNormRow(buf, ys[r*size:(r+1)*size], mu, inv, scale, bias)
			}
		})
	case ir.Double:
		xs, ys := x.Data.([]float64), y.Data.([]float64)
		computeParallel(threads, rows, minChunk, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				xr := xs[r*size : (r+1)*size]
				mu, inv := rowStats(xr, r)
				layerNormRow(xr, ys[r*size:(r+1)*size], mu, inv, scale, bias)
			}
		})
	case ir.Float16:
		xs, ys := x.Data.([]uint16), y.Data.([]uint16)
		computeParallel(threads, rows, minChunk, func(lo, hi int) {
			buf := make([]float64, size)
			out := make([]float32, size)
			for r := lo; r < hi; r++ {
				for i, v := range xs[r*size : (r+1)*size] {
					buf[i] = float64(ir.Float16ToFloat32(v))
				}
				mu, inv := rowStats(buf, r)
				layerNormRow(buf, out, mu, inv, scale, bias)
				for i, v := range out {
					ys[r*size+i] = ir.Float32ToFloat16(v)
				}
			}
		})
	}
	return outs[:max(1, len(n.Outputs))], nil
}

// layerNormParams32 returns Scale and B for the float32 kernels, expanded
// to the normalized shape (ones and zeros where absent): the float32
// inputs themselves when they have that shape, else (and for absent ones)
// made once per executor like the float64 forms in params.
func layerNormParams32(ctx *Context, in []*ir.Tensor, norm []int, params [2][]float64) (scale, bias []float32) {
	var out [2][]float32
	for k := range out {
		i := k + 1
		var p *ir.Tensor
		if i < len(in) {
			p = in[i]
		}
		if p != nil && slices.Equal(p.Shape, norm) {
			out[k] = p.Float32s()
			continue
		}
		build := func() any {
			e := make([]float32, ir.NumElements(norm))
			for j := range e {
				switch {
				case params[k] != nil:
					e[j] = float32(params[k][j])
				case k == 0:
					e[j] = 1
				}
			}
			return e
		}
		e, _ := ctx.memoOf(i, layerNormParamKey{p, "float32 " + ir.ShapeString(norm)}, build).([]float32)
		if e == nil {
			e = build().([]float32)
		}
		out[k] = e
	}
	return out[0], out[1]
}

// layerNormParamKey identifies a constant Scale or B expanded to a
// normalized shape in the executor's memo.
type layerNormParamKey struct {
	t    *ir.Tensor
	norm string
}

// meanSquares returns the mean of xs and the sum of squared deviations
// from it (accumulated in float64), each pass with four independent partial sums: one running sum
// waits out the latency of every add, four keep the adder busy.
func meanSquares[T float32 | float64](xs []T) (mu, q float64) {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(xs); i += 4 {
		s0 += float64(xs[i])
		s1 += float64(xs[i+1])
		s2 += float64(xs[i+2])
		s3 += float64(xs[i+3])
	}
	for ; i < len(xs); i++ {
		s0 += float64(xs[i])
	}
	mu = ((s0 + s1) + (s2 + s3)) / float64(len(xs))
	s0, s1, s2, s3 = 0, 0, 0, 0
	i = 0
	for ; i+4 <= len(xs); i += 4 {
		d0, d1, d2, d3 := float64(xs[i])-mu, float64(xs[i+1])-mu, float64(xs[i+2])-mu, float64(xs[i+3])-mu
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(xs); i++ {
		d := float64(xs[i]) - mu
		s0 += d * d
	}
	return mu, (s0 + s1) + (s2 + s3)
}

// layerNormRow writes (x - mu) * inv * scale + bias into y (scale, bias:
// nil when absent), one loop per case so that the loop has no branch.
func layerNormRow[T float32 | float64](x []float64, y []T, mu, inv float64, scale, bias []float64) {
	y = y[:len(x)]
	switch {
	case scale != nil && bias != nil:
		scale, bias = scale[:len(x)], bias[:len(x)]
		for i, v := range x {
			y[i] = T((v-mu)*inv*scale[i] + bias[i])
		}
	case scale != nil:
		scale = scale[:len(x)]
		for i, v := range x {
			y[i] = T((v - mu) * inv * scale[i])
		}
	case bias != nil:
		bias = bias[:len(x)]
		for i, v := range x {
			y[i] = T((v-mu)*inv + bias[i])
		}
	default:
		for i, v := range x {
			y[i] = T((v - mu) * inv)
		}
	}
}

// floats64Of returns a float tensor's elements as float64: a widened copy,
// or the data itself when it is float64.
func floats64Of(t *ir.Tensor) []float64 {
	switch d := t.Data.(type) {
	case []float64:
		return d
	case []float32:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	case []uint16:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(ir.Float16ToFloat32(v))
		}
		return out
	}
	return nil
}
