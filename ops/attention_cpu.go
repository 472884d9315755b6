package ops

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/ops/internal/kernel"
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
// Kp then holds only a partial last sliver), and below a full key block
// (two with causal masking: vPacked) Vpᵀ's MR rows at a key are MR
// consecutive floats of V's row (lda = V's row stride, no Vp); from there
// on the items pack Vp themselves, the chunks of a key block they read
// first (packVBlock).
// scale·Qᵀ is packed with gathers. With Context.Precision bf16 the
// products run in bf16 instead (attention_bf16.go).
//
// Files: this one has the plan (planFusedAttention: shapes, views, batch
// broadcasting, masks and their attributes) and the op's entry points;
// attention_cpu_items.go the run and its work items; attention_cpu_softmax.go
// a key block's scores and streaming softmax; attention_cpu_masks.go the
// masks, the causal cut and its check.

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
	heads         int // the last batch dim (1 without batch dims): batch matrix b is head b % heads
	sq, d, sk, dv int
	// q: rows are queries, columns D; k: rows are keys, columns D; v: rows
	// are keys, columns Dv; o: rows are queries, columns Dv.
	q, k, v, o attnOperand
	// kIdx and vIdx give the packed matrix of each batch; kUniq and vUniq
	// the matrices to pack (offsets into k.data and v.data).
	qIdx, kIdx, vIdx    []int
	qUniq, kUniq, vUniq []int
	mOff                []int // element offset of each batch's mask matrix
	// sinkFloats holds input 6's logits (nil without sinks); sinkOff[b]
	// locates batch b's in it.
	sinkFloats []float32
	sinkOff    []int
	mRowStep   int // mask element steps along Sq and Sk (0 when broadcast)
	mColStep   int
	maskKeys   int // keys the mask covers (Sk unless mask_pad_keys)
	maskBools  []bool
	maskFloats []float32
	maskedVal  bool // the bool value that masks a score
	// maskSpans holds the keys each row of a bool mask shows, where its
	// rows lie one after another (boolMaskSpans; set by run).
	maskSpans []keySpan
	// The bias (input 5) as the mask: element offset of each batch's
	// matrix and element steps along Sq and Sk (0 when broadcast).
	bOff               []int
	bRowStep, bColStep int
	biasFloats         []float32
	// gridKH is the key grid's rows with bias_grid (biasGrid its columns):
	// query i's terms are kh by row, then kw by column (gridTerms).
	gridKH int
	// biasInf says whether adding the bias to -inf gives -inf (no +inf or
	// NaN in it), so that key blocks a -inf mask hides stay hidden after
	// it: worked out on the first block that asks (biasKeepsInf), as a
	// scan of the bias that runs without masks hiding blocks needs not.
	biasInf struct {
		once  sync.Once
		keeps bool
	}
	// diagBound caches compactBiasBounded.
	diagBound struct {
		once sync.Once
		ok   bool
	}
	// keyLim[b] is how many leading keys of batch b are not padding
	// (mask_pad_keys, kv_lengths); nil when every key takes part.
	keyLim []int
	// scores is output 1's data while running (nil when not requested).
	scores []float32
	// How the products get their operands in this run (set by run): bf16
	// packs K, Vᵀ and scale·Qᵀ in bf16 pairs (attention_bf16.go); else
	// with the AVX-512 tile, kInPlace reads K's rows from the input (only
	// a last partial sliver of MR keys is packed; from attnKCompactFrom
	// keys, rows that lie apart are first copied into contiguous ones) and
	// vInPlace V's rows.
	bf16, kInPlace, vInPlace bool
	// vBlocks (fp32, V not in place) tracks the packing of each distinct
	// V matrix's Vᵀ per key block, in chunks of attnVChunk keys packed on
	// first use (packVBlock).
	vBlocks []attnVBlock
	// scoresExp: with no softcap or scores output, and no bias but one of
	// one value per key, the scores and exponentials of key blocks no mask
	// touches (or only a per-key one; with the bias, keyBias) run in one
	// kernel (kernel.ScoresExp8x32: fp32, AVX-512, K
	// in place; kernel.ScoresExpBF16x32 in bf16: packed K, probabilities
	// stored as the P·V product's bf16 pairs), the causal cut and the key
	// limit handled around it: each tile is stored once, as probabilities.
	scoresExp bool
	// scoresBase2 (scoresExp with no additive mask: keyBias is 0 and -inf
	// only) runs kernel.ScoresExp8x32Base2 (kernel.ScoresExpBF16x32Base2
	// in bf16) instead, on scale·log2 e·Qᵀ (fp32: the item's attnWork.qp2;
	// bf16: the packed Q itself, whose raw scores elsewhere are taken back
	// to natural units, lnTwoScores): its exponential costs half (bf16:
	// three fifths) the FMA work. The running shifts stay in natural
	// units; scoresExpPanel converts them at the kernel. An additive mask's
	// large offsets (-1e4, float32's minimum) would round apart in the two
	// units, so it keeps the natural kernels.
	scoresBase2 bool
	// keyBias, when the mask or the bias is one value per key (broadcast
	// along the queries: key padding, ALiBi) and scoresExp, holds them as
	// what the kernel adds to each key's scores: 0 or -inf for a bool mask
	// with a -inf fill, mask_scale·mask for an additive one, plus
	// bias_scale·bias. Batch b's keys start at keyBias[keyBiasIdx[b]·sk].
	keyBias    []float32
	keyBiasIdx []int
	// rowBias, when a bias by its diagonals runs on the fast path
	// (scoresExp), holds each distinct bias matrix's diagonals times
	// bias_scale, followed by attnNR zeros (the lanes past Sq read them):
	// the term of query i and key j of batch b is at rowBiasAt[b] + i − j,
	// as bOff[b] locates it in biasFloats. rowBias2 is rowBias times
	// log2 e, with scoresBase2 (nil otherwise).
	rowBias, rowBias2 []float32
	rowBiasAt         []int
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
	// hiddenSums (with hiddenMax, set by run when the cut scores' values
	// do not depend on the query: a per-key mask or none, no bias, no
	// scores output, fp32) holds, per batch matrix and key block, the
	// softmax sums of the block's keys as every query row past their
	// causal diagonal sees them (hiddenBlockSums), computed on first use
	// (hiddenOnce): an item computed again exactly adds such blocks in
	// closed form instead of computing their scores.
	hiddenSums [][]hiddenSum
	hiddenOnce []sync.Once
}

// hiddenSum is one key block as every query row sees it from before the
// keys' causal diagonal: their scores v_j are the causal fill (plus a
// per-key mask term), the same for every row. max is the largest v_j (-inf
// when every key is masked or past the key limit), sum Σ exp(v_j - max)
// and w[c] Σ exp(v_j - max)·V[j][c] (accumulated in float32, as P·V is).
type hiddenSum struct {
	max float32
	sum float64
	w   []float64
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
	offs := make([]int, ShapeElems(batch))
	o := newOdometer(View{Offset: base, Shape: batch, Strides: full}, 0)
	for c := range offs {
		offs[c] = o.next()
	}
	return offs
}

// biasKeepsInf reports whether adding the bias to -inf gives -inf: no
// element of it is +inf or NaN. Safe for concurrent items.
func (p *attnPlan) biasKeepsInf() bool {
	p.biasInf.once.Do(func() {
		p.biasInf.keeps = true
		for _, x := range p.biasFloats {
			if x != x || math.IsInf(float64(x), 1) {
				p.biasInf.keeps = false
				return
			}
		}
	})
	return p.biasInf.keeps
}

// compactBiasBounded reports whether every term of a bias by its
// diagonals or by a key grid, times bias_scale, is finite and at most
// 2^100 in magnitude (2^99 for a grid's, whose terms add in pairs): whether
// it can go to base 2 (scoresBase2) without overflowing, and whether it
// leaves a finfo.min key mask's hidden scores far below every kept one
// (hidePerKeyFills).
func (p *attnPlan) compactBiasBounded() bool {
	if !p.biasDiag && p.biasGrid == 0 {
		return false
	}
	limit := 0x1p100
	if p.biasGrid > 0 {
		limit = 0x1p99
	}
	p.diagBound.once.Do(func() {
		p.diagBound.ok = true
		for _, x := range p.biasFloats {
			if t := math.Abs(float64(x * p.biasScale)); !(t <= limit) {
				p.diagBound.ok = false
				return
			}
		}
	})
	return p.diagBound.ok
}

// fillRowBias lays out rowBias (and rowBias2 with scoresBase2) for the
// fast path's kernel.
func (p *attnPlan) fillRowBias() {
	n := diagonals(p.sq, p.sk)
	idx, uniq := uniqueIndex(p.bOff)
	stride := n + attnNR
	p.rowBias = make([]float32, len(uniq)*stride)
	if p.scoresBase2 {
		p.rowBias2 = make([]float32, len(uniq)*stride)
	}
	for u, off := range uniq {
		src := p.biasFloats[off-(p.sk-1) : off-(p.sk-1)+n]
		dst := p.rowBias[u*stride : u*stride+n]
		for i, x := range src {
			dst[i] = x * p.biasScale
		}
		if p.rowBias2 != nil {
			for i, x := range dst {
				p.rowBias2[u*stride+i] = x * log2E32
			}
		}
	}
	p.rowBiasAt = make([]int, p.batches)
	for b, u := range idx {
		p.rowBiasAt[b] = u*stride + p.sk - 1
	}
}

// rowBiasIndex is where rowBias (and rowBias2) hold the term of query q
// and key j of batch b: the key's row of terms starts there, its queries'
// terms forward from q.
func (p *attnPlan) rowBiasIndex(b, q, j int) int { return p.rowBiasAt[b] + q - j }

// uniqueIndex maps offsets to indices of their distinct values.
func uniqueIndex(offs []int) (idx, uniq []int) {
	idx = make([]int, len(offs))
	if slices.IsSorted(offs) && !hasRepeat(offs) { // every matrix its own (no broadcast)
		for b := range idx {
			idx[b] = b
		}
		return idx, slices.Clone(offs)
	}
	return distinct(offs)
}

// distinct maps keys to indices of their distinct values, in order of
// first appearance.
func distinct[K comparable](keys []K) (idx []int, uniq []K) {
	idx = make([]int, len(keys))
	seen := map[K]int{}
	for b, key := range keys {
		k, ok := seen[key]
		if !ok {
			k = len(uniq)
			seen[key] = k
			uniq = append(uniq, key)
		}
		idx[b] = k
	}
	return idx, uniq
}

// hasRepeat reports whether sorted offs holds a value twice.
func hasRepeat(offs []int) bool {
	for i := 1; i < len(offs); i++ {
		if offs[i] == offs[i-1] {
			return true
		}
	}
	return false
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
	var sB []int // the sinks' batch dims
	hasSinks := len(in) > 6 && in[6] != nil
	if hasSinks {
		if _, err := sinksBatch(n, ir.TypeInfo{DType: in[6].DType, Shape: ir.ShapeOf(in[6].Shape), RankKnown: true}); err != nil {
			return nil, err
		}
		sB = in[6].Shape[:len(in[6].Shape)-2]
	}
	var mshape []int
	if hasMask {
		if in[3].DType != attnMaskDType(a.maskKind) {
			return nil, n.Errorf("mask has element type %v, mask_kind %q takes %v", in[3].DType, a.maskKind, attnMaskDType(a.maskKind))
		}
		mshape = in[3].Shape
	}
	var bB []int
	bsq, bsk, bDiag, gridKH, gridTerms := 1, 1, 0, 0, 0
	if hasBias {
		if in[5].DType != ir.Float {
			return nil, n.Errorf("bias has element type %v, FusedAttention takes float32", in[5].DType)
		}
		if a.biasDiag {
			bB, bDiag = splitBiasDiagonals(in[5].Shape, 1)
		} else {
			bB, bsq, bsk = splitBias(in[5].Shape, 1)
		}
		if a.biasGrid > 0 {
			gridTerms, bsk = bsk, 1 // checked below against the keys: kh + kw terms
		}
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
	if a.biasGrid > 0 {
		kh, err := gridRows(s.sk, a.biasGrid, gridTerms)
		if err != nil {
			return nil, n.Errorf("bias %v: %w", in[5].Shape, err)
		}
		gridKH = kh
	}
	if a.biasDiag && bDiag != diagonals(s.sq, s.sk) {
		return nil, n.Errorf("bias %v gives %d diagonals (bias_diagonals), the scores [%d %d] have %d", in[5].Shape, bDiag, s.sq, s.sk, diagonals(s.sq, s.sk))
	}
	batch, err := BroadcastShapes(s.qB, s.kB, s.vB, s.mB, bB, sB)
	if err != nil {
		return nil, n.Errorf("batch dims of Q %v, K %v, V %v, mask %v, bias and sinks do not broadcast", views[0].Shape, views[1].Shape, views[2].Shape, mshape)
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
	p.heads = 1
	if len(batch) > 0 && batch[len(batch)-1] > 0 {
		p.heads = batch[len(batch)-1]
	}
	if len(in) > 4 && in[4] != nil {
		if p.keyLim, err = kvLengths(in[4], batch, s.sk); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	mview := Contiguous(append(append([]int{}, s.mB...), s.msq, s.msk))
	bview := Contiguous(append(append([]int{}, bB...), bsq, bsk))
	if a.biasGrid > 0 {
		bview = Contiguous(append(append([]int{}, bB...), bsq, gridKH+a.biasGrid))
	}
	if a.biasDiag {
		bview = Contiguous(append(append([]int{}, bB...), bDiag))
	}
	sview := Contiguous(append(append([]int{}, sB...), 1, 1))
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
		if ok && len(sB) > 0 {
			sview, ok = splitHeadAxis(sview, len(sB)-1, a.kvGroup)
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
	switch {
	case a.biasDiag:
		// Element (i, j) at bOff[b] + i − j: each key's row of a
		// transposed scores panel reads its queries' terms forward.
		r := len(bview.Shape)
		p.bOff = batchElemOffsets(iter, bview.Shape[:r-1], bview.Strides[:r-1], s.sk-1)
		p.bRowStep, p.bColStep = 1, -1
		p.biasFloats = in[5].Float32s()
	case a.biasGrid > 0:
		// Query i's terms at bOff[b] + i·bRowStep: kh by grid row, then
		// kw by grid column (gridTerms).
		r := len(bview.Shape)
		p.bOff = batchElemOffsets(iter, bview.Shape[:r-2], bview.Strides[:r-2], 0)
		if bsq != 1 {
			p.bRowStep = gridKH + a.biasGrid
		}
		p.bColStep, p.gridKH = 1, gridKH
		p.biasFloats = in[5].Float32s()
	case hasBias:
		r := len(bview.Shape)
		p.bOff = batchElemOffsets(iter, bview.Shape[:r-2], bview.Strides[:r-2], 0)
		if bsq != 1 {
			p.bRowStep = bsk
		}
		if bsk != 1 {
			p.bColStep = 1
		}
		p.biasFloats = in[5].Float32s()
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
	if hasSinks {
		r := len(sview.Shape)
		p.sinkOff = batchElemOffsets(iter, sview.Shape[:r-2], sview.Strides[:r-2], 0)
		p.sinkFloats = in[6].Float32s()
	}
	p.foldGroupedQueries()
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
