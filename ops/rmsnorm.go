package ops

import (
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// RMSNormalization (opset 23): Y = X / sqrt(mean(X², over dims from axis) +
// epsilon) · Scale, with Scale broadcasting unidirectionally to X. The
// kernel makes one pass per normalized row: the sum of squares (in
// float64; for float32 rows of a multiple of 16 on AVX-512, in float32
// with 64 partial sums, kernel.SumSquares16), then the scaled row, with
// no temporaries beyond one row (and none for float32).

// rmsNormTypes are the element types of X and Scale.
var rmsNormTypes = []ir.DType{ir.Float, ir.Float16, ir.Double, ir.BFloat16}

func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "RMSNormalization", Since: 23, Until: MaxOpset,
		MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: rmsNormTypes,
		Infer: inferRMSNorm, Run: runRMSNorm,
		Doc: "x / sqrt(mean(x²) + epsilon) * scale over the dims from axis, one pass per row",
		Notes: []string{
			"computed in float32 (stash_type 1), whatever stash_type (1, 10, 11 or 16) says, with the mean of squares accumulated in float64 (float32 rows of a multiple of 16 on AVX-512: in float32 with 64 partial sums); float16, bfloat16 and double tensors are converted row by row.",
			"Y has Scale's element type (V), which may differ from X's (T).",
		},
	})
}

type rmsNormAttrs struct {
	axis    int64
	epsilon float32
}

func parseRMSNorm(n *ir.Node) (rmsNormAttrs, error) {
	var a rmsNormAttrs
	var err error
	if a.axis, err = n.AttrInt("axis", -1); err != nil {
		return a, n.Errorf("%w", err)
	}
	eps, err := normEpsilon(n)
	if err != nil {
		return a, err
	}
	a.epsilon = float32(eps)
	return a, checkStashType(n)
}

func inferRMSNorm(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	a, err := parseRMSNorm(n)
	if err != nil {
		return nil, err
	}
	x, s := in[0].Type, in[1].Type
	if !typeIn(s.DType, rmsNormTypes) {
		return nil, n.Errorf("scale has element type %v, which RMSNormalization does not take (it takes %v)", s.DType, rmsNormTypes)
	}
	if !x.RankKnown {
		return []Value{UnknownRank(s.DType)}, nil
	}
	if _, err := NormAxis(a.axis, len(x.Shape)); err != nil {
		return nil, n.Errorf("%w", err)
	}
	if s.RankKnown && !dimsBroadcastTo(s.Shape, x.Shape) {
		return nil, n.Errorf("scale of shape %s does not broadcast to X %s", shapeText(s.Shape), shapeText(x.Shape))
	}
	return []Value{Typed(s.DType, append(ir.Shape{}, x.Shape...))}, nil
}

func runRMSNorm(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 2); err != nil {
		return nil, err
	}
	a, err := parseRMSNorm(n)
	if err != nil {
		return nil, err
	}
	x, sc := in[0], in[1]
	if err := checkComputeDType(n, "X", x.DType, rmsNormTypes); err != nil {
		return nil, err
	}
	if err := checkComputeDType(n, "scale", sc.DType, rmsNormTypes); err != nil {
		return nil, err
	}
	axis, err := NormAxis(a.axis, x.Rank())
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	// Scale covers X's dims from k on; expanded to them, it repeats with
	// period P, a multiple of the row length N.
	k := min(axis, max(0, x.Rank()-sc.Rank()))
	if sc.Rank() > x.Rank() {
		return nil, n.Errorf("scale of shape %v does not broadcast to X %v", sc.Shape, x.Shape)
	}
	scale, ok := expandTo(floatsOf(sc), sc.Shape, x.Shape[k:])
	if !ok {
		return nil, n.Errorf("scale of shape %v does not broadcast to X %v", sc.Shape, x.Shape)
	}
	rowLen := ShapeElems(x.Shape[axis:])
	rows := ShapeElems(x.Shape[:axis])
	period := len(scale)
	y, err := newOutput(ctx, sc.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if rowLen == 0 || rows == 0 {
		return []*ir.Tensor{y}, nil
	}
	eps := float64(a.epsilon)
	minChunk := max(1, 1<<14/rowLen)
	xs, ys := x.Float32s(), y.Float32s()
	if kernel.AVX512 && xs != nil && ys != nil && rowLen%16 == 0 {
		zeros := ctx.ScratchFloats(rowLen) // NormRow16's bias
		clear(zeros)
		computeParallel(computeThreads(ctx), rows, minChunk, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				xrow, yrow := xs[r*rowLen:(r+1)*rowLen], ys[r*rowLen:(r+1)*rowLen]
				ss := kernel.SumSquares16(&xrow[0], rowLen)
				inv := float32(1 / math.Sqrt(float64(ss)/float64(rowLen)+eps))
				s0 := (r * rowLen) % period
				kernel.NormRow16(&yrow[0], &xrow[0], rowLen, 0, 0, inv, &scale[s0], &zeros[0])
			}
		})
		return []*ir.Tensor{y}, nil
	}
	computeParallel(computeThreads(ctx), rows, minChunk, func(lo, hi int) {
		var xr, yr []float32
		if xs == nil {
			xr = make([]float32, rowLen)
		}
		if ys == nil {
			yr = make([]float32, rowLen)
		}
		for r := lo; r < hi; r++ {
			xrow, yrow := xr, yr
			if xs != nil {
				xrow = xs[r*rowLen : (r+1)*rowLen]
			} else {
				readFloats(xrow, x, r*rowLen)
			}
			if ys != nil {
				yrow = ys[r*rowLen : (r+1)*rowLen]
			}
			s0 := (r * rowLen) % period
			rmsNormRow(yrow, xrow, scale[s0:s0+rowLen], eps)
			if ys == nil {
				writeFloats(y, r*rowLen, yrow)
			}
		}
	})
	return []*ir.Tensor{y}, nil
}

// rmsNormRow writes x / sqrt(mean(x²) + eps) · scale into y.
func rmsNormRow(y, x, scale []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+eps))
	for i, v := range x {
		y[i] = v * inv * scale[i]
	}
}

// floatsOf returns a float tensor's elements as float32 (the tensor's own
// slice when it is float32).
func floatsOf(t *ir.Tensor) []float32 {
	if f := t.Float32s(); f != nil {
		return f
	}
	out := make([]float32, t.Len())
	readFloats(out, t, 0)
	return out
}

// readFloats fills dst with t's elements from off on, as float32 (float64
// rounds).
func readFloats(dst []float32, t *ir.Tensor, off int) {
	switch d := t.Data.(type) {
	case []float32:
		copy(dst, d[off:])
	case []float64:
		for i := range dst {
			dst[i] = float32(d[off+i])
		}
	case []uint16:
		conv := ir.Float16ToFloat32
		if t.DType == ir.BFloat16 {
			conv = ir.BFloat16ToFloat32
		}
		for i := range dst {
			dst[i] = conv(d[off+i])
		}
	}
}

// writeFloats stores src into t's elements from off on, converting to t's
// float type.
func writeFloats(t *ir.Tensor, off int, src []float32) {
	switch d := t.Data.(type) {
	case []float32:
		copy(d[off:], src)
	case []float64:
		for i, v := range src {
			d[off+i] = float64(v)
		}
	case []uint16:
		conv := ir.Float32ToFloat16
		if t.DType == ir.BFloat16 {
			conv = ir.Float32ToBFloat16
		}
		for i, v := range src {
			d[off+i] = conv(v)
		}
	}
}
