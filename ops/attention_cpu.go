package ops

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/parallel"
)

// The FusedAttention CPU kernel (see attention.go for the op's contract).
//
// Layout. With MR×NR the micro-kernel's tile (8×32 or 6×16):
//
//	Kp  K of one batch matrix as A-slivers of MR keys over D:
//	    Kp[s·MR·D + p·MR + r] = K[key MR·s+r][p]          (keys padded to MR)
//	Vp  Vᵀ of one batch matrix as A-slivers of MR value dims over Sk:
//	    Vp[s·MR·Sk + p·MR + r] = V[key p][dv MR·s+r]      (Dv padded to MR)
//	Qp  scale·Qᵀ of one batch matrix as B-panels of NR queries over D:
//	    Qp[n·NR·D + p·NR + c] = scale·Q[query NR·n+c][p]  (Sq padded to NR)
//	St  the scores of one key block, transposed, as B-panels of NR queries:
//	    St[n·NR·KB + key·NR + c]
//	acc the output accumulator, transposed: acc[dv·QB + query]
//
// The scores tile for MR keys × NR queries is Kp-sliver × Qp-panel stored
// with row stride NR, which is exactly the panel layout of St; St is then
// the B operand of accᵀ += Vpᵀ·St with no packing in between. The softmax
// runs down each panel's columns (one query per lane).
//
// With the AVX-512 tile the products read K's and V's rows in place where
// their columns are contiguous (a fused projection's heads are): the
// scores kernel takes MR rows of K at a stride (kernel.Sgemm8x32RowsLoop,
// Kp then holds only a partial last sliver), and Vpᵀ's MR rows at a key
// are MR consecutive floats of V's row (lda = V's row stride, no Vp).
// scale·Qᵀ is packed with gathers. With Context.Precision bf16 the
// products run in bf16 instead (attention_bf16.go).

// attnMR and attnNR are the micro-kernel's tile (blas.Tile: 8×32 with
// AVX-512, 6×16 otherwise); attnQBlock and attnKBlock are multiples of
// both. maxLanes bounds attnNR.
var attnMR, attnNR = blas.Tile()

// tileLoop: the tile is AVX-512's 8×32, whose kernel also sweeps a row of
// tiles in one call (kernel.Sgemm8x32Loop).
var tileLoop = kernel.AVX512 && attnMR == 8 && attnNR == 32

const maxLanes = 32

// attnOperand locates one operand's matrices: matrix b starts at off[b]
// and its element (i, j) is at off[b] + i·rs + j·cs.
type attnOperand struct {
	data   []float32
	off    []int
	rs, cs int
}

// attnPlan is a FusedAttention call on concrete shapes.
type attnPlan struct {
	attnAttrs
	out           []int // output tensor shape
	scoresShape   []int // output 1's shape (nil when not requested)
	batches       int
	sq, d, sk, dv int
	// q: rows are queries, columns D; k: rows are keys, columns D; v: rows
	// are keys, columns Dv; o: rows are queries, columns Dv.
	q, k, v, o attnOperand
	// kIdx and vIdx give the packed matrix of each batch; kUniq and vUniq
	// the matrices to pack (offsets into k.data and v.data).
	qIdx, kIdx, vIdx    []int
	qUniq, kUniq, vUniq []int
	mOff                []int // element offset of each batch's mask matrix
	mRowStep            int   // mask element steps along Sq and Sk (0 when broadcast)
	mColStep            int
	maskKeys            int // keys the mask covers (Sk unless mask_pad_keys)
	maskBools           []bool
	maskFloats          []float32
	maskedVal           bool // the bool value that masks a score
	// The bias (input 5) as the mask: element offset of each batch's
	// matrix and element steps along Sq and Sk (0 when broadcast).
	bOff               []int
	bRowStep, bColStep int
	biasFloats         []float32
	// biasKeepsInf: adding the bias to -inf gives -inf (no +inf or NaN in
	// it), so that key blocks a -inf mask hides stay hidden after it.
	biasKeepsInf bool
	// keyLim[b] is how many leading keys of batch b are not padding
	// (mask_pad_keys, kv_lengths); nil when every key takes part.
	keyLim []int
	// scores is output 1's data while running (nil when not requested).
	scores []float32
	// How the products get their operands in this run (set by run): bf16
	// packs K, Vᵀ and scale·Qᵀ in bf16 pairs (attention_bf16.go); else
	// with the AVX-512 tile, kInPlace reads K's rows from the input (only
	// a last partial sliver of MR keys is packed) and vInPlace V's rows.
	bf16, kInPlace, vInPlace bool
	// scoresExp: with no bias, softcap or scores output, the scores and
	// exponentials of key blocks no mask touches (or only a per-key one,
	// keyBias) run in one kernel (kernel.ScoresExp8x32: fp32, AVX-512, K
	// in place; kernel.ScoresExpBF16x32 in bf16: packed K, probabilities
	// stored as the P·V product's bf16 pairs), the causal cut and the key
	// limit handled around it: each tile is stored once, as probabilities.
	scoresExp bool
	// keyBias, when the mask is one value per key (broadcast along the
	// queries: key padding) and scoresExp, holds it as what the kernel
	// adds to each key's scores: 0 or -inf for a bool mask with a -inf
	// fill, mask_scale·mask for an additive one. Batch b's keys start at
	// keyBias[keyBiasIdx[b]·sk].
	keyBias    []float32
	keyBiasIdx []int
	// With uniformRows, vMean holds the mean of each distinct V matrix's
	// Sk rows (Dv floats each, at vIdx[b]·dv), computed on first use by
	// a row that sees no key (vMeanOnce).
	vMean     []float32
	vMeanOnce []sync.Once
	// With a finite causalFill (cut like -inf, checked per row): hiddenMax[b]
	// bounds the value a cut score of batch b could have taken (the fill
	// plus the largest mask and bias terms after it), and exactCut makes
	// every item compute the cut scores at the fill (when the scores are
	// an output, which must hold them).
	hiddenMax []float64
	exactCut  bool
}

// attnCutMargin is how far above the largest value a cut score could take
// (hiddenMax) a row's running maximum must lie for the cut to be exact:
// exp(x) rounds to 0 in float32 below -103.97.
const attnCutMargin = 104

// operandView returns the view operand i is read through.
func (a *attnAttrs) operandView(i int, t *ir.Tensor) View {
	if a.views[i] != nil {
		return *a.views[i]
	}
	return Contiguous(t.Shape)
}

// batchElemOffsets returns, for every index of the broadcast batch shape,
// base plus the element offset of that batch's matrix in an operand whose
// batch dims are dims with strides strides (right-aligned; size-1 dims
// broadcast).
func batchElemOffsets(batch, dims, strides []int, base int) []int {
	full := make([]int, len(batch))
	for i, d := range dims {
		if d != 1 {
			full[len(batch)-len(dims)+i] = strides[i]
		}
	}
	count := ShapeElems(batch)
	offs := make([]int, count)
	idx := make([]int, len(batch))
	off := base
	for c := 0; c < count; c++ {
		offs[c] = off
		for d := len(batch) - 1; d >= 0; d-- {
			idx[d]++
			off += full[d]
			if idx[d] < batch[d] {
				break
			}
			off -= full[d] * idx[d]
			idx[d] = 0
		}
	}
	return offs
}

// uniqueIndex maps offsets to indices of their distinct values.
func uniqueIndex(offs []int) (idx, uniq []int) {
	seen := map[int]int{}
	idx = make([]int, len(offs))
	for b, o := range offs {
		k, ok := seen[o]
		if !ok {
			k = len(uniq)
			seen[o] = k
			uniq = append(uniq, o)
		}
		idx[b] = k
	}
	return idx, uniq
}

// splitHeadAxis splits dim axis of a view (the heads axis, of size h) into
// (h/g, g) for grouped-query attention; a dim of size 1 becomes (1, 1).
func splitHeadAxis(v View, axis, g int) (View, bool) {
	if axis < 0 || axis >= len(v.Shape) {
		return View{}, false
	}
	h := v.Shape[axis]
	parts := []int{1, 1}
	if h != 1 {
		if h%g != 0 {
			return View{}, false
		}
		parts = []int{h / g, g}
	}
	shape := append(append(append([]int{}, v.Shape[:axis]...), parts...), v.Shape[axis+1:]...)
	return v.Reshape(shape)
}

// unitAfterHeadAxis inserts a size-1 dim after dim axis (K's and V's
// heads): the group index, along which K and V broadcast.
func unitAfterHeadAxis(v View, axis int) (View, bool) {
	if axis < 0 || axis >= len(v.Shape) {
		return View{}, false
	}
	shape := append(append(append([]int{}, v.Shape[:axis+1]...), 1), v.Shape[axis+1:]...)
	return v.Reshape(shape)
}

func planFusedAttention(n *ir.Node, in []*ir.Tensor) (*attnPlan, error) {
	if err := checkComputeInputs(n, in, 3); err != nil {
		return nil, err
	}
	hasMask := len(in) > 3 && in[3] != nil
	hasBias := len(in) > 5 && in[5] != nil
	a, err := parseAttnAttrs(n, hasMask, hasBias)
	if err != nil {
		return nil, err
	}
	var views [3]View
	for i, what := range []string{"Q", "K", "V"} {
		if in[i].DType != ir.Float {
			return nil, n.Errorf("%s has element type %v, FusedAttention takes float32", what, in[i].DType)
		}
		views[i] = a.operandView(i, in[i])
		if !views[i].Fits(in[i].Len()) {
			return nil, n.Errorf("%s view %v does not fit the input of shape %v", what, views[i].Ints(), in[i].Shape)
		}
	}
	var mshape []int
	if hasMask {
		if in[3].DType != attnMaskDType(a.maskKind) {
			return nil, n.Errorf("mask has element type %v, mask_kind %q takes %v", in[3].DType, a.maskKind, attnMaskDType(a.maskKind))
		}
		mshape = in[3].Shape
	}
	var bB []int
	bsq, bsk := 1, 1
	if hasBias {
		if in[5].DType != ir.Float {
			return nil, n.Errorf("bias has element type %v, FusedAttention takes float32", in[5].DType)
		}
		bB, bsq, bsk = splitBias(in[5].Shape, 1)
	}
	// Shapes as the query heads see them: with kv_group, K's and V's heads
	// dim stands for Q's.
	kShape, vShape := views[1].Shape, views[2].Shape
	if a.kvGroup > 1 {
		ks, err := groupHeads(ir.ShapeOf(views[0].Shape), ir.ShapeOf(kShape), a.kvGroup, "K")
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		vs, err := groupHeads(ir.ShapeOf(views[0].Shape), ir.ShapeOf(vShape), a.kvGroup, "V")
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		kShape, _ = ks.Concrete()
		vShape, _ = vs.Concrete()
	}
	s, err := splitAttn(views[0].Shape, kShape, vShape, mshape, a.kT, hasMask, 1)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if s.d != s.kd {
		return nil, n.Errorf("Q %v has head size %d but K %v has %d", views[0].Shape, s.d, views[1].Shape, s.kd)
	}
	if s.sk != s.vsk {
		return nil, n.Errorf("K %v has %d keys but V %v has %d", views[1].Shape, s.sk, views[2].Shape, s.vsk)
	}
	if hasMask {
		badKeys := s.msk != 1 && s.msk != s.sk
		if a.padKeys {
			badKeys = s.msk > s.sk
		}
		if (s.msq != 1 && s.msq != s.sq) || badKeys {
			return nil, n.Errorf("mask %v does not broadcast to the scores [%d %d]", in[3].Shape, s.sq, s.sk)
		}
	}
	if hasBias && ((bsq != 1 && bsq != s.sq) || (bsk != 1 && bsk != s.sk)) {
		return nil, n.Errorf("bias %v does not broadcast to the scores [%d %d]", in[5].Shape, s.sq, s.sk)
	}
	batch, err := BroadcastShapes(s.qB, s.kB, s.vB, s.mB, bB)
	if err != nil {
		return nil, n.Errorf("batch dims of Q %v, K %v, V %v, mask %v and bias do not broadcast", views[0].Shape, views[1].Shape, views[2].Shape, mshape)
	}
	p := &attnPlan{attnAttrs: a, sq: s.sq, d: s.d, sk: s.sk, dv: s.dv}
	logical := append(append([]int{}, batch...), s.sq, s.dv)
	if _, err := checkedElements(logical); err != nil {
		return nil, n.Errorf("%w", err)
	}
	ov := Contiguous(logical)
	p.out = logical
	if a.outView != nil {
		if !SameShape(a.outView.Shape, logical) {
			return nil, n.Errorf("out_view dims %v differ from the result's %v", a.outView.Shape, logical)
		}
		if !a.outView.Bijective(ShapeElems(a.outShape)) {
			return nil, n.Errorf("out_view %v does not cover out_shape %v exactly once", a.outView.Ints(), a.outShape)
		}
		ov, p.out = *a.outView, a.outShape
	}
	if a.scoresMode != "" {
		p.scoresShape = append(append([]int{}, batch...), s.sq, s.sk)
		if _, err := checkedElements(p.scoresShape); err != nil {
			return nil, n.Errorf("scores output: %w", err)
		}
	}
	p.batches = ShapeElems(batch)
	if len(in) > 4 && in[4] != nil {
		if p.keyLim, err = kvLengths(in[4], batch, s.sk); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	mview := Contiguous(append(append([]int{}, s.mB...), s.msq, s.msk))
	bview := Contiguous(append(append([]int{}, bB...), bsq, bsk))
	// Grouped-query attention: the heads axis of the batch splits into
	// (Hkv, g); K and V broadcast along g. The batch index order stays
	// that of the logical batch.
	iter := batch
	if a.kvGroup > 1 && len(batch) > 0 {
		ok := true
		ha := len(batch) - 1
		iter = append(append([]int{}, batch[:ha]...), batch[ha]/a.kvGroup, a.kvGroup)
		views[0], ok = splitHeadAxis(views[0], len(views[0].Shape)-3, a.kvGroup)
		for i := 1; i < 3 && ok; i++ {
			views[i], ok = unitAfterHeadAxis(views[i], len(views[i].Shape)-3)
		}
		if ok {
			ov, ok = splitHeadAxis(ov, ha, a.kvGroup)
		}
		if ok && len(s.mB) > 0 {
			mview, ok = splitHeadAxis(mview, len(s.mB)-1, a.kvGroup)
		}
		if ok && len(bB) > 0 {
			bview, ok = splitHeadAxis(bview, len(bB)-1, a.kvGroup)
		}
		if !ok || batch[ha]%a.kvGroup != 0 {
			return nil, n.Errorf("kv_group %d: cannot split the heads of Q %v, K %v, V %v", a.kvGroup, views[0].Shape, views[1].Shape, views[2].Shape)
		}
	}
	operand := func(v View, data []float32, trans bool) attnOperand {
		r := len(v.Shape)
		op := attnOperand{data: data, off: batchElemOffsets(iter, v.Shape[:r-2], v.Strides[:r-2], v.Offset), rs: v.Strides[r-2], cs: v.Strides[r-1]}
		if trans {
			op.rs, op.cs = op.cs, op.rs
		}
		return op
	}
	p.q = operand(views[0], in[0].Float32s(), false)
	p.k = operand(views[1], in[1].Float32s(), a.kT)
	p.v = operand(views[2], in[2].Float32s(), false)
	p.o = operand(ov, nil, false)
	p.qIdx, p.qUniq = uniqueIndex(p.q.off)
	p.kIdx, p.kUniq = uniqueIndex(p.k.off)
	p.vIdx, p.vUniq = uniqueIndex(p.v.off)
	p.maskKeys = s.sk
	if hasBias {
		r := len(bview.Shape)
		p.bOff = batchElemOffsets(iter, bview.Shape[:r-2], bview.Strides[:r-2], 0)
		if bsq != 1 {
			p.bRowStep = bsk
		}
		if bsk != 1 {
			p.bColStep = 1
		}
		p.biasFloats = in[5].Float32s()
		p.biasKeepsInf = true
		for _, x := range p.biasFloats {
			if x != x || math.IsInf(float64(x), 1) {
				p.biasKeepsInf = false
				break
			}
		}
	}
	if hasMask {
		r := len(mview.Shape)
		p.mOff = batchElemOffsets(iter, mview.Shape[:r-2], mview.Strides[:r-2], 0)
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
		if a.padKeys && s.msk < s.sk {
			p.maskKeys = s.msk
			if s.msk == 1 {
				p.mColStep = 0 // one key: no broadcast, the rest is padding
			}
			p.limitKeys(s.msk)
		}
	}
	return p, nil
}

// kvLengths reads the kv_lengths input: the number of keys each batch
// matrix takes (indexed by the batch's first dim, clamped to [0, sk]).
func kvLengths(t *ir.Tensor, batch []int, sk int) ([]int, error) {
	if t.DType != ir.Int64 || t.Rank() != 1 {
		return nil, fmt.Errorf("kv_lengths must be a 1-D int64 tensor, got %v %v", t.DType, t.Shape)
	}
	if len(batch) == 0 {
		return nil, fmt.Errorf("kv_lengths needs a batch dim (inputs of rank ≥ 3)")
	}
	lens := t.Int64s()
	if len(lens) != 1 && len(lens) != batch[0] {
		return nil, fmt.Errorf("kv_lengths has %d entries, the batch has %d", len(lens), batch[0])
	}
	count := ShapeElems(batch)
	inner := 1
	if batch[0] > 0 {
		inner = count / batch[0]
	}
	lim := make([]int, count)
	for b := range lim {
		l := lens[0]
		if len(lens) > 1 {
			l = lens[b/inner]
		}
		lim[b] = int(min(max(l, 0), int64(sk)))
	}
	return lim, nil
}

// limitKeys caps every batch's key limit at n.
func (p *attnPlan) limitKeys(n int) {
	if p.keyLim == nil {
		p.keyLim = make([]int, p.batches)
		for b := range p.keyLim {
			p.keyLim[b] = p.sk
		}
	}
	for b := range p.keyLim {
		p.keyLim[b] = min(p.keyLim[b], n)
	}
}

func runFusedAttention(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	p, err := planFusedAttention(n, in)
	if err != nil {
		return nil, err
	}
	out := []*ir.Tensor{ir.NewTensor(ir.Float, p.out)}
	var scores []float32
	if p.scoresShape != nil {
		out = append(out, ir.NewTensor(ir.Float, p.scoresShape))
		scores = out[1].Float32s()
	}
	p.run(ctx, out[0].Float32s(), scores, true)
	return out, nil
}

func runFusedAttentionInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
	p, err := planFusedAttention(n, in)
	if err != nil {
		return err
	}
	fits := func(k int, shape []int) bool {
		return len(out) > k && out[k] != nil && out[k].DType == ir.Float && SameShape(out[k].Shape, shape) && len(out[k].Float32s()) == ShapeElems(shape)
	}
	if !fits(0, p.out) {
		return n.Errorf("internal error: output buffer does not match shape %v", p.out)
	}
	var scores []float32
	if p.scoresShape != nil {
		if !fits(1, p.scoresShape) {
			return n.Errorf("internal error: scores buffer does not match shape %v", p.scoresShape)
		}
		scores = out[1].Float32s()
	}
	p.run(ctx, out[0].Float32s(), scores, false)
	return nil
}

func ceilTo(x, m int) int { return (x + m - 1) / m * m }

// run computes the output into out (zeroed already when zeroed is set)
// and, when requested, the scores into scores, with the packed operands
// and the workers' scratch from ctx.Scratch.
func (p *attnPlan) run(ctx *Context, out, scores []float32, zeroed bool) {
	threads := computeThreads(ctx)
	if len(out) == 0 && len(scores) == 0 {
		return
	}
	if p.sk == 0 || (p.dv == 0 && scores == nil) {
		// Sk = 0: softmax over nothing times an empty V is MatMul's zero sum.
		if !zeroed {
			clear(out)
		}
		return
	}
	p.o.data, p.scores = out, scores
	p.vMean, p.vMeanOnce = nil, nil
	p.hiddenMax, p.exactCut = nil, false
	if p.causal && !math.IsInf(float64(p.causalFill), -1) {
		if p.exactCut = p.scores != nil; !p.exactCut {
			p.hiddenMax = p.cutBounds()
		}
	}
	if p.uniformRows {
		p.vMean, p.vMeanOnce = make([]float32, len(p.vUniq)*p.dv), make([]sync.Once, len(p.vUniq))
	}
	p.bf16 = ctx.bf16() && kernel.BF16 && tileLoop
	p.kInPlace = tileLoop && !p.bf16 && p.k.cs == 1
	p.vInPlace = tileLoop && !p.bf16 && p.v.cs == 1 && p.dv%attnMR == 0
	perKey := p.maskKind != "" && p.mRowStep == 0 && (p.maskFloats != nil || math.IsInf(float64(p.fill), -1))
	p.scoresExp = (p.kInPlace || p.bf16) && p.softcap == 0 && p.scoresMode == "" && p.biasFloats == nil && (p.maskFloats == nil || perKey)
	var maskRows []int // the distinct mask rows of a per-key mask on the fast path
	if p.scoresExp && perKey {
		p.keyBiasIdx, maskRows = uniqueIndex(p.mOff)
	}
	skPad, dvPad, sqPad := ceilTo(p.sk, attnMR), ceilTo(p.dv, attnMR), ceilTo(p.sq, attnNR)
	dq := p.d // Q's packed columns (pair words in bf16)
	kLen, vLen, qLen := skPad*p.d, dvPad*p.sk, sqPad*p.d
	tail0 := p.sk / attnMR * attnMR // first key of K's partial last sliver
	switch {
	case p.bf16:
		dq = (p.d + 1) / 2
		kLen, vLen, qLen = skPad*dq, dvPad*((p.sk+1)/2), sqPad*dq
	case p.kInPlace:
		kLen = (skPad - tail0) * p.d
	}
	if p.vInPlace {
		vLen = 0
	}
	// In fp32 each item packs its own panel of scale·Qᵀ into its worker's
	// scratch, where it stays in L1: a panel serves one item only, and
	// packing all of Q up front wrote and re-read Sq·D floats per matrix
	// through the caches (10% of the op at S=512 once the projections had
	// evicted that scratch).
	qPerItem := !p.bf16
	if qPerItem {
		qLen = 0
	}
	operands := kLen*len(p.kUniq) + vLen*len(p.vUniq) + qLen*len(p.qUniq)
	packed := ctx.ScratchFloats(operands + len(maskRows)*p.sk)
	packed, p.keyBias = packed[:operands], nil
	if maskRows != nil {
		p.keyBias = packed[operands : operands+len(maskRows)*p.sk]
		p.fillKeyBias(maskRows)
	}
	kp, packed := packed[:kLen*len(p.kUniq)], packed[kLen*len(p.kUniq):]
	vp, qp := packed[:vLen*len(p.vUniq)], packed[vLen*len(p.vUniq):]
	// Pack K, V and scale·Q of every batch matrix up front, in chunks of
	// rows with the matrices inner: heads interleaved in the rows of a
	// fused projection are then read sequentially, a chunk at a time.
	const chunk = 96 // rows per task, a multiple of every MR and NR
	kTasks, vTasks, qTasks := (p.sk+chunk-1)/chunk, (p.sk+chunk-1)/chunk, (p.sq+chunk-1)/chunk
	if p.kInPlace && tail0 == p.sk {
		kTasks = 0 // K read in place, no partial sliver
	}
	if p.vInPlace {
		vTasks = 0
	}
	if qPerItem {
		qTasks = 0
	}
	parallelFor(threads, kTasks+vTasks+qTasks, func(t int) {
		switch {
		case t < kTasks:
			k0, k1 := t*chunk, min(p.sk, (t+1)*chunk)
			for i, off := range p.kUniq {
				switch {
				case p.bf16:
					packAttnKBF16(wordsOf(kp[i*kLen:(i+1)*kLen]), p.k.data, off, p.k.rs, p.k.cs, p.sk, p.d, k0, k1)
				case !p.kInPlace:
					packAttnK(kp[i*kLen:(i+1)*kLen], p.k.data, off, p.k.rs, p.k.cs, p.sk, p.d, k0, k1)
				case k1 > tail0: // the partial last sliver, as a matrix of its own
					packAttnK(kp[i*kLen:(i+1)*kLen], p.k.data, off+tail0*p.k.rs, p.k.rs, p.k.cs, p.sk-tail0, p.d, 0, p.sk-tail0)
				}
			}
		case t < kTasks+vTasks:
			k0 := (t - kTasks) * chunk
			k1 := min(p.sk, k0+chunk)
			for i, off := range p.vUniq {
				switch {
				case p.bf16:
					packAttnVBF16(wordsOf(vp[i*vLen:(i+1)*vLen]), p.v.data, off, p.v.rs, p.v.cs, p.sk, p.dv, k0, k1)
				case !p.vInPlace:
					packAttnV(vp[i*vLen:(i+1)*vLen], p.v.data, off, p.v.rs, p.v.cs, p.sk, p.dv, k0, k1)
				}
			}
		default:
			i0 := (t - kTasks - vTasks) * chunk
			for i, off := range p.qUniq {
				if p.bf16 {
					packQBF16(wordsOf(qp[i*qLen:(i+1)*qLen]), p.q.data, off, p.q.rs, p.q.cs, p.sq, p.d, p.scale, i0, min(p.sq, i0+chunk))
					continue
				}
				p.packQ(qp[i*qLen+i0*p.d:(i+1)*qLen], off, i0, min(p.sq, i0+chunk))
			}
		}
	})
	qBlocks := (p.sq + attnQBlock - 1) / attnQBlock
	items := p.batches * qBlocks
	workers := max(1, min(threads, items))
	per := p.workFloats(dvPad, qPerItem)
	scratch := ctx.ScratchFloats(workers * per)
	var wid atomic.Int64
	work := func(next func() int) {
		i := int(wid.Add(1) - 1)
		w := p.newWork(dvPad, qPerItem, scratch[i*per:(i+1)*per])
		for it := next(); it < items; it = next() {
			b := it / qBlocks
			i0 := (it % qBlocks) * attnQBlock
			var qb []float32
			if qPerItem {
				p.packQ(w.qp, p.qUniq[p.qIdx[b]], i0, min(p.sq, i0+attnQBlock))
				qb = w.qp
			} else {
				qb = qp[p.qIdx[b]*qLen+i0*dq : (p.qIdx[b]+1)*qLen]
			}
			p.item(b, i0, w, qb, kp[p.kIdx[b]*kLen:(p.kIdx[b]+1)*kLen], vp[p.vIdx[b]*vLen:(p.vIdx[b]+1)*vLen], dvPad, p.exactCut)
		}
	}
	if workers == 1 {
		it := -1
		work(func() int { it++; return it })
		return
	}
	var counter atomic.Int64
	parallel.Run(workers, func(int) {
		work(func() int { return int(counter.Add(1) - 1) })
	})
}

// parallelFor runs f(0..count-1) on up to threads goroutines.
func parallelFor(threads, count int, f func(i int)) {
	workers := max(1, min(threads, count))
	if workers == 1 {
		for i := 0; i < count; i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	parallel.Run(workers, func(int) {
		for i := int(next.Add(1) - 1); i < count; i = int(next.Add(1) - 1) {
			f(i)
		}
	})
}

// packAttnK packs keys [k0, k1) (k0 a multiple of MR) of the sk×d matrix
// at data[off] (element (key, j) at off + key·rs + j·cs) as A-slivers of
// MR keys, zero-padding the last sliver.
func packAttnK(dst, data []float32, off, rs, cs, sk, d, k0, k1 int) {
	for s := k0 / attnMR; s*attnMR < k1; s++ {
		sl := dst[s*attnMR*d : (s+1)*attnMR*d]
		rows := min(attnMR, sk-s*attnMR)
		if rows < attnMR {
			clear(sl)
		}
		// Element by element across the sliver's rows, so that writes run
		// sequentially (the rows stay in L1).
		var bases [maxLanes]int
		for r := 0; r < rows; r++ {
			bases[r] = off + (s*attnMR+r)*rs
		}
		for j := 0; j < d; j++ {
			dd := sl[j*attnMR : j*attnMR+rows]
			for r := range dd {
				dd[r] = data[bases[r]+j*cs]
			}
		}
	}
}

// packAttnV packs keys [k0, k1) of the transpose of the sk×dv matrix at
// data[off] (element (key, j) at off + key·rs + j·cs) into A-slivers of
// MR value dims over all sk keys, zero-padding the last sliver.
func packAttnV(dst, data []float32, off, rs, cs, sk, dv, k0, k1 int) {
	for key := k0; key < k1; key++ {
		base := off + key*rs
		for s := 0; s*attnMR < dv; s++ {
			cols := min(attnMR, dv-s*attnMR)
			dd := dst[s*attnMR*sk+key*attnMR : s*attnMR*sk+key*attnMR+attnMR]
			if cols < attnMR {
				clear(dd[cols:])
			}
			src := base + s*attnMR*cs
			if cs == 1 {
				copy(dd[:cols], data[src:src+cols])
				continue
			}
			for r := range dd[:cols] {
				dd[r] = data[src+r*cs]
			}
		}
	}
}

// attnWork is one worker's scratch memory.
type attnWork struct {
	st  []float32 // scores of a key block, transposed panels
	acc []float32 // accumulator, transposed: dvPad × attnQBlock
	m   []float32 // running max per query
	l   []float64 // running sum per query
	cls []uint8   // mask class per query row of the current key block
	pw  []uint32  // bf16: one panel's probabilities as pair words
	pwf []float32 // pw's scratch as floats: the bf16 fast path's raw scores past its kernel's tiles
	qp  []float32 // fp32: the item's panels of scale·Qᵀ
}

// workFloats is the float32 scratch one worker needs.
func (p *attnPlan) workFloats(dvPad int, qPerItem bool) int {
	return attnQBlock*attnKBlock + dvPad*attnQBlock + attnQBlock + p.pairWords() + p.itemQFloats(qPerItem)
}

// itemQFloats is the scratch of one item's packed Q panels when each item
// packs its own (qPerItem), else 0.
func (p *attnPlan) itemQFloats(qPerItem bool) int {
	if !qPerItem {
		return 0
	}
	return ceilTo(attnQBlock, attnNR) * p.d
}

// pairWords is the scratch of one panel's probabilities in bf16 pairs.
func (p *attnPlan) pairWords() int {
	if !p.bf16 {
		return 0
	}
	return (attnKBlock + 1) / 2 * attnNR
}

// newWork carves a worker's scratch out of buf (workFloats long).
func (p *attnPlan) newWork(dvPad int, qPerItem bool, buf []float32) *attnWork {
	take := func(n int) []float32 {
		s := buf[:n:n]
		buf = buf[n:]
		return s
	}
	w := &attnWork{
		st:  take(attnQBlock * attnKBlock),
		acc: take(dvPad * attnQBlock),
		m:   take(attnQBlock),
		pwf: take(p.pairWords()),
		qp:  take(p.itemQFloats(qPerItem)),
		l:   make([]float64, attnQBlock),
		cls: make([]uint8, attnQBlock),
	}
	w.pw = wordsOf(w.pwf)
	return w
}

// Mask classes of one query row over one key block.
const (
	maskNone uint8 = iota // no score masked
	maskAll               // every score masked
	maskSome              // some masked: check each
	maskAdd               // additive mask: add it
)

// item computes output rows [i0, i0+attnQBlock) of batch matrix b with
// the batch's packed K (kp) and Vᵀ (vp). exact computes the scores past
// the causal diagonal at a finite causalFill instead of cutting them; an
// item that cut them checks each row against hiddenMax and is computed
// again exactly when a row fails.
func (p *attnPlan) item(b, i0 int, w *attnWork, qp, kp, vp []float32, dvPad int, exact bool) {
	qb, kb := attnQBlock, attnKBlock
	rows := min(qb, p.sq-i0)
	panels := (rows + attnNR - 1) / attnNR
	d, sk := p.d, p.sk
	dq := d // Q's packed columns per query (pair words in bf16)
	if p.bf16 {
		dq = (d + 1) / 2
	}
	acc := w.acc[:dvPad*qb]
	clear(acc)
	negInf := float32(math.Inf(-1))
	for r := range w.m {
		w.m[r], w.l[r] = negInf, 0
	}
	// Keys past lim are padding; with causal masking no row of the item
	// sees keys past the last row's diagonal. Blocks beyond either are
	// skipped, unless the scores are an output.
	lim := sk
	if p.keyLim != nil {
		lim = p.keyLim[b]
	}
	end := lim
	if p.causal && !exact {
		end = min(end, max(0, i0+rows+p.causalOff))
	}
	if p.scores != nil {
		end = sk
	}
	for j0 := 0; j0 < end; j0 += kb {
		cols := min(kb, sk-j0)
		if p.maskKind != "" && !p.classify(w.cls[:rows], b, i0, j0, min(cols, max(0, p.maskKeys-j0))) && p.scores == nil &&
			(p.biasFloats == nil || p.biasFirst || p.biasKeepsInf) {
			continue // every score of the block is masked with -inf
		}
		// keys[pn]: the block's keys panel pn's probabilities cover (the
		// fast path stops at the last key any of its queries sees).
		var keysa [attnQBlock]int // panels ≤ attnQBlock whatever attnNR
		keys := keysa[:panels]
		paired := false // st holds the probabilities as bf16 pairs (the bf16 fast path)
		if plain := p.masksPlain(w.cls[:rows]); p.scoresExp && !exact && (plain || p.keyBias != nil) {
			var bias []float32 // the per-key mask, where it hides or changes a score of the block
			if !plain {
				bias = p.keyBias[p.keyBiasIdx[b]*sk+j0 : (p.keyBiasIdx[b]+1)*sk]
			}
			for pn := 0; pn < panels; pn++ {
				lanes := min(attnNR, rows-pn*attnNR)
				keys[pn] = p.scoresExpPanel(w, pn, acc, dvPad, b, i0+pn*attnNR, lanes, j0, min(cols, lim-j0), bias, kp, qp[pn*attnNR*dq:])
			}
			paired = p.bf16
		} else {
			p.scoresSoftmax(w, acc, dvPad, b, i0, j0, rows, cols, lim, kp, qp, exact)
			for pn := range keys {
				keys[pn] = cols
			}
		}
		if dvPad == 0 {
			continue
		}
		for pn := 0; pn < panels; pn++ {
			cols := keys[pn]
			if cols == 0 {
				continue
			}
			bp := w.st[pn*attnNR*kb : pn*attnNR*kb+cols*attnNR]
			switch {
			case paired:
				contextPairsBF16(acc[pn*attnNR:], qb, wordsOf(w.st[pn*attnNR*kb:]), wordsOf(vp), sk, dvPad, j0, cols)
				continue
			case p.bf16:
				contextBF16(acc[pn*attnNR:], qb, bp, w.pw, wordsOf(vp), sk, dvPad, j0, cols)
				continue
			case p.vInPlace: // Vᵀ's MR rows at a key step are MR consecutive floats of V's row
				kernel.Sgemm8x32Loop(cols, &p.v.data[p.v.off[b]+j0*p.v.rs], &bp[0], &acc[pn*attnNR], p.v.rs, qb, dvPad/attnMR, attnMR, 0, attnMR*qb, true)
				continue
			case tileLoop:
				kernel.Sgemm8x32Loop(cols, &vp[j0*attnMR], &bp[0], &acc[pn*attnNR], attnMR, qb, dvPad/attnMR, attnMR*sk, 0, attnMR*qb, true)
				continue
			}
			for ds := 0; ds*attnMR < dvPad; ds++ {
				blas.MicroKernel(cols, vp[ds*attnMR*sk+j0*attnMR:], bp, acc[ds*attnMR*qb+pn*attnNR:], qb, true)
			}
		}
	}
	if p.hiddenMax != nil && !exact {
		for _, m := range w.m[:rows] {
			if !(float64(m)-p.hiddenMax[b] >= attnCutMargin) {
				p.item(b, i0, w, qp, kp, vp, dvPad, true)
				return
			}
		}
	}
	if p.scoresMode == ScoresWeights {
		p.normalizeWeights(b, i0, rows, w)
	}
	// out[r][c] = acc[c][r] / l[r]; a row whose scores are all -inf is
	// NaN, as Softmax gives (-inf - -inf), or with uniformRows the mean
	// of V's rows (put in its accumulator column, scaled by 1).
	inv := w.m[:rows] // the running max is no longer needed: reuse it
	for r := range inv {
		switch {
		case inv[r] != negInf:
			inv[r] = float32(1 / w.l[r])
		case p.uniformRows:
			for c, x := range p.meanV(b) {
				acc[c*qb+r] = x
			}
			inv[r] = 1
		default:
			inv[r] = float32(math.NaN())
		}
	}
	o := p.o
	base := o.off[b] + i0*o.rs
	if tileLoop && o.cs == 1 && rows%16 == 0 && p.dv%16 == 0 {
		for r := 0; r < rows; r += 16 {
			for c := 0; c < p.dv; c += 16 {
				_ = o.data[base+(r+15)*o.rs+c+15]
				kernel.TransposeScale16(&o.data[base+r*o.rs+c], o.rs, &acc[c*qb+r], qb, &inv[r])
			}
		}
		return
	}
	for r, sc := range inv {
		at := base + r*o.rs
		for c := 0; c < p.dv; c++ {
			o.data[at+c*o.cs] = acc[c*qb+r] * sc
		}
	}
}

// meanV returns the mean of the Sk rows of batch b's V matrix (Dv
// floats), computing it on first use (in float64) for every batch matrix
// that shares that V.
func (p *attnPlan) meanV(b int) []float32 {
	i := p.vIdx[b]
	mean := p.vMean[i*p.dv : (i+1)*p.dv]
	p.vMeanOnce[i].Do(func() {
		off := p.vUniq[i]
		for c := range mean {
			var sum float64
			for j := 0; j < p.sk; j++ {
				sum += float64(p.v.data[off+j*p.v.rs+c*p.v.cs])
			}
			mean[c] = float32(sum / float64(p.sk))
		}
	})
	return mean
}

// fillKeyBias writes keyBias for the distinct mask rows at the element
// offsets rows (a per-key mask: mRowStep 0).
func (p *attnPlan) fillKeyBias(rows []int) {
	negInf := float32(math.Inf(-1))
	for i, off := range rows {
		kb := p.keyBias[i*p.sk : (i+1)*p.sk]
		clear(kb[p.maskKeys:]) // padding past the mask: past the key limit too
		for j := range kb[:p.maskKeys] {
			at := off + j*p.mColStep
			switch {
			case p.maskFloats != nil:
				kb[j] = p.maskFloats[at] * p.maskScale
			case p.maskBools[at] == p.maskedVal:
				kb[j] = negInf
			default:
				kb[j] = 0
			}
		}
	}
}

// masksPlain reports whether no mask changes a score of the item's rows
// in the current key block (mask classes cls); the causal cut and the key
// limit the fast path handles itself (scoresExpPanel).
func (p *attnPlan) masksPlain(cls []uint8) bool {
	if p.maskKind != "" {
		for _, c := range cls {
			if c != maskNone {
				return false
			}
		}
	}
	return true
}

// scoresExpPanel turns the scores of keys [j0, j0+cols) (cols stops at the
// key limit) of panel pn (queries [q0, q0+lanes), scale·Qᵀ in qpan), plus
// the per-key mask bias[key] when bias is not nil (it starts at key j0),
// into probabilities under the panel's running shifts w.m, adding their
// sums to w.l, and returns how many of the block's keys the probabilities
// cover: with causal masking, those up to the last query's diagonal.
//
// Whole tiles of 8 keys that every lane sees (before the first query's
// diagonal) run through kernel.ScoresExp8x32 (in bf16
// kernel.ScoresExpBF16x32, which stores the probabilities as pair words
// at the start of the panel's st, and kp is the batch's packed K) in one
// pass: a tile rising more than attnRescaleSlack above a shift stops the
// kernel; the shift
// moves up to the tile's maximum (raiseShift) and the kernel resumes at
// that tile. The rest — the at most 5 tiles straddling the panel's causal
// diagonal and a last partial sliver of keys (packed in kp) — is computed
// raw (in bf16 into w.pwf, then paired after the kernel's tiles), masked,
// and goes through colMax and expCols.
func (p *attnPlan) scoresExpPanel(w *attnWork, pn int, acc []float32, dvPad, b, q0, lanes, j0, cols int, bias, kp, qpan []float32) int {
	plain := cols
	if p.causal {
		cols = min(cols, q0+lanes+p.causalOff-j0) // keys past the last query's diagonal: hidden from every lane
		plain = min(cols, q0+p.causalOff+1-j0)    // keys up to the first query's diagonal: seen by every lane
	}
	if cols <= 0 {
		return 0
	}
	st := w.st[pn*attnNR*attnKBlock:]
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	var suma, mxa [maxLanes]float32
	sum, mx := suma[:attnNR], mxa[:attnNR]
	full := max(plain, 0) / attnMR
	var k []float32
	dw := (p.d + 1) / 2 // bf16: K's and Q's pair words per key and query
	if !p.bf16 {
		k = p.k.data[p.k.off[b]+j0*p.k.rs:]
	}
	for done := 0; done < full; {
		var bp *float32
		if bias != nil {
			bp = &bias[done*attnMR]
		}
		if p.bf16 {
			done += kernel.ScoresExpBF16x32(dw, &wordsOf(kp)[(j0+done*attnMR)*dw], dw, &wordsOf(qpan)[0], &wordsOf(st)[done*attnMR/2*attnNR], full-done, attnMR*dw,
				&m[0], &sum[0], &mx[0], bp)
		} else {
			done += kernel.ScoresExp8x32(p.d, &k[done*attnMR*p.k.rs], p.k.rs, &qpan[0], &st[done*attnMR*attnNR], attnNR, full-done, attnMR*p.k.rs, attnMR*attnNR,
				&m[0], &sum[0], &mx[0], bp)
		}
		if done < full {
			p.raiseShift(w, pn, mx, st, done*attnMR, sum, acc, dvPad)
		}
	}
	if rest := cols - full*attnMR; rest > 0 {
		// Raw scores: slivers of K's rows in place, then K's packed
		// partial last sliver when the block reaches it.
		raw := st[full*attnMR*attnNR:]
		slivers := (rest + attnMR - 1) / attnMR
		tail0 := p.sk / attnMR * attnMR
		inPlace := min(slivers, max(0, (tail0-j0)/attnMR-full))
		switch {
		case p.bf16:
			raw = w.pwf
			scoresBF16(raw, wordsOf(kp), wordsOf(qpan), p.d, j0+full*attnMR, slivers*attnMR)
		case inPlace > 0:
			kernel.Sgemm8x32RowsLoop(p.d, &k[full*attnMR*p.k.rs], p.k.rs, &qpan[0], &raw[0], attnNR, inPlace, attnMR*p.k.rs, 0, attnMR*attnNR, false)
		}
		if !p.bf16 && inPlace < slivers {
			kernel.Sgemm8x32Loop(p.d, &kp[0], &qpan[0], &raw[inPlace*attnMR*attnNR], attnMR, attnNR, 1, 0, 0, 0, false)
		}
		if bias != nil {
			for key, v := range bias[full*attnMR : full*attnMR+rest] {
				row := raw[key*attnNR : (key+1)*attnNR]
				for c := range row {
					row[c] += v
				}
			}
		}
		if p.causal {
			fillCausal(raw[:rest*attnNR], rest, j0+full*attnMR-q0-p.causalOff, float32(math.Inf(-1)))
		}
		for c := range mx {
			mx[c] = float32(math.Inf(-1))
		}
		colMax(raw, rest, mx)
		p.raiseShift(w, pn, mx, st, full*attnMR, sum, acc, dvPad)
		shift := mxa[:attnNR] // as the kernel: a shift of -Inf subtracts 0
		for c, v := range m {
			shift[c] = v
			if v == float32(math.Inf(-1)) {
				shift[c] = 0
			}
		}
		expCols(raw, rest, shift, sum)
		if p.bf16 {
			kernel.PairRowsBF16x32(&wordsOf(st)[full*attnMR/2*attnNR], &raw[0], rest)
		}
	}
	l := w.l[pn*attnNR : (pn+1)*attnNR]
	for c, v := range sum {
		l[c] += float64(v)
	}
	return cols
}

// raiseShift moves the running shift of panel pn's lanes whose maximum mx
// exceeds it by more than attnRescaleSlack up to that maximum, rescaling
// what was computed under the old shift by exp(old − new): the running sum
// of earlier blocks, the accumulator's column, this block's sum so far and
// its probabilities in the first keys rows of st (in bf16, keys even, the
// first keys/2 rows of pair words).
func (p *attnPlan) raiseShift(w *attnWork, pn int, mx, st []float32, keys int, sum, acc []float32, dvPad int) {
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	l := w.l[pn*attnNR : (pn+1)*attnNR]
	negInf := float32(math.Inf(-1))
	for c := range m {
		if !(mx[c] > m[c]+attnRescaleSlack) {
			continue
		}
		if m[c] == negInf {
			// Nothing finite so far: the sums, the accumulator and the
			// probabilities are 0 or NaN, which exp(-Inf) = 0 leaves as
			// they are.
			m[c] = mx[c]
			continue
		}
		corr := fastExp32(m[c] - mx[c])
		m[c] = mx[c]
		l[c] *= float64(corr)
		sum[c] *= corr
		for r := 0; r < dvPad; r++ {
			acc[r*attnQBlock+pn*attnNR+c] *= corr
		}
		if p.bf16 {
			scalePairLane(wordsOf(st), keys/2, c, corr)
			continue
		}
		for key := 0; key < keys; key++ {
			st[key*attnNR+c] *= corr
		}
	}
}

// scoresSoftmax computes the scores of key block [j0, j0+cols) for the
// item's rows (transposed panels in w.st), applies softcap, masks, bias,
// key limit and causal cut, writes the scores output's stages, and turns
// each panel into probabilities under the running shifts (softmaxPanel).
func (p *attnPlan) scoresSoftmax(w *attnWork, acc []float32, dvPad, b, i0, j0, rows, cols, lim int, kp, qp []float32, exact bool) {
	d, sk, kb := p.d, p.sk, attnKBlock
	panels := (rows + attnNR - 1) / attnNR
	colsPad := ceilTo(cols, attnMR)
	// Scores, transposed: MR keys × NR queries per tile.
	switch {
	case p.bf16:
		dw := (d + 1) / 2
		for pn := 0; pn < panels; pn++ {
			scoresBF16(w.st[pn*attnNR*kb:], wordsOf(kp), wordsOf(qp[pn*attnNR*dw:]), d, j0, colsPad)
		}
	case p.kInPlace:
		// Slivers before K's partial last one read K's rows in place;
		// that one (at most one, the block's last) is packed in kp.
		slivers := colsPad / attnMR
		inPlace := min(slivers, max(0, (sk/attnMR*attnMR-j0)/attnMR))
		for pn := 0; pn < panels; pn++ {
			st, qpan := w.st[pn*attnNR*kb:], qp[pn*attnNR*d:]
			if inPlace > 0 {
				kernel.Sgemm8x32RowsLoop(d, &p.k.data[p.k.off[b]+j0*p.k.rs], p.k.rs, &qpan[0], &st[0], attnNR, inPlace, attnMR*p.k.rs, 0, attnMR*attnNR, false)
			}
			if inPlace < slivers {
				kernel.Sgemm8x32Loop(d, &kp[0], &qpan[0], &st[inPlace*attnMR*attnNR], attnMR, attnNR, 1, 0, 0, 0, false)
			}
		}
	case tileLoop:
		for pn := 0; pn < panels; pn++ {
			kernel.Sgemm8x32Loop(d, &kp[j0*d], &qp[pn*attnNR*d], &w.st[pn*attnNR*kb], attnMR, attnNR, colsPad/attnMR, attnMR*d, 0, attnMR*attnNR, false)
		}
	default:
		for ks := 0; ks*attnMR < colsPad; ks++ {
			a := kp[(j0+ks*attnMR)*d : (j0+ks*attnMR+attnMR)*d]
			for pn := 0; pn < panels; pn++ {
				blas.MicroKernel(d, a, qp[pn*attnNR*d:(pn+1)*attnNR*d], w.st[pn*attnNR*kb+ks*attnMR*attnNR:], attnNR, false)
			}
		}
	}
	for pn := 0; pn < panels; pn++ {
		st := w.st[pn*attnNR*kb : pn*attnNR*kb+cols*attnNR]
		lanes := min(attnNR, rows-pn*attnNR)
		q0 := i0 + pn*attnNR
		if p.scoresMode == ScoresRaw {
			p.writeScores(st, b, q0, j0, cols, lanes)
		}
		if p.softcap > 0 {
			softcapScores(st, p.softcap)
		}
		if p.scoresMode == ScoresSoftcapped {
			p.writeScores(st, b, q0, j0, cols, lanes)
		}
		if p.biasFloats != nil && p.biasFirst {
			p.biasPanel(st, b, q0, j0, cols, lanes)
		}
		if exact && p.causal && j0+cols-1 > q0+p.causalOff {
			fillCausal(st, cols, j0-q0-p.causalOff, p.causalFill)
		}
		if p.maskKind != "" {
			if mcols := min(cols, p.maskKeys-j0); mcols > 0 {
				p.maskPanel(st, w.cls[pn*attnNR:pn*attnNR+lanes], b, q0, j0, mcols)
			}
		}
		if p.biasFloats != nil && !p.biasFirst {
			p.biasPanel(st, b, q0, j0, cols, lanes)
		}
		if j0+cols > lim {
			maskKeysFrom(st, max(0, lim-j0), cols, 0, attnNR)
		}
		if p.causal && !exact && j0+cols-1 > q0+p.causalOff {
			fillCausal(st, cols, j0-q0-p.causalOff, float32(math.Inf(-1)))
		}
		if p.scoresMode == ScoresBiased || p.scoresMode == ScoresWeights {
			p.writeScores(st, b, q0, j0, cols, lanes)
		}
		p.softmaxPanel(st, cols, w, pn, acc, dvPad)
	}
}

// maskKeysFrom sets the scores of keys [from, cols) of lanes [c0, c1) of a
// transposed panel to -inf.
func maskKeysFrom(st []float32, from, cols, c0, c1 int) {
	negInf := float32(math.Inf(-1))
	for key := from; key < cols; key++ {
		row := st[key*attnNR : (key+1)*attnNR]
		for c := c0; c < c1; c++ {
			row[c] = negInf
		}
	}
}

// fillCausal sets to v (-inf: the cut) the scores of a transposed panel
// whose key (row key) lies past its query's (lane c's) diagonal: c < key +
// shift, with shift = j0 - q0 - causal_offset. Each key row fills its
// first lanes.
func fillCausal(st []float32, cols, shift int, v float32) {
	for key := max(0, 1-shift); key < cols; key++ {
		row := st[key*attnNR : (key+1)*attnNR]
		for c := range row[:min(key+shift, attnNR)] {
			row[c] = v
		}
	}
}

// cutBounds returns, for each batch matrix, the largest value a score past
// the causal diagonal could take with a finite causalFill: the fill, raised
// to a bool mask's finite fill where the mask replaces it, plus the largest
// additive mask term and (unless the bias comes first and the fill replaces
// it) the largest bias term of that matrix. A NaN or +inf term makes the
// bound fail every row's check, so those items run exactly.
func (p *attnPlan) cutBounds() []float64 {
	type key struct{ m, b int }
	seen := map[key]float64{}
	out := make([]float64, p.batches)
	for b := range out {
		k := key{-1, -1}
		if p.maskKind != "" {
			k.m = p.mOff[b]
		}
		if p.biasFloats != nil && !p.biasFirst {
			k.b = p.bOff[b]
		}
		if u, ok := seen[k]; ok {
			out[b] = u
			continue
		}
		u := float64(p.causalFill)
		switch {
		case p.maskFloats != nil:
			u += p.largestTerm(p.maskFloats, k.m, p.mRowStep, p.mColStep, p.maskKeys, p.maskScale)
		case p.maskKind != "" && !math.IsInf(float64(p.fill), -1):
			u = max(u, float64(p.fill))
		}
		if k.b >= 0 {
			u += p.largestTerm(p.biasFloats, k.b, p.bRowStep, p.bColStep, p.sk, p.biasScale)
		}
		seen[k], out[b] = u, u
	}
	return out
}

// largestTerm returns the largest scale·x over the [Sq, keys] matrix of
// data at off with the given row and column steps (0: broadcast), NaN when
// an element is NaN.
func (p *attnPlan) largestTerm(data []float32, off, rowStep, colStep, keys int, scale float32) float64 {
	rows, cols := 1, 1
	if rowStep != 0 {
		rows = p.sq
	}
	if colStep != 0 {
		cols = keys
	}
	hi, lo := float32(math.Inf(-1)), float32(math.Inf(1))
	for i := 0; i < rows; i++ {
		row := data[off+i*rowStep:]
		if colStep == 0 {
			row = row[:1]
		} else {
			row = row[:cols]
		}
		h, l := maxMin32(row)
		hi, lo = max(hi, h), min(lo, l)
	}
	// scale·x is largest at the largest x for scale ≥ 0, at the smallest
	// otherwise; max and min keep a NaN, and so does the product.
	if scale >= 0 {
		return float64(scale * hi)
	}
	return float64(scale * lo)
}

// maxMin32 returns the largest and smallest of xs (NaN when one is NaN;
// -inf and +inf when xs is empty), four lanes at a time.
func maxMin32(xs []float32) (hi, lo float32) {
	inf := float32(math.Inf(1))
	h0, h1, h2, h3 := -inf, -inf, -inf, -inf
	l0, l1, l2, l3 := inf, inf, inf, inf
	n := len(xs) / 4 * 4
	for i := 0; i < n; i += 4 {
		x := xs[i : i+4 : i+4]
		h0, h1, h2, h3 = max(h0, x[0]), max(h1, x[1]), max(h2, x[2]), max(h3, x[3])
		l0, l1, l2, l3 = min(l0, x[0]), min(l1, x[1]), min(l2, x[2]), min(l3, x[3])
	}
	for _, x := range xs[n:] {
		h0, l0 = max(h0, x), min(l0, x)
	}
	return max(h0, h1, h2, h3), min(l0, l1, l2, l3)
}

// writeScores copies a transposed panel (keys [j0, j0+cols) of queries
// [q0, q0+lanes)) into the scores output of batch b.
func (p *attnPlan) writeScores(st []float32, b, q0, j0, cols, lanes int) {
	base := (b*p.sq+q0)*p.sk + j0
	for c := 0; c < lanes; c++ {
		row := p.scores[base+c*p.sk : base+c*p.sk+cols]
		for key := range row {
			row[key] = st[key*attnNR+c]
		}
	}
}

// normalizeWeights turns the scores output's rows [i0, i0+rows) of batch b,
// written as the softmax's input, into its output: exp(s - shift) / sum
// with the row's final shift and sum (NaN for a row of -inf scores, 1/Sk
// with uniformRows).
func (p *attnPlan) normalizeWeights(b, i0, rows int, w *attnWork) {
	negInf := float32(math.Inf(-1))
	for r := 0; r < rows; r++ {
		row := p.scores[(b*p.sq+i0+r)*p.sk : (b*p.sq+i0+r+1)*p.sk]
		m := w.m[r]
		if m == negInf {
			fill := float32(math.NaN())
			if p.uniformRows {
				fill = 1 / float32(p.sk)
			}
			for j := range row {
				row[j] = fill
			}
			continue
		}
		inv := float32(1 / w.l[r])
		expShiftSum32(row, row, m) // vectorized; the row's weights sum to l
		for j := range row {
			row[j] *= inv
		}
	}
}

// softcapScores replaces every score s by c·tanh(s/c).
func softcapScores(st []float32, c float32) {
	inv := 1 / c
	for i, s := range st {
		st[i] = c * tanh32(s*inv)
	}
}

// tanh32 is tanh in float32 (Cephes' tanhf: a polynomial below 0.625, the
// exponential form above; about 2 ulp).
func tanh32(x float32) float32 {
	z := x
	if z < 0 {
		z = -z
	}
	switch {
	case z != z:
		return x
	case z > 44.0148: // 0.5·log(2^127): tanh is ±1 in float32
		if x < 0 {
			return -1
		}
		return 1
	case z >= 0.625:
		e := fastExp32(2 * z)
		t := 1 - 2/(e+1)
		if x < 0 {
			return -t
		}
		return t
	}
	s := x * x
	return ((((-5.70498872745e-3*s+2.06390887954e-2)*s-5.37397155531e-2)*s+1.33314422036e-1)*s-3.33332819422e-1)*s*x + x
}

// packQ packs scale·Q[i0:i1] (i0 a multiple of NR) of the Q matrix at
// q.data[off] into qp, the matrix's B-panels of NR queries over D,
// zero-padding the last panel.
func (p *attnPlan) packQ(qp []float32, off, i0, i1 int) {
	d, q, sc := p.d, p.q, p.scale
	for pn := i0 / attnNR; pn*attnNR < i1; pn++ {
		at := pn - i0/attnNR
		pan := qp[at*attnNR*d : (at+1)*attnNR*d]
		lanes := min(attnNR, p.sq-pn*attnNR)
		if lanes == 32 && tileLoop && q.cs == 1 && d%16 == 0 && d > 0 {
			// 16×16 blocks transposed in registers.
			_ = q.data[off+(pn*attnNR+31)*q.rs+d-1]
			var scales [16]float32
			for i := range scales {
				scales[i] = sc
			}
			for r := 0; r < 32; r += 16 {
				for j := 0; j < d; j += 16 {
					kernel.TransposeScale16(&pan[j*attnNR+r], attnNR, &q.data[off+(pn*attnNR+r)*q.rs+j], q.rs, &scales[0])
				}
			}
			continue
		}
		if lanes == 32 && tileLoop && q.cs == 1 && 31*q.rs < 1<<31 && d > 0 {
			_ = q.data[off+(pn*attnNR+31)*q.rs+d-1]
			kernel.GatherScale32(&pan[0], &q.data[off+pn*attnNR*q.rs], q.rs, d, sc)
			continue
		}
		if lanes < attnNR {
			clear(pan)
		}
		for c := 0; c < lanes; c++ {
			base := off + (pn*attnNR+c)*q.rs
			if q.cs == 1 {
				for j, x := range q.data[base : base+d] {
					pan[j*attnNR+c] = sc * x
				}
				continue
			}
			for j := 0; j < d; j++ {
				pan[j*attnNR+c] = sc * q.data[base+j*q.cs]
			}
		}
	}
}

// classify sets the mask class of each query row for keys [j0, j0+cols)
// and reports whether the block has to be computed at all (false when a
// -inf fill hides every key of the block from every row).
func (p *attnPlan) classify(cls []uint8, b, i0, j0, cols int) bool {
	if p.maskFloats != nil {
		for r := range cls {
			cls[r] = maskAdd
		}
		return true
	}
	all := true
	for r := range cls {
		if r > 0 && p.mRowStep == 0 {
			cls[r] = cls[0] // the mask row is broadcast over queries
			continue
		}
		off := p.mOff[b] + (i0+r)*p.mRowStep + j0*p.mColStep
		switch {
		case p.mColStep == 0:
			cls[r] = maskNone
			if p.maskBools[off] == p.maskedVal {
				cls[r] = maskAll
			}
		default:
			cls[r] = boolRunClass(p.maskBools[off:off+cols], p.maskedVal)
		}
		all = all && cls[r] == maskAll
	}
	if p.mRowStep == 0 {
		all = cls[0] == maskAll
	}
	return !all || !math.IsInf(float64(p.fill), -1)
}

// boolRunClass tells whether none, all or some of mk equal masked.
func boolRunClass(mk []bool, masked bool) uint8 {
	if len(mk) == 0 {
		return maskNone
	}
	bs := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(mk))), len(mk))
	var hit, miss bool
	words := len(bs) / 8
	if words > 0 {
		ws := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(bs))), words)
		const ones = 0x0101010101010101
		mw := uint64(0)
		if masked {
			mw = ones
		}
		for _, x := range ws {
			switch x {
			case mw:
				hit = true
			case mw ^ ones:
				miss = true
			default:
				return maskSome
			}
			if hit && miss {
				return maskSome
			}
		}
	}
	for _, v := range mk[words*8:] {
		if v == masked {
			hit = true
		} else {
			miss = true
		}
	}
	switch {
	case hit && miss:
		return maskSome
	case hit:
		return maskAll
	}
	return maskNone
}

// maskPanel masks one transposed scores panel: lane c is query i0+c, row
// key is key j0+key.
func (p *attnPlan) maskPanel(st []float32, cls []uint8, b, i0, j0, cols int) {
	for c, k := range cls {
		if k == maskNone {
			continue
		}
		off := p.mOff[b] + (i0+c)*p.mRowStep + j0*p.mColStep
		switch k {
		case maskAll:
			for key := 0; key < cols; key++ {
				st[key*attnNR+c] = p.fill
			}
		case maskSome:
			for key, v := range p.maskBools[off : off+cols] {
				if v == p.maskedVal {
					st[key*attnNR+c] = p.fill
				}
			}
		case maskAdd:
			if p.mColStep == 0 {
				add := p.maskFloats[off] * p.maskScale
				for key := 0; key < cols; key++ {
					st[key*attnNR+c] += add
				}
				continue
			}
			for key, v := range p.maskFloats[off : off+cols] {
				st[key*attnNR+c] += v * p.maskScale
			}
		}
	}
}

// biasPanel adds bias_scale·bias to one transposed scores panel: lane c
// is query i0+c, row key is key j0+key.
func (p *attnPlan) biasPanel(st []float32, b, i0, j0, cols, lanes int) {
	sc := p.biasScale
	for c := 0; c < lanes; c++ {
		off := p.bOff[b] + (i0+c)*p.bRowStep + j0*p.bColStep
		if p.bColStep == 0 {
			add := p.biasFloats[off] * sc
			for key := 0; key < cols; key++ {
				st[key*attnNR+c] += add
			}
			continue
		}
		for key, v := range p.biasFloats[off : off+cols] {
			st[key*attnNR+c] += v * sc
		}
	}
}

// attnRescaleSlack is how far a row's scores may rise above the shift its
// exponentials use before the shift moves up (and the accumulator is
// rescaled): exp(s - shift) ≤ e^8 ≈ 3000 cannot overflow, and rescaling
// becomes rare after the first key blocks. The result is the same: every
// term and the sum use one shift.
const attnRescaleSlack = 8

// softmaxPanel turns one panel of (masked) scores into exp(s - shift),
// where shift is the row's running max (kept while the scores stay within
// attnRescaleSlack of it), updating the running sums and rescaling the
// accumulator's columns where the shift moved.
func (p *attnPlan) softmaxPanel(st []float32, cols int, w *attnWork, pn int, acc []float32, dvPad int) {
	negInf := float32(math.Inf(-1))
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	l := w.l[pn*attnNR : (pn+1)*attnNR]
	var mxa, shifta, suma, corra [maxLanes]float32
	mx, shift, sum, corr := mxa[:attnNR], shifta[:attnNR], suma[:attnNR], corra[:attnNR]
	copy(mx, m)
	colMax(st, cols, mx)
	rescale := false
	for c := range mx {
		corr[c] = 1
		if mx[c] == negInf {
			continue // every score so far is -inf: exp gives 0 with shift 0
		}
		if m[c] != negInf && !(mx[c] > m[c]+attnRescaleSlack) {
			shift[c], mx[c] = m[c], m[c] // keep the shift
			continue
		}
		shift[c] = mx[c]
		if m[c] != negInf {
			corr[c] = fastExp32(m[c] - mx[c])
			rescale = true
		}
	}
	expCols(st, cols, shift, sum)
	for c := range mx {
		l[c] = l[c]*float64(corr[c]) + float64(sum[c])
		m[c] = mx[c]
	}
	if !rescale {
		return
	}
	for r := 0; r < dvPad; r++ {
		row := acc[r*attnQBlock+pn*attnNR : r*attnQBlock+(pn+1)*attnNR]
		for c := range row {
			row[c] *= corr[c]
		}
	}
}

// colMax sets mx[c] = max(mx[c], st[key·NR+c]) over the keys (len(mx) =
// NR lanes).
func colMax(st []float32, keys int, mx []float32) {
	lanes := len(mx)
	if keys == 0 {
		return
	}
	_ = st[keys*lanes-1]
	switch {
	case lanes == 32 && kernel.AVX512:
		kernel.MaxCols32(&st[0], keys, &mx[0])
		return
	case lanes == 16 && kernel.Available:
		kernel.MaxCols16(&st[0], keys, &mx[0])
		return
	}
	for key := 0; key < keys; key++ {
		for c, v := range st[key*lanes : (key+1)*lanes] {
			if v > mx[c] {
				mx[c] = v
			}
		}
	}
}

// expCols replaces st[key·NR+c] by exp(st[key·NR+c] - shift[c]) and adds
// each column's sum to sum[c] (len(shift) = NR lanes).
func expCols(st []float32, keys int, shift, sum []float32) {
	lanes := len(shift)
	if keys == 0 {
		return
	}
	_ = st[keys*lanes-1]
	switch {
	case lanes == 32 && kernel.AVX512:
		kernel.ExpShiftSumCols32(&st[0], keys, &shift[0], &sum[0])
		return
	case lanes == 16 && kernel.Available:
		kernel.ExpShiftSumCols16(&st[0], keys, &shift[0], &sum[0])
		return
	}
	for key := 0; key < keys; key++ {
		row := st[key*lanes : (key+1)*lanes]
		for c, v := range row {
			e := fastExp32(v - shift[c])
			row[c] = e
			sum[c] += e
		}
	}
}
