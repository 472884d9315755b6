package ops

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
)

// FusedAttention (com.attnrun, opset 1) is scaled dot-product attention in
// one node: it is what the attention rewrite in runtime/graph puts in place
// of the exported MatMul → [scale] → [mask] → Softmax → MatMul chain, and it
// never materializes the Sq×Sk score matrix.
//
// Inputs (float32 unless stated):
//
//	0 Q    [..., Sq, D]
//	1 K    [..., Sk, D], or [..., D, Sk] when k_transposed = 1
//	2 V    [..., Sk, Dv]
//	3 mask (optional) of rank ≥ 0, broadcastable to [..., Sq, Sk]: bool for
//	       mask_kind "bool_true_masks" / "bool_false_masks", float32 for
//	       "additive". Its last two dims must each be 1 or equal Sq and Sk.
//
// Every input has rank ≥ 2 except the mask (which is left-padded with 1s).
// The leading (batch, head) dims of Q, K, V and the mask broadcast together,
// numpy style, into the output's leading dims.
//
// Attributes:
//
//	scale        float, default 1: scores = scale · Q·Kᵀ (an export's Div by c
//	             becomes 1/c, Mul by c becomes c, several multiply).
//	k_transposed int, default 0: 1 when K is given as [..., D, Sk].
//	mask_kind    string, required when the mask is given:
//	             "bool_true_masks"  scores = where(mask, mask_fill, scores)
//	             "bool_false_masks" scores = where(mask, scores, mask_fill)
//	             "additive"         scores = scores + mask_scale·mask
//	mask_fill    float, default -inf: the value a masked score takes, exactly
//	             the export's fill (-inf, -1e9, -1e20, ...) times any scale
//	             the export applied after masking.
//	mask_scale   float, default 1: factor on an additive mask (the scale the
//	             export applied after adding the mask).
//
// Output: softmax(scores, last axis) · V, shape broadcast(...) + [Sq, Dv].
//
// Semantics follow the unfused ONNX graph exactly in the edge cases: a row
// whose scores are all -inf (fully masked with a -inf fill) gives NaN, as
// Softmax does; a row fully masked with a finite fill (-1e9) gives uniform
// weights; Sk = 0 gives zeros, as MatMul over an empty inner dim does.
//
// The CPU kernel works on blocks of attnQBlock query rows and attnKBlock
// keys with a streaming (online) softmax: per block of keys it computes the
// scores with blas.Sgemm, applies the mask, updates each row's running max
// and sum, rescales the accumulator and adds P·V_block with Sgemm; the
// accumulator is divided by the sum at the end. Scratch memory per worker is
// O(attnQBlock·(attnKBlock + Dv)). Work items (one per batch matrix and
// query block) are spread over ctx.Threads goroutines.

// Mask kinds of FusedAttention's mask_kind attribute.
const (
	MaskBoolTrueMasks  = "bool_true_masks"
	MaskBoolFalseMasks = "bool_false_masks"
	MaskAdditive       = "additive"
)

// FusedAttentionOp is the op type of the fused attention node (domain
// DomainAttnrun, opset 1).
const FusedAttentionOp = "FusedAttention"

// Block sizes of the FusedAttention kernel: query rows per work item (the
// blas row block, a multiple of its 6-row micro-tile) and keys per step of
// the streaming softmax. Measured best of 32–128 × 128–512 on 2 cores.
const (
	attnQBlock = 96
	attnKBlock = 384
)

func init() {
	Register(&Schema{
		Domain: DomainAttnrun, OpType: FusedAttentionOp, Since: 1, Until: 1,
		MinInputs: 3, MaxInputs: 4, TypeInput: 0, DTypes: []ir.DType{ir.Float},
		Infer: inferFusedAttention, Run: runFusedAttention,
		Doc: "softmax(scale·Q·Kᵀ masked) · V, blocked with a streaming softmax (no Sq×Sk scores)",
	})
}

// attnAttrs are FusedAttention's parsed attributes.
type attnAttrs struct {
	scale     float32
	kT        bool
	maskKind  string // "" when there is no mask
	fill      float32
	maskScale float32
}

func parseAttnAttrs(n *ir.Node, hasMask bool) (attnAttrs, error) {
	a := attnAttrs{}
	var err error
	if a.scale, err = n.AttrFloat("scale", 1); err != nil {
		return a, n.Errorf("%w", err)
	}
	kt, err := n.AttrInt("k_transposed", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if kt != 0 && kt != 1 {
		return a, n.Errorf("k_transposed must be 0 or 1, got %d", kt)
	}
	a.kT = kt == 1
	if a.maskKind, err = n.AttrString("mask_kind", ""); err != nil {
		return a, n.Errorf("%w", err)
	}
	switch {
	case !hasMask:
		a.maskKind = ""
	case a.maskKind == "":
		return a, n.Errorf("a mask is given but attribute mask_kind is not set")
	case a.maskKind != MaskBoolTrueMasks && a.maskKind != MaskBoolFalseMasks && a.maskKind != MaskAdditive:
		return a, n.Errorf("mask_kind %q is not one of %s, %s, %s", a.maskKind, MaskBoolTrueMasks, MaskBoolFalseMasks, MaskAdditive)
	}
	if a.fill, err = n.AttrFloat("mask_fill", float32(math.Inf(-1))); err != nil {
		return a, n.Errorf("%w", err)
	}
	if a.maskScale, err = n.AttrFloat("mask_scale", 1); err != nil {
		return a, n.Errorf("%w", err)
	}
	return a, nil
}

// attnMaskDType is the mask element type a mask kind takes.
func attnMaskDType(kind string) ir.DType {
	if kind == MaskAdditive {
		return ir.Float
	}
	return ir.Bool
}

// attnSplit splits Q, K, V (and mask) shapes into batch dims and matrix
// dims. It works on concrete and symbolic dims alike.
type attnDims[D any] struct {
	qB, kB, vB, mB     []D
	sq, d, kd, sk, vsk D
	dv                 D
	msq, msk           D
}

func splitAttn[D any](q, k, v, m []D, kT, hasMask bool, one D) (attnDims[D], error) {
	var s attnDims[D]
	for i, x := range [][]D{q, k, v} {
		if len(x) < 2 {
			return s, fmt.Errorf("input %d (%s) has rank %d, FusedAttention needs rank ≥ 2", i, []string{"Q", "K", "V"}[i], len(x))
		}
	}
	s.qB, s.sq, s.d = q[:len(q)-2], q[len(q)-2], q[len(q)-1]
	s.kB = k[:len(k)-2]
	if kT {
		s.kd, s.sk = k[len(k)-2], k[len(k)-1]
	} else {
		s.sk, s.kd = k[len(k)-2], k[len(k)-1]
	}
	s.vB, s.vsk, s.dv = v[:len(v)-2], v[len(v)-2], v[len(v)-1]
	if hasMask {
		for len(m) < 2 {
			m = append([]D{one}, m...)
		}
		s.mB, s.msq, s.msk = m[:len(m)-2], m[len(m)-2], m[len(m)-1]
	}
	return s, nil
}

func inferFusedAttention(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if err := checkComputeValues(n, in, 3); err != nil {
		return nil, err
	}
	hasMask := len(in) > 3 && in[3].Present()
	a, err := parseAttnAttrs(n, hasMask)
	if err != nil {
		return nil, err
	}
	for i, what := range []string{"Q", "K", "V"} {
		if in[i].Type.DType != ir.Float {
			return nil, n.Errorf("%s has element type %v, FusedAttention takes float32", what, in[i].Type.DType)
		}
	}
	if hasMask && in[3].Type.DType != attnMaskDType(a.maskKind) {
		return nil, n.Errorf("mask has element type %v, mask_kind %q takes %v", in[3].Type.DType, a.maskKind, attnMaskDType(a.maskKind))
	}
	for i := 0; i < len(in) && i < 4; i++ {
		if in[i].Present() && !in[i].Type.RankKnown {
			return []Value{UnknownRank(ir.Float)}, nil
		}
	}
	var m ir.Shape
	if hasMask {
		m = in[3].Type.Shape
	}
	s, err := splitAttn(in[0].Type.Shape, in[1].Type.Shape, in[2].Type.Shape, m, a.kT, hasMask, ir.Dim{Value: 1})
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	differ := func(x, y ir.Dim) bool { return x.Known() && y.Known() && x.Value != y.Value }
	if differ(s.d, s.kd) {
		return nil, n.Errorf("Q has head size %v but K has %v", s.d, s.kd)
	}
	if differ(s.sk, s.vsk) {
		return nil, n.Errorf("K has %v keys but V has %v", s.sk, s.vsk)
	}
	if hasMask {
		bad := func(md, want ir.Dim) bool { return md.Known() && md.Value != 1 && differ(md, want) }
		if bad(s.msq, s.sq) || bad(s.msk, s.sk) {
			return nil, n.Errorf("mask %s does not broadcast to the scores [%v, %v]", shapeText(in[3].Type.Shape), s.sq, s.sk)
		}
	}
	batch, err := BroadcastDims(s.qB, s.kB, s.vB, s.mB)
	if err != nil {
		return nil, n.Errorf("batch dims of Q %s, K %s, V %s and mask do not broadcast", shapeText(in[0].Type.Shape), shapeText(in[1].Type.Shape), shapeText(in[2].Type.Shape))
	}
	return []Value{Typed(ir.Float, append(batch, s.sq, s.dv))}, nil
}

// attnPlan is a FusedAttention call on concrete shapes.
type attnPlan struct {
	attnAttrs
	out                 []int
	batches             int
	sq, d, sk, dv       int
	qOff, kOff, vOff    []int // matrix index per output batch
	mOff                []int
	mRowStep, mColStep  int // mask element steps along Sq and Sk (0 when broadcast)
	mMatrix             int // elements per mask matrix
	maskBools           []bool
	maskFloats          []float32
	maskedVal           bool // the bool value that masks a score
	qData, kData, vData []float32
}

func planFusedAttention(n *ir.Node, in []*ir.Tensor) (*attnPlan, error) {
	if err := checkComputeInputs(n, in, 3); err != nil {
		return nil, err
	}
	hasMask := len(in) > 3 && in[3] != nil
	a, err := parseAttnAttrs(n, hasMask)
	if err != nil {
		return nil, err
	}
	for i, what := range []string{"Q", "K", "V"} {
		if in[i].DType != ir.Float {
			return nil, n.Errorf("%s has element type %v, FusedAttention takes float32", what, in[i].DType)
		}
	}
	var mshape []int
	if hasMask {
		if in[3].DType != attnMaskDType(a.maskKind) {
			return nil, n.Errorf("mask has element type %v, mask_kind %q takes %v", in[3].DType, a.maskKind, attnMaskDType(a.maskKind))
		}
		mshape = in[3].Shape
	}
	s, err := splitAttn(in[0].Shape, in[1].Shape, in[2].Shape, mshape, a.kT, hasMask, 1)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if s.d != s.kd {
		return nil, n.Errorf("Q %v has head size %d but K %v has %d", in[0].Shape, s.d, in[1].Shape, s.kd)
	}
	if s.sk != s.vsk {
		return nil, n.Errorf("K %v has %d keys but V %v has %d", in[1].Shape, s.sk, in[2].Shape, s.vsk)
	}
	if hasMask && ((s.msq != 1 && s.msq != s.sq) || (s.msk != 1 && s.msk != s.sk)) {
		return nil, n.Errorf("mask %v does not broadcast to the scores [%d %d]", in[3].Shape, s.sq, s.sk)
	}
	batch, err := BroadcastShapes(s.qB, s.kB, s.vB, s.mB)
	if err != nil {
		return nil, n.Errorf("batch dims of Q %v, K %v, V %v and mask %v do not broadcast", in[0].Shape, in[1].Shape, in[2].Shape, mshape)
	}
	p := &attnPlan{attnAttrs: a, sq: s.sq, d: s.d, sk: s.sk, dv: s.dv}
	p.out = append(append([]int{}, batch...), s.sq, s.dv)
	if _, err := checkedElements(p.out); err != nil {
		return nil, n.Errorf("%w", err)
	}
	p.batches = int(ir.NumElements(batch))
	p.qOff, p.kOff, p.vOff = batchOffsets(batch, s.qB), batchOffsets(batch, s.kB), batchOffsets(batch, s.vB)
	p.qData, p.kData, p.vData = in[0].Float32s(), in[1].Float32s(), in[2].Float32s()
	if hasMask {
		p.mOff = batchOffsets(batch, s.mB)
		p.mMatrix = s.msq * s.msk
		if s.msq != 1 {
			p.mRowStep = s.msk
		}
		if s.msk != 1 {
			p.mColStep = 1
		}
		switch a.maskKind {
		case MaskAdditive:
			p.maskFloats = in[3].Float32s()
		default:
			p.maskBools = in[3].Bools()
			p.maskedVal = a.maskKind == MaskBoolTrueMasks
		}
	}
	return p, nil
}

func runFusedAttention(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	p, err := planFusedAttention(n, in)
	if err != nil {
		return nil, err
	}
	out := ir.NewTensor(ir.Float, p.out)
	if out.Len() == 0 || p.sk == 0 {
		// Sk = 0: softmax over nothing times an empty V is MatMul's zero sum.
		return []*ir.Tensor{out}, nil
	}
	p.run(computeThreads(ctx), out.Float32s())
	return []*ir.Tensor{out}, nil
}

// attnScratch is one worker's memory: a block of scores, the accumulator
// and the per-row running max and sum.
type attnScratch struct {
	s   []float32
	acc []float32
	m   []float32
	l   []float64
}

// run computes every (batch, query block) work item on up to threads goroutines.
func (p *attnPlan) run(threads int, out []float32) {
	qBlocks := (p.sq + attnQBlock - 1) / attnQBlock
	items := p.batches * qBlocks
	workers := max(1, min(threads, items))
	qb, kb := min(attnQBlock, p.sq), min(attnKBlock, p.sk)
	newScratch := func() *attnScratch {
		return &attnScratch{s: make([]float32, qb*kb), acc: make([]float32, qb*p.dv), m: make([]float32, qb), l: make([]float64, qb)}
	}
	if workers == 1 {
		sc := newScratch()
		for it := 0; it < items; it++ {
			p.item(it/qBlocks, (it%qBlocks)*attnQBlock, sc, out)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := newScratch()
			for {
				it := int(next.Add(1) - 1)
				if it >= items {
					return
				}
				p.item(it/qBlocks, (it%qBlocks)*attnQBlock, sc, out)
			}
		}()
	}
	wg.Wait()
}

// item computes output rows [i0, i0+attnQBlock) of batch matrix b.
func (p *attnPlan) item(b, i0 int, sc *attnScratch, out []float32) {
	rows := min(attnQBlock, p.sq-i0)
	d, dv, sk := p.d, p.dv, p.sk
	q := p.qData[(p.qOff[b]*p.sq+i0)*d:]
	kBase := p.kOff[b] * sk * d
	vBase := p.vOff[b] * sk * dv
	acc := sc.acc[:rows*dv]
	clear(acc)
	mrun, lrun := sc.m[:rows], sc.l[:rows]
	negInf := float32(math.Inf(-1))
	for r := range mrun {
		mrun[r], lrun[r] = negInf, 0
	}
	for j0 := 0; j0 < sk; j0 += attnKBlock {
		cols := min(attnKBlock, sk-j0)
		s := sc.s[:rows*cols]
		if p.kT {
			blas.Sgemm(false, false, rows, cols, d, p.scale, q, max(1, d), p.kData[kBase+j0:], sk, 0, s, cols)
		} else {
			blas.Sgemm(false, true, rows, cols, d, p.scale, q, max(1, d), p.kData[kBase+j0*d:], max(1, d), 0, s, cols)
		}
		used := false
		for r := 0; r < rows; r++ {
			row := s[r*cols : (r+1)*cols]
			if p.maskKind != "" {
				p.applyMask(row, b, i0+r, j0)
			}
			mx := negInf
			for _, v := range row {
				if v > mx {
					mx = v
				}
			}
			mNew := max(mrun[r], mx)
			if mNew == negInf {
				// Every score so far is -inf: nothing to add yet.
				clear(row)
				continue
			}
			used = true
			sum := expShiftSum32(row, row, mNew)
			if mNew != mrun[r] && lrun[r] != 0 {
				corr := fastExp32(mrun[r] - mNew)
				lrun[r] *= float64(corr)
				ar := acc[r*dv : (r+1)*dv]
				for c := range ar {
					ar[c] *= corr
				}
			}
			lrun[r] += sum
			mrun[r] = mNew
		}
		if used {
			blas.Sgemm(false, false, rows, dv, cols, 1, s, cols, p.vData[vBase+j0*dv:], max(1, dv), 1, acc, max(1, dv))
		}
	}
	o := out[(b*p.sq+i0)*dv:]
	nan := float32(math.NaN())
	for r := 0; r < rows; r++ {
		or, ar := o[r*dv:(r+1)*dv], acc[r*dv:(r+1)*dv]
		if mrun[r] == negInf {
			// Softmax of an all -inf row is NaN (-inf - -inf).
			for c := range or {
				or[c] = nan
			}
			continue
		}
		inv := float32(1 / lrun[r])
		for c, v := range ar {
			or[c] = v * inv
		}
	}
}

// applyMask masks one row of scores: query row i, keys [j0, j0+len(row)).
func (p *attnPlan) applyMask(row []float32, b, i, j0 int) {
	off := p.mOff[b]*p.mMatrix + i*p.mRowStep + j0*p.mColStep
	if p.maskFloats != nil {
		if p.mColStep == 0 {
			add := p.maskFloats[off] * p.maskScale
			for c := range row {
				row[c] += add
			}
			return
		}
		mk := p.maskFloats[off : off+len(row)]
		if p.maskScale == 1 {
			for c, v := range mk {
				row[c] += v
			}
			return
		}
		for c, v := range mk {
			row[c] += v * p.maskScale
		}
		return
	}
	if p.mColStep == 0 {
		if p.maskBools[off] == p.maskedVal {
			for c := range row {
				row[c] = p.fill
			}
		}
		return
	}
	mk := p.maskBools[off : off+len(row)]
	for c, v := range mk {
		if v == p.maskedVal {
			row[c] = p.fill
		}
	}
}
