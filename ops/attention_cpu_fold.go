package ops

import "math"

// One query a head, its KV head shared: the query heads as rows.
//
// A decode step of grouped-query attention (LLaMA's 32 query heads on 8
// KV heads, one new token after a KV cache) has Sq = 1: every batch
// matrix is one query row against Sk keys, and the kernel's panels of
// attnNR query lanes (32) ran one lane in each, 31 computed for nothing,
// for every head. The kv_group query heads that read one K and V are rows
// of one matrix instead: g lanes of a panel that reads K and V once.
//
// foldGroupedQueries regroups a plan so, where that is exact: one query,
// kv_group g > 1, no scores output (its layout is per head), no bias by
// its diagonals (indexed by the query), no sinks (one a query head), and
// within each group of g heads
// one K, one V, one mask and bias matrix and one key limit (a per-key
// mask, the same for every head), and Q's and the output's rows of the
// heads evenly spaced. A causal cut with one query hides the keys past
// its offset, the same for every head: it becomes a key limit (with a
// -inf causal fill; a finite one, checked per row, stays unfolded).
func (p *attnPlan) foldGroupedQueries() {
	g := p.kvGroup
	if p.sq != 1 || g <= 1 || p.scoresShape != nil || p.biasDiag || p.biasGrid > 0 || p.sinkFloats != nil || p.batches%g != 0 || p.heads%g != 0 ||
		p.causal && !math.IsInf(float64(p.causalFill), -1) || p.mRowStep != 0 || p.bRowStep != 0 {
		return
	}
	q, qStep, okQ := groupRows(p.q.off, g)
	o, oStep, okO := groupRows(p.o.off, g)
	k, okK := groupShared(p.k.off, g)
	v, okV := groupShared(p.v.off, g)
	m, okM := groupShared(p.mOff, g)
	b, okB := groupShared(p.bOff, g)
	lim, okL := groupShared(p.keyLim, g)
	if !okQ || !okO || oStep == 0 || !okK || !okV || !okM || !okB || !okL {
		return
	}
	p.q.off, p.q.rs, p.o.off, p.o.rs = q, qStep, o, oStep
	p.k.off, p.v.off, p.mOff, p.bOff, p.keyLim = k, v, m, b, lim
	p.sq, p.batches, p.heads = g, p.batches/g, p.heads/g
	p.qIdx, p.qUniq = uniqueIndex(p.q.off)
	p.kIdx, p.kUniq = uniqueIndex(p.k.off)
	p.vIdx, p.vUniq = uniqueIndex(p.v.off)
	if p.causal {
		if p.causalOff+1 < p.sk { // else it hides nothing
			p.limitKeys(max(p.causalOff+1, 0))
		}
		p.causal, p.causalOff = false, 0
	}
}

// groupRows returns the first of every g offsets, and the step between
// the offsets of a group, when every group's offsets are evenly spaced by
// the same step.
func groupRows(offs []int, g int) ([]int, int, bool) {
	if len(offs) < g {
		return nil, 0, false
	}
	step := offs[1] - offs[0]
	first := make([]int, 0, len(offs)/g)
	for b0 := 0; b0 < len(offs); b0 += g {
		for r := 1; r < g; r++ {
			if offs[b0+r] != offs[b0]+r*step {
				return nil, 0, false
			}
		}
		first = append(first, offs[b0])
	}
	return first, step, true
}

// groupShared returns the first of every g values of xs when each group's
// values are all the same (nil for nil: nothing to share).
func groupShared(xs []int, g int) ([]int, bool) {
	if xs == nil {
		return nil, true
	}
	first, step, ok := groupRows(xs, g)
	return first, ok && step == 0
}
