package ops

import (
	"math"

	"github.com/attnrun/attnrun/ir"
)

// RotaryEmbedding (opset 23) rotates the first rotary_embedding_dim
// elements of each head vector by the angles of its position:
//
//	out[i]    = cos·x1 − sin·x2
//	out[i+r2] = sin·x1 + cos·x2      (x1 = x[i], x2 = x[i+r2], r2 = rd/2)
//
// or, interleaved, with x1 = x[2i], x2 = x[2i+1] written back to 2i and
// 2i+1; the remaining elements are copied. X is [B, H, S, D], or [B, S,
// H·D] with num_heads; cos_cache and sin_cache are [maxPos, rd/2] indexed
// by position_ids [B, S], or [B, S, rd/2] without them. The kernel makes
// one pass over X: each head vector is read once and written once, with no
// temporaries beyond one vector for float16 and bfloat16.

var rotaryTypes = []ir.DType{ir.Float, ir.Float16, ir.BFloat16}

func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "RotaryEmbedding", Since: 23, Until: MaxOpset,
		MinInputs: 3, MaxInputs: 4, TypeInput: 0, DTypes: rotaryTypes,
		Infer: inferRotary, Run: runRotary,
		Doc: "rotary position embedding (RoPE): halves or interleaved pairs, partial rotary_embedding_dim, with or without position_ids; one pass",
	})
}

type rotaryAttrs struct {
	interleaved bool
	rotaryDim   int // 0: the head size
	numHeads    int // 0: not given
}

func parseRotary(n *ir.Node) (rotaryAttrs, error) {
	var a rotaryAttrs
	il, err := n.AttrInt("interleaved", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if il != 0 && il != 1 {
		return a, n.Errorf("interleaved must be 0 or 1, got %d", il)
	}
	a.interleaved = il == 1
	rd, err := n.AttrInt("rotary_embedding_dim", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	nh, err := n.AttrInt("num_heads", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if rd < 0 || rd > math.MaxInt32 || nh < 0 || nh > math.MaxInt32 {
		return a, n.Errorf("rotary_embedding_dim %d and num_heads %d must be ≥ 0", rd, nh)
	}
	a.rotaryDim, a.numHeads = int(rd), int(nh)
	return a, nil
}

// rotaryGeom is a RotaryEmbedding call's layout: X as [B, S, H, D] with
// strides (in elements) for each of B, S, H.
type rotaryGeom struct {
	b, s, h, d, rd     int
	bStr, sStr, hStr   int
	posIDs             bool
	cacheRows, cacheRD int
}

// rotaryGeometry checks the shapes (all known) and returns the layout.
func rotaryGeometry(n *ir.Node, a rotaryAttrs, x, cosS, sinS []int, pos []int, hasPos bool) (rotaryGeom, error) {
	var g rotaryGeom
	switch len(x) {
	case 4:
		g.b, g.h, g.s, g.d = x[0], x[1], x[2], x[3]
		g.hStr, g.sStr, g.bStr = g.s*g.d, g.d, g.h*g.s*g.d
	case 3:
		if a.numHeads == 0 {
			return g, n.Errorf("3-D input needs attribute num_heads")
		}
		if x[2]%a.numHeads != 0 {
			return g, n.Errorf("hidden size %d is not a multiple of num_heads %d", x[2], a.numHeads)
		}
		g.b, g.s, g.h, g.d = x[0], x[1], a.numHeads, x[2]/a.numHeads
		g.hStr, g.sStr, g.bStr = g.d, x[2], g.s*x[2]
	default:
		return g, n.Errorf("input has rank %d, RotaryEmbedding takes 3-D or 4-D", len(x))
	}
	g.rd = a.rotaryDim
	if g.rd == 0 {
		g.rd = g.d
	}
	if g.rd > g.d || g.rd%2 != 0 {
		return g, n.Errorf("rotary_embedding_dim %d must be even and at most the head size %d", g.rd, g.d)
	}
	if !SameShape(cosS, sinS) {
		return g, n.Errorf("cos_cache %v and sin_cache %v differ in shape", cosS, sinS)
	}
	g.posIDs = hasPos
	if hasPos {
		if len(cosS) != 2 {
			return g, n.Errorf("with position_ids the caches are 2-D [max_position, %d], got %v", g.rd/2, cosS)
		}
		if !SameShape(pos, []int{g.b, g.s}) {
			return g, n.Errorf("position_ids has shape %v, want [%d %d] (batch, sequence)", pos, g.b, g.s)
		}
		g.cacheRows, g.cacheRD = cosS[0], cosS[1]
	} else {
		if len(cosS) != 3 || cosS[0] != g.b || cosS[1] != g.s {
			return g, n.Errorf("without position_ids the caches are [%d %d %d] (batch, sequence, rotary_dim/2), got %v", g.b, g.s, g.rd/2, cosS)
		}
		g.cacheRD = cosS[2]
	}
	if g.cacheRD != g.rd/2 {
		return g, n.Errorf("the caches' last dim %d is not rotary_embedding_dim/2 = %d", g.cacheRD, g.rd/2)
	}
	return g, nil
}

func inferRotary(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 3); err != nil {
		return nil, err
	}
	a, err := parseRotary(n)
	if err != nil {
		return nil, err
	}
	x := in[0].Type
	for i, what := range []string{"cos_cache", "sin_cache"} {
		if in[i+1].Type.DType != x.DType {
			return nil, n.Errorf("%s has element type %v, input has %v", what, in[i+1].Type.DType, x.DType)
		}
	}
	hasPos := len(in) > 3 && in[3].Present()
	if hasPos && in[3].Type.DType != ir.Int64 {
		return nil, n.Errorf("position_ids has element type %v, want int64", in[3].Type.DType)
	}
	if x.RankKnown && len(x.Shape) != 3 && len(x.Shape) != 4 {
		return nil, n.Errorf("input has rank %d, RotaryEmbedding takes 3-D or 4-D", len(x.Shape))
	}
	if x.RankKnown && len(x.Shape) == 3 && a.numHeads == 0 {
		return nil, n.Errorf("3-D input needs attribute num_heads")
	}
	// Check the geometry when every shape is known.
	xs, ok1 := shapeDims(in[0])
	cs, ok2 := shapeDims(in[1])
	ss, ok3 := shapeDims(in[2])
	var ps []int
	ok4 := true
	if hasPos {
		ps, ok4 = shapeDims(in[3])
	}
	if ok1 && ok2 && ok3 && ok4 {
		if _, err := rotaryGeometry(n, a, xs, cs, ss, ps, hasPos); err != nil {
			return nil, err
		}
	}
	if !x.RankKnown {
		return []Value{UnknownRank(x.DType)}, nil
	}
	return []Value{Typed(x.DType, append(ir.Shape{}, x.Shape...))}, nil
}

func runRotary(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 3); err != nil {
		return nil, err
	}
	a, err := parseRotary(n)
	if err != nil {
		return nil, err
	}
	x, cosT, sinT := in[0], in[1], in[2]
	if err := checkComputeDType(n, "input", x.DType, rotaryTypes); err != nil {
		return nil, err
	}
	if cosT.DType != x.DType || sinT.DType != x.DType {
		return nil, n.Errorf("cos_cache and sin_cache have element types %v and %v, input has %v", cosT.DType, sinT.DType, x.DType)
	}
	hasPos := len(in) > 3 && in[3] != nil
	var pos []int64
	var posShape []int
	if hasPos {
		if in[3].DType != ir.Int64 {
			return nil, n.Errorf("position_ids has element type %v, want int64", in[3].DType)
		}
		pos, posShape = in[3].Int64s(), in[3].Shape
	}
	g, err := rotaryGeometry(n, a, x.Shape, cosT.Shape, sinT.Shape, posShape, hasPos)
	if err != nil {
		return nil, err
	}
	for _, p := range pos {
		if p < 0 || p >= int64(g.cacheRows) {
			return nil, n.Errorf("position id %d is outside the caches' %d positions", p, g.cacheRows)
		}
	}
	y, err := newOutput(ctx, x.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	cosF, sinF := floatsOf(cosT), floatsOf(sinT)
	xs, ys := x.Float32s(), y.Float32s()
	half := g.rd / 2
	vecs := g.b * g.s * g.h
	computeParallel(computeThreads(ctx), vecs, max(1, 1<<13/max(1, g.d)), func(lo, hi int) {
		var buf []float32
		if xs == nil {
			buf = make([]float32, 2*g.d)
		}
		for v := lo; v < hi; v++ {
			b, s, h := v/(g.s*g.h), (v/g.h)%g.s, v%g.h
			off := b*g.bStr + s*g.sStr + h*g.hStr
			row := b*g.s + s // cache row without position_ids
			if hasPos {
				row = int(pos[b*g.s+s])
			}
			c, sn := cosF[row*half:(row+1)*half], sinF[row*half:(row+1)*half]
			if xs != nil {
				rotateVec(ys[off:off+g.d], xs[off:off+g.d], c, sn, a.interleaved)
				continue
			}
			src, dst := buf[:g.d], buf[g.d:]
			readFloats(src, x, off)
			rotateVec(dst, src, c, sn, a.interleaved)
			writeFloats(y, off, dst)
		}
	})
	return []*ir.Tensor{y}, nil
}

// rotateVec writes head vector x rotated by (cos, sin) (len rd/2 each)
// into y; elements past rd are copied.
func rotateVec(y, x, cos, sin []float32, interleaved bool) {
	half := len(cos)
	if interleaved {
		for i := 0; i < half; i++ {
			x1, x2 := x[2*i], x[2*i+1]
			y[2*i] = cos[i]*x1 - sin[i]*x2
			y[2*i+1] = sin[i]*x1 + cos[i]*x2
		}
	} else {
		for i := 0; i < half; i++ {
			x1, x2 := x[i], x[i+half]
			y[i] = cos[i]*x1 - sin[i]*x2
			y[i+half] = sin[i]*x1 + cos[i]*x2
		}
	}
	copy(y[2*half:], x[2*half:])
}
