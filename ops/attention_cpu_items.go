package ops

// FusedAttention on the CPU, the work (attention_cpu.go has the plan and
// the operand layouts): run packs what is not read in place and hands
// (batch matrix, query block) items to the workers; item streams the key
// blocks through the scores, the softmax (attention_cpu_softmax.go) and
// P·V, then writes its rows of the output.

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/parallel"
)

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
	p.hiddenSums, p.hiddenOnce = nil, nil
	if p.causal && !math.IsInf(float64(p.causalFill), -1) {
		if p.exactCut = p.scores != nil; !p.exactCut {
			p.hiddenMax = p.cutBounds()
		}
	}
	if p.uniformRows {
		p.vMean, p.vMeanOnce = make([]float32, len(p.vUniq)*p.dv), make([]sync.Once, len(p.vUniq))
	}
	if p.rowsPath() {
		p.runRows(ctx, threads)
		return
	}
	p.bf16 = ctx.bf16() && kernel.BF16 && tileLoop
	p.maskSpans = p.boolMaskSpans(ctx)
	if p.hiddenMax != nil && !p.bf16 && p.biasFloats == nil && (p.maskKind == "" || p.mRowStep == 0) {
		p.hiddenSums, p.hiddenOnce = make([][]hiddenSum, p.batches), make([]sync.Once, p.batches)
	}
	p.kInPlace = tileLoop && !p.bf16 && p.k.cs == 1
	p.vInPlace = tileLoop && !p.bf16 && p.v.cs == 1 && p.dv%attnMR == 0 && !p.vPacked()
	compactK := p.kInPlace && p.k.rs != p.d && p.sk >= attnKCompactFrom
	p.hidePerKeyFills()
	perKey := p.maskKind != "" && p.mRowStep == 0 && (p.maskFloats != nil || math.IsInf(float64(p.fill), -1))
	// A bias of one value per key (ALiBi's per-head slopes times the key
	// positions) joins a per-key mask in keyBias; with a -inf mask its
	// order against the bias does not matter where the bias has no +inf
	// or NaN.
	perKeyBias := p.biasFloats != nil && p.bRowStep == 0 && p.biasGrid == 0 && (p.maskKind == "" || perKey) && p.biasKeepsInf()
	// A bias by its diagonals (T5's position bias) takes the fast path
	// too: the kernel adds each key's row of terms (rowBias), after
	// the per-key mask, as the export adds them unless it adds the bias
	// first to an additive mask.
	// So does a bias by a key grid's rows and columns (SAM's relative
	// positions): each block's terms are made from the item's (gridTerms).
	compactBias := (p.biasDiag || p.biasGrid > 0) && (p.kInPlace || p.bf16) && (p.maskKind == "" || perKey) && p.biasKeepsInf() && !(p.biasFirst && p.maskFloats != nil)
	diagBias := compactBias && p.biasDiag
	p.scoresExp = (p.kInPlace || p.bf16) && p.softcap == 0 && !p.clamps() && p.scoresMode == "" && (p.biasFloats == nil || perKeyBias || compactBias) && (p.maskFloats == nil || perKey)
	p.scoresBase2 = p.scoresExp && p.maskFloats == nil && (p.biasFloats == nil || diagBias && p.compactBiasBounded())
	p.rowBias, p.rowBias2, p.rowBiasAt = nil, nil, nil
	if p.scoresExp && diagBias {
		p.fillRowBias()
	}
	var keyRows []keyBiasRow // the distinct rows of a per-key mask and bias on the fast path
	if p.scoresExp && (perKey || perKeyBias) {
		p.keyBiasIdx, keyRows = p.keyBiasRows(perKey, perKeyBias)
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
	kcLen := 0 // K's rows compacted (compactK)
	if compactK {
		kcLen = p.sk * p.d * len(p.kUniq)
	}
	packed := ctx.ScratchFloats(operands + kcLen + len(keyRows)*p.sk)
	kc := packed[operands : operands+kcLen]
	packed, p.keyBias = packed[:operands], nil
	if keyRows != nil {
		p.keyBias = packed[operands+kcLen : operands+kcLen+len(keyRows)*p.sk]
		p.fillKeyBias(keyRows)
	}
	kp, packed := packed[:kLen*len(p.kUniq)], packed[kLen*len(p.kUniq):]
	vp, qp := packed[:vLen*len(p.vUniq)], packed[vLen*len(p.vUniq):]
	qBlocks := (p.sq + attnQBlock - 1) / attnQBlock
	items := p.batches * qBlocks
	workers := max(1, min(threads, items))
	// fp32 packs Vᵀ a key block at a time, by the items that reach the
	// block first (vBlocks, packVBlock): no pass or barrier of its own,
	// blocks a causal cut skips are never packed, and a block is packed
	// just before its slivers are read.
	p.vBlocks = nil
	if !p.bf16 && !p.vInPlace {
		p.vBlocks = make([]attnVBlock, len(p.vUniq)*((p.sk+attnKBlock-1)/attnKBlock))
	}
	if p.bf16 {
		p.packBF16(workers, wordsOf(kp), wordsOf(vp), wordsOf(qp), kLen, vLen, qLen)
	}
	// fp32 packs only K's partial last sliver, or (compactK) copies K's
	// rows together, up front: in chunks of rows with the matrices inner,
	// so that heads interleaved in the rows of a fused projection are read
	// sequentially, a chunk at a time.
	const chunk = 96 // rows per task, a multiple of every MR
	kTasks := (p.sk + chunk - 1) / chunk
	if p.bf16 || (p.kInPlace && tail0 == p.sk && !compactK) {
		kTasks = 0 // packed above, or K read in place with no partial sliver
	}
	parallelFor(threads, kTasks, func(t int) {
		k0, k1 := t*chunk, min(p.sk, (t+1)*chunk)
		for i, off := range p.kUniq {
			switch {
			case !p.kInPlace:
				packAttnK(kp[i*kLen:(i+1)*kLen], p.k.data, off, p.k.rs, p.k.cs, p.sk, p.d, k0, k1)
			case k1 > tail0: // the partial last sliver, as a matrix of its own
				packAttnK(kp[i*kLen:(i+1)*kLen], p.k.data, off+tail0*p.k.rs, p.k.rs, p.k.cs, p.sk-tail0, p.d, 0, p.sk-tail0)
			}
			if compactK {
				gatherMatrix(kc[(i*p.sk+k0)*p.d:], p.k.data, off+k0*p.k.rs, p.k.rs, 1, k1-k0, p.d)
			}
		}
	})
	if compactK {
		p.readKFrom(kc)
	}
	per := p.workFloats(dvPad, qPerItem)
	scratch := ctx.ScratchFloats(workers * per)
	hg := headGroups{heads: p.heads, groups: workers, qBlocks: qBlocks, batches: p.batches}
	parallel.RunGroups(workers, workers, hg.items, func(wi int) func(g, i, next int) {
		w := p.newWork(dvPad, qPerItem, scratch[wi*per:(wi+1)*per])
		return func(g, i, next int) {
			b, i0 := itemAt(hg.item(g, i), qBlocks)
			if qPerItem && tileLoop && p.q.cs == 1 && next >= 0 {
				p.prefetchItemRows(itemAt(hg.item(g, next), qBlocks))
			}
			var qb []float32
			if qPerItem {
				p.packQ(w.qp, w.tail, p.qUniq[p.qIdx[b]], i0, min(p.sq, i0+attnQBlock))
				qb = w.qp
				if w.qp2 != nil {
					kernel.MulVS(&w.qp2[0], &w.qp[0], log2E32, len(w.qp))
				}
			} else {
				qb = qp[p.qIdx[b]*qLen+i0*dq : (p.qIdx[b]+1)*qLen]
			}
			p.item(b, i0, w, qb, kp[p.kIdx[b]*kLen:(p.kIdx[b]+1)*kLen], vp[p.vIdx[b]*vLen:(p.vIdx[b]+1)*vLen], dvPad, p.exactCut)
		}
	})
}

// itemAt returns item it's batch matrix and first query row, for
// qBlocks query blocks a matrix.
func itemAt(it, qBlocks int) (b, i0 int) {
	return it / qBlocks, (it % qBlocks) * attnQBlock
}

// prefetchItemRows asks for the query rows (Q read in place) and output
// rows of the item at batch matrix b, query row i0, into L2, for packQ to
// find them there and the item's last writes to hit, when the worker takes
// the item.
func (p *attnPlan) prefetchItemRows(b, i0 int) {
	rows := min(attnQBlock, p.sq-i0)
	if rows <= 0 || p.d == 0 {
		return
	}
	at := p.qUniq[p.qIdx[b]] + i0*p.q.rs
	_ = p.q.data[at+(rows-1)*p.q.rs+p.d-1]
	kernel.PrefetchRowsL2(&p.q.data[at], rows, p.q.rs, (p.d+15)/16)
	if o := p.o; o.cs == 1 && p.dv > 0 && len(o.data) > 0 {
		at := o.off[b] + i0*o.rs
		_ = o.data[at+(rows-1)*o.rs+p.dv-1]
		kernel.PrefetchRowsL2(&o.data[at], rows, o.rs, (p.dv+15)/16)
	}
}

// packBF16 packs K, Vᵀ and scaled Qᵀ (qScaleBF16) of every distinct
// matrix in bf16 pairs, distinct matrix i at i·kLen words of kw (i·vLen of
// vw, i·qLen of qw), a matrix a task, on workers workers (parallel.RunGroups): a
// matrix goes to the head group (headGroups) of the first batch matrix
// that reads it, whose worker then runs that head's items and, after a
// striped projection (blas.SgemmPackedStriped), wrote its rows.
func (p *attnPlan) packBF16(workers int, kw, vw, qw []uint32, kLen, vLen, qLen int) {
	type task struct {
		op, i int // operand (0 K, 1 V, 2 Q) and its distinct matrix
	}
	tasks := make([][]task, workers)
	for op, idx := range [][]int{p.kIdx, p.vIdx, p.qIdx} {
		seen := map[int]bool{}
		for b, i := range idx {
			if !seen[i] {
				seen[i] = true
				g := b % p.heads * workers / p.heads
				tasks[g] = append(tasks[g], task{op, i})
			}
		}
	}
	parallel.RunGroups(workers, workers, func(g int) int { return len(tasks[g]) }, func(int) func(g, i, next int) {
		return func(g, i, _ int) {
			switch t := tasks[g][i]; t.op {
			case 0:
				packAttnKBF16(kw[t.i*kLen:(t.i+1)*kLen], p.k.data, p.kUniq[t.i], p.k.rs, p.k.cs, p.sk, p.d, 0, p.sk)
			case 1:
				packAttnVBF16(vw[t.i*vLen:(t.i+1)*vLen], p.v.data, p.vUniq[t.i], p.v.rs, p.v.cs, p.sk, p.dv, 0, p.sk)
			default:
				packQBF16(qw[t.i*qLen:(t.i+1)*qLen], p.q.data, p.qUniq[t.i], p.q.rs, p.q.cs, p.sq, p.d, p.qScaleBF16(), 0, p.sq)
			}
		}
	})
}

// headGroups splits a run's items, (batch matrix b, query block), into
// groups of consecutive heads (b % heads): group g holds the heads h with
// h·groups/heads = g, of every batch element. Worker w of the run takes
// group w's items first, so that with a fused QKV projection in front,
// whose GEMM splits each of Q, K and V between its workers the same way
// (blas.SgemmPackedStriped, FusedMatMul's column_stripe), each worker reads
// the heads its own core has just written. Measured on seed 000's MHA at
// S=512, 2 threads, 2-core Zen 5 (2026-11-25 ~06:10 UTC, builds
// alternating, five rounds of attnrun profile): the attention step took
// 2.21-2.27 ms with both workers on the same head (one counter over all
// items) and 1.91-2.00 ms head-grouped; the projection the same; the op
// alone, its inputs not freshly written, the same.
type headGroups struct{ heads, groups, qBlocks, batches int }

// span returns group g's heads [h0, h1).
func (hg headGroups) span(g int) (h0, h1 int) {
	return (g*hg.heads + hg.groups - 1) / hg.groups, ((g+1)*hg.heads + hg.groups - 1) / hg.groups
}

// items returns how many items group g holds.
func (hg headGroups) items(g int) int {
	h0, h1 := hg.span(g)
	return hg.batches / hg.heads * (h1 - h0) * hg.qBlocks
}

// item returns group g's i-th item (b·qBlocks + query block): batch
// element by batch element, head by head, query block by query block.
func (hg headGroups) item(g, i int) int {
	h0, h1 := hg.span(g)
	per := (h1 - h0) * hg.qBlocks
	b := i/per*hg.heads + h0 + i%per/hg.qBlocks
	return b*hg.qBlocks + i%hg.qBlocks
}

// vPacked reports whether fp32 with the AVX-512 tile packs Vᵀ
// (kernel.PackSlivers8, by the items, a chunk of a key block at a time:
// packVBlock) rather than reading V's rows in place: from a full key
// block up, or two with causal masking, whose items read half the keys
// on average (P·V's gain halves, the pack's cost stays). P·V on V's rows
// in place, 2304 floats apart in a fused QKV output (a 4 KiB page per
// key, and only 4 L1 sets for a sliver's keys), runs at ~88% of peak
// against ~91% packed (kernel benchmark, S=2048). Seed 000's MHA, the
// fused attention in the model, packed against in place (alternating
// runs, median of per-round ratios, 2 threads): S=512 0.97×, S=2048
// 0.99×; causal S=512 1.00-1.03× (so in place), S=2048 0.96-0.99×.
func (p *attnPlan) vPacked() bool {
	if p.causal {
		return p.sk >= 2*attnKBlock
	}
	return p.sk >= attnKBlock
}

// attnKCompactFrom is the key count from which fp32 copies K's rows, when
// they lie apart (a fused QKV projection's output: 2304 floats, 9 KiB, a
// page per key), into contiguous rows before the items read them in place:
// at 2048 keys a head's K spans 2048 pages and, with its packed Vᵀ, more
// than a core's 1 MiB L2, and the scores kernel then waits on misses the
// prefetcher does not cover. Measured on seed 000's MHA (2-core Zen 5,
// 2026-11-24 about 16:05 UTC, builds alternating): the op at S=2048 (go test
// ./ops -bench Roofline/attention) 86–87% → 88% of peak on one thread
// (means 233–235 → 238 GFLOP/s), 85–86% → 87–89% on two; the model at
// S=2048 (attnrun bench, 4 pairs) 49.2–50.9 → 48.4–49.9 ms, 1.0–1.5 ms a
// pair; causal S=2048 about 1% faster, S=4096 0.6%. At S=512 no difference
// beyond the noise, so K stays in place there.
const attnKCompactFrom = 1024

// readKFrom makes the items read K from kc, where every distinct K matrix
// lies compacted (gatherMatrix), matrix i at i·sk·d.
func (p *attnPlan) readKFrom(kc []float32) {
	for b := range p.k.off {
		p.k.off[b] = p.kIdx[b] * p.sk * p.d
	}
	for i := range p.kUniq {
		p.kUniq[i] = i * p.sk * p.d
	}
	p.k.data, p.k.rs, p.k.cs = kc, p.d, 1
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
	if tileLoop && cs == 1 && dv%attnMR == 0 && k1 > k0 {
		_ = data[off+(k1-1)*rs+dv-1]
		_ = dst[(dv/attnMR-1)*attnMR*sk+k1*attnMR-1]
		kernel.PackSlivers8(&dst[k0*attnMR], &data[off+k0*rs], rs, k1-k0, dv/attnMR, attnMR*sk)
		return
	}
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

// attnVBlock is the packing of one key block of one V matrix's Vᵀ, in
// chunks of attnVChunk keys, in order: how many chunks workers have
// claimed, and a bit per chunk packed.
type attnVBlock struct {
	claimed atomic.Int32
	packed  atomic.Uint32
}

// attnVChunk is how many keys of a block a worker packs at a claim; a
// block has at most 32 chunks (attnVBlock.packed's bits).
const attnVChunk = 64

// packVBlock returns once the first keys keys of key block j0 of batch
// b's Vᵀ are packed in vp (its matrix's slivers): the workers that need
// chunks not yet claimed pack them (so that a causal item near the
// diagonal packs only the keys it reads), then wait for the ones others
// claimed (yielding: another worker is packing them).
func (p *attnPlan) packVBlock(b, j0, keys int, vp []float32) {
	i := p.vIdx[b]
	blk := &p.vBlocks[i*((p.sk+attnKBlock-1)/attnKBlock)+j0/attnKBlock]
	need := int32((keys + attnVChunk - 1) / attnVChunk)
	mask := uint32(1)<<need - 1
	if blk.packed.Load()&mask == mask {
		return
	}
	for c := blk.claimed.Load(); c < need; c = blk.claimed.Load() {
		if !blk.claimed.CompareAndSwap(c, c+1) {
			continue
		}
		k0 := j0 + int(c)*attnVChunk
		packAttnV(vp, p.v.data, p.vUniq[i], p.v.rs, p.v.cs, p.sk, p.dv, k0, min(p.sk, j0+attnKBlock, k0+attnVChunk))
		blk.packed.Or(1 << c)
	}
	for blk.packed.Load()&mask != mask {
		runtime.Gosched()
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
	qp2 []float32 // with scoresBase2: qp times log2 e, kernel.ScoresExp8x32Base2's panels
	// tail holds the last rows of a partial block of 16 query rows (Q's
	// as packQ reads them, the output's as item writes them), 16 rows of
	// tailWidth floats, so that the 16×16 transposes serve them too.
	tail []float32
	// segs holds, per panel, the current key block's moves of the running
	// shifts on the fast path (moveShifts), which P·V applies (contextKeys).
	segs [][]attnSegment
	// gridRC and gridPanel: with a bias by a key grid, the item's terms
	// and a key block's panel of them (attention_cpu_grid.go).
	gridRC, gridPanel []float32
}

// workFloats is the float32 scratch one worker needs.
func (p *attnPlan) workFloats(dvPad int, qPerItem bool) int {
	return attnQBlock*attnKBlock + dvPad*attnQBlock + attnQBlock + p.pairWords() + p.itemQFloats(qPerItem)*p.itemQCopies() + 16*p.tailWidth() + p.gridFloats()
}

// tailWidth is the row length of attnWork.tail: D and Dv where the 16×16
// transposes take them (multiples of 16, the AVX-512 tile), else 0.
func (p *attnPlan) tailWidth() int {
	w := 0
	if tileLoop && p.d%16 == 0 {
		w = p.d
	}
	if tileLoop && p.dv%16 == 0 {
		w = max(w, p.dv)
	}
	return w
}

// itemQCopies is how many copies of an item's Q panels a worker holds:
// two (qp and qp2) with scoresBase2 in fp32, else one.
func (p *attnPlan) itemQCopies() int {
	if p.scoresBase2 && !p.bf16 {
		return 2
	}
	return 1
}

// qScaleBF16 is the factor bf16 packs Q with: the scale, times log2 e with
// scoresBase2 (one packed Q serves the base-2 kernel and, converted back
// by lnTwoScores, the raw scores of the rest).
func (p *attnPlan) qScaleBF16() float32 {
	if p.scoresBase2 {
		return p.scale * log2E32
	}
	return p.scale
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
		st:   take(attnQBlock * attnKBlock),
		acc:  take(dvPad * attnQBlock),
		m:    take(attnQBlock),
		pwf:  take(p.pairWords()),
		qp:   take(p.itemQFloats(qPerItem)),
		l:    make([]float64, attnQBlock),
		cls:  make([]uint8, attnQBlock),
		segs: make([][]attnSegment, (attnQBlock+attnNR-1)/attnNR),
	}
	if p.itemQCopies() == 2 && qPerItem {
		w.qp2 = take(p.itemQFloats(qPerItem))
	}
	w.tail = take(16 * p.tailWidth())
	if p.biasGrid > 0 {
		w.gridRC = take(attnQBlock * (p.gridKH + p.biasGrid))
		w.gridPanel = take(attnKBlock * attnNR)
	}
	w.pw = wordsOf(w.pwf)
	return w
}

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
	if p.biasGrid > 0 {
		p.gridItem(w, b, i0, rows)
	}
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
	// Key blocks of kb keys, or a part of one (hiddenPrefixes): [j0, next).
	for j0, next := 0, 0; j0 < end; j0 = next {
		cols := min(kb-j0%kb, sk-j0)
		next = j0 + cols
		if exact && p.hiddenSums != nil && j0 >= i0+rows+p.causalOff {
			// Every row has these keys past its diagonal: their scores are
			// the fill (and a per-key mask), the same for each row.
			p.addHiddenBlock(w, acc, b, j0/kb, rows)
			continue
		}
		if p.maskKind != "" && !p.classify(w.cls[:rows], b, i0, j0, min(cols, max(0, p.maskKeys-j0))) && p.scores == nil &&
			(p.biasFloats == nil || p.biasFirst || p.biasKeepsInf()) && !p.clamps() {
			continue // every score of the block is masked with -inf (with scores_min it is scores_min)
		}
		if lo, hi, ok := p.hiddenPrefixes(w.cls[:rows], b, i0, j0, cols, exact); ok {
			// Each row hides a run of the block's first keys (a sliding
			// window's lower edge): the keys every row hides are skipped,
			// those some row hides run on the masked path, and the rest,
			// which every row sees, on the fast path next.
			next = j0 + hi
			if lo == hi {
				continue
			}
			j0, cols = j0+lo, hi-lo
			p.classify(w.cls[:rows], b, i0, j0, cols)
		}
		// keys[pn]: the block's keys panel pn's probabilities cover (the
		// fast path stops at the last key any of its queries sees).
		var keysa [attnQBlock]int // panels ≤ attnQBlock whatever attnNR
		keys := keysa[:panels]
		paired := false // st holds the probabilities as bf16 pairs (the bf16 fast path)
		for pn := range keys {
			w.segs[pn] = w.segs[pn][:0] // the block's shift moves (moveShifts)
		}
		if plain := p.masksPlain(w.cls[:rows]); p.scoresExp && !exact && (plain || p.keyBias != nil) {
			var bias []float32 // the per-key mask and bias, where they hide or change a score of the block
			if p.keyBias != nil && (!plain || p.biasFloats != nil && !p.biasDiag && p.biasGrid == 0) {
				bias = p.keyBias[p.keyBiasIdx[b]*sk+j0 : (p.keyBiasIdx[b]+1)*sk]
			}
			for pn := 0; pn < panels; pn++ {
				lanes := min(attnNR, rows-pn*attnNR)
				keys[pn] = p.scoresExpPanel(w, pn, b, i0+pn*attnNR, lanes, j0, min(cols, lim-j0), bias, kp, qp[pn*attnNR*dq:])
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
		if p.vBlocks != nil {
			p.packVBlock(b, j0-j0%kb, j0%kb+slices.Max(keys), vp)
		}
		for pn := 0; pn < panels; pn++ {
			// The block's shift moves (fast path): P·V up to each, then
			// the accumulator rescaled.
			k0 := 0
			for _, seg := range w.segs[pn] {
				p.contextKeys(w, acc, vp, pn, b, j0, k0, seg.keys, dvPad, paired)
				mulCols(acc[pn*attnNR:], dvPad, qb, seg.corr[:attnNR])
				k0 = seg.keys
			}
			p.contextKeys(w, acc, vp, pn, b, j0, k0, keys[pn], dvPad, paired)
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
	// out[r][c] = acc[c][r] / l[r] (with sinks, the share the sink leaves:
	// sinkScale); a row whose scores are all -inf is NaN, as Softmax gives
	// (-inf - -inf), or with a sink above -inf sinkOnlyValue, or with
	// zeroRows 0 (its column set, scaled by 1: it may hold NaN), or with
	// uniformRows the mean of V's rows (put in its accumulator column).
	hasSink, sink := p.sinkFloats != nil, float32(0)
	if hasSink {
		sink = p.sinkAt(b)
	}
	inv := w.m[:rows] // the running max is no longer needed: reuse it
	for r := range inv {
		switch {
		case inv[r] != negInf && hasSink:
			inv[r] = sinkScale(inv[r], w.l[r], sink)
		case inv[r] != negInf:
			inv[r] = float32(1 / w.l[r])
		case hasSink && !math.IsInf(float64(sink), -1):
			v := sinkOnlyValue(sink)
			for c := 0; c < p.dv; c++ {
				acc[c*qb+r] = v
			}
			inv[r] = 1
		case p.uniformRows:
			for c, x := range p.meanV(b) {
				acc[c*qb+r] = x
			}
			inv[r] = 1
		case p.zeroRows:
			for c := 0; c < p.dv; c++ {
				acc[c*qb+r] = 0
			}
			inv[r] = 1
		default:
			inv[r] = float32(math.NaN())
		}
	}
	o := p.o
	base := o.off[b] + i0*o.rs
	if tileLoop && o.cs == 1 && p.dv%16 == 0 {
		full := rows &^ 15
		for r := 0; r < full; r += 16 {
			for c := 0; c < p.dv; c += 16 {
				_ = o.data[base+(r+15)*o.rs+c+15]
				kernel.TransposeScale16(&o.data[base+r*o.rs+c], o.rs, &acc[c*qb+r], qb, &inv[r])
			}
		}
		if rem := rows - full; rem > 0 {
			// The last rows go through w.tail: the transposes write 16
			// (their scales read past rows into w.m, and those rows are
			// dropped).
			dv, scales := p.dv, w.m[full:full+16]
			for c := 0; c < dv; c += 16 {
				kernel.TransposeScale16(&w.tail[c], dv, &acc[c*qb+full], qb, &scales[0])
			}
			for r := range rem {
				at := base + (full+r)*o.rs
				copy(o.data[at:at+dv], w.tail[r*dv:(r+1)*dv])
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

// contextKeys adds P·V for keys [j0+k0, j0+k1) of the current block to panel
// pn's columns of the accumulator, from the panel's probabilities in w.st
// (in pairs, paired, with k0 even), Vᵀ packed in vp or V in place.
func (p *attnPlan) contextKeys(w *attnWork, acc, vp []float32, pn, b, j0, k0, k1, dvPad int, paired bool) {
	cols := k1 - k0
	if cols <= 0 {
		return
	}
	qb, kb, sk := attnQBlock, attnKBlock, p.sk
	st := w.st[pn*attnNR*kb:]
	bp := st[k0*attnNR : k1*attnNR]
	j := j0 + k0
	switch {
	case paired:
		contextPairsBF16(acc[pn*attnNR:], qb, wordsOf(st)[k0/2*attnNR:], wordsOf(vp), sk, dvPad, j, cols)
	case p.bf16:
		contextBF16(acc[pn*attnNR:], qb, bp, w.pw, wordsOf(vp), sk, dvPad, j, cols)
	case p.vInPlace: // Vᵀ's MR rows at a key step are MR consecutive floats of V's row
		kernel.Sgemm8x32Loop(cols, &p.v.data[p.v.off[b]+j*p.v.rs], &bp[0], &acc[pn*attnNR], p.v.rs, qb, dvPad/attnMR, attnMR, 0, attnMR*qb, true)
	case tileLoop:
		kernel.Sgemm8x32Loop(cols, &vp[j*attnMR], &bp[0], &acc[pn*attnNR], attnMR, qb, dvPad/attnMR, attnMR*sk, 0, attnMR*qb, true)
	default:
		for ds := 0; ds*attnMR < dvPad; ds++ {
			blas.MicroKernel(cols, vp[ds*attnMR*sk+j*attnMR:], bp, acc[ds*attnMR*qb+pn*attnNR:], qb, true)
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

// packQ packs scale·Q[i0:i1] (i0 a multiple of NR) of the Q matrix at
// q.data[off] into qp, the matrix's B-panels of NR queries over D,
// zero-padding the last panel; tail is attnWork.tail.
func (p *attnPlan) packQ(qp, tail []float32, off, i0, i1 int) {
	d, q, sc := p.d, p.q, p.scale
	for pn := i0 / attnNR; pn*attnNR < i1; pn++ {
		at := pn - i0/attnNR
		pan := qp[at*attnNR*d : (at+1)*attnNR*d]
		lanes := min(attnNR, p.sq-pn*attnNR)
		if tileLoop && q.cs == 1 && d%16 == 0 && d > 0 {
			// 16×16 blocks transposed in registers; a partial panel's (the
			// matrix's last rows) last rows are copied into tail first (16
			// rows, the others 0), and its lanes past them are 0.
			if lanes < attnNR {
				clear(pan)
			}
			var scales [16]float32
			for i := range scales {
				scales[i] = sc
			}
			full := lanes &^ 15
			for r := 0; r < full; r += 16 {
				for j := 0; j < d; j += 16 {
					_ = q.data[off+(pn*attnNR+r+15)*q.rs+j+15]
					kernel.TransposeScale16(&pan[j*attnNR+r], attnNR, &q.data[off+(pn*attnNR+r)*q.rs+j], q.rs, &scales[0])
				}
			}
			if rem := lanes - full; rem > 0 {
				rows := tail[:16*d]
				for r := range 16 {
					row := rows[r*d : (r+1)*d]
					if r >= rem {
						clear(row)
						continue
					}
					at := off + (pn*attnNR+full+r)*q.rs
					copy(row, q.data[at:at+d])
				}
				for j := 0; j < d; j += 16 {
					kernel.TransposeScale16(&pan[j*attnNR+full], attnNR, &rows[j], d, &scales[0])
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

// addHiddenBlock adds key block blk of batch matrix b, past the causal
// diagonal of every one of the item's rows, to their running softmax in
// closed form: each row's shift moves up to the block's largest score if
// that is higher (rescaling what it holds), then gains the block's sums
// (hiddenBlockSums) scaled to that shift.
func (p *attnPlan) addHiddenBlock(w *attnWork, acc []float32, b, blk, rows int) {
	p.hiddenOnce[b].Do(func() { p.hiddenSums[b] = p.hiddenBlockSums(b) })
	h := p.hiddenSums[b][blk]
	if math.IsInf(float64(h.max), -1) {
		return // every key masked with -inf or past the key limit
	}
	for r := 0; r < rows; r++ {
		m := w.m[r]
		shift := max(m, h.max)
		corr := 0.0 // nothing so far: the sums and accumulator hold 0
		if !math.IsInf(float64(m), -1) {
			corr = math.Exp(float64(m - shift))
		}
		f := math.Exp(float64(h.max - shift))
		w.l[r] = w.l[r]*corr + f*h.sum
		for c, x := range h.w {
			acc[c*attnQBlock+r] = float32(float64(acc[c*attnQBlock+r])*corr + f*x)
		}
		w.m[r] = shift
	}
}

// hiddenBlockSums computes batch matrix b's hiddenSum of every key block:
// the scores as the exact path makes them for a row that has the block's
// keys past its diagonal (the causal fill, then the mask of each key:
// replaced by the mask's fill, or its term added in float32; -inf past the
// key limit), their maximum, and the sums.
func (p *attnPlan) hiddenBlockSums(b int) []hiddenSum {
	kb := attnKBlock
	lim := p.sk
	if p.keyLim != nil {
		lim = p.keyLim[b]
	}
	negInf := float32(math.Inf(-1))
	out := make([]hiddenSum, (p.sk+kb-1)/kb)
	v := make([]float32, kb)
	for blk := range out {
		j0 := blk * kb
		cols := min(kb, p.sk-j0)
		h := hiddenSum{max: negInf, w: make([]float64, p.dv)}
		for key := range v[:cols] {
			j := j0 + key
			x := p.causalFill
			switch {
			case j >= lim:
				x = negInf
			case p.maskKind == "" || j >= p.maskKeys:
			case p.maskFloats != nil:
				x += p.maskFloats[p.mOff[b]+j*p.mColStep] * p.maskScale
			case p.maskBools[p.mOff[b]+j*p.mColStep] == p.maskedVal:
				x = p.fill
			}
			v[key] = x
			h.max = max(h.max, x)
		}
		if !math.IsInf(float64(h.max), -1) {
			acc := make([]float32, p.dv)
			for key, x := range v[:cols] {
				e := math.Exp(float64(x - h.max))
				if e == 0 {
					continue
				}
				h.sum += e
				row := p.v.off[b] + (j0+key)*p.v.rs
				if e32 := float32(e); p.v.cs == 1 {
					for c, y := range p.v.data[row : row+p.dv] {
						acc[c] += e32 * y
					}
				} else {
					for c := range acc {
						acc[c] += e32 * p.v.data[row+c*p.v.cs]
					}
				}
			}
			for c, x := range acc {
				h.w[c] = float64(x)
			}
		}
		out[blk] = h
	}
	return out
}
