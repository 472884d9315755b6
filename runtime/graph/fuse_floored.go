package graph

import (
	"cmp"
	"math"

	"github.com/attnrun/attnrun/ops"
)

// Floored masks as the causal cut.
//
// transformers' OPT (4.30 and later: _prepare_decoder_attention_mask) adds
// one [B, 1, T, T] mask to the scores, the finfo.min causal mask A
// (_make_causal_mask) plus the padding P expanded to 0/finfo.min
// (_expand_mask), then raises the scores to finfo.min:
//
//	Max(Add(S, Add(A, P) | Add(P, A)), c)
//
// With every fill F (times the scales after it) at or below the floor c,
// and c ≤ -2^127 (finfo(float32).min), a score that A or P hides is
// s + F = F (|s| < 2^103, half an ulp of F) or F + F' = -inf, both raised
// to c; a kept score s is above c and stays. So every hidden score is the
// one value c: a row that keeps a key gives the hidden ones weight
// exactly 0 (c lies at least 2^127 below the row's max), and a row that
// sees no key (left padding: a prompt's first queries see only padding)
// has c on every key, uniform weights. That is the causal cut with P as a
// -inf key mask and masked_rows_uniform, as the finite fills of the Where
// forms give it (fuse_causal.go), and the floor is dropped. A alone
// (Max(Add(S, A), c)) is the cut, uniform where its offset is < 0.
//
// P is read as maskOperand reads an additive term: Where(Cast(X → bool),
// F', X) (the 0/F' padding of _expand_mask) or Where(B, F', 0) as the bool
// B. It may be computed after a broadcast (P is [B, 1, T, T], expanded
// from [B, 1, 1, T]): it is one value per key all the same, and the fused
// node reads it computed before the broadcast (fuse_narrow.go).

// splitFloored puts the causal part of a floored chain's one additive mask
// on the causal cut, when it is as above, dropping the floor, and returns
// the chain with the steps the split replaces; scores is the tensor of
// the chain's scores the mask applies to.
func (f *fuser) splitFloored(m *attnMatch, scores string, chain []int) []int {
	if !m.clamp || len(m.masks) != 1 {
		return chain
	}
	c, st := m.scoresMin, m.masks[0]
	if !(c <= causalFillLimit) || !finite32(c) {
		return chain
	}
	hides := func(fill float64) bool { return fill <= c } // s + fill is raised to c
	if st.kind != ops.MaskAdditive {
		// Where(A, F, S) floored: every hidden score is c, the fill
		// splitCausal reads as finfo.min's.
		if !hides(st.fill * st.post) {
			return chain
		}
		m.masks = []maskStage{st}
		m.masks[0].fill, m.masks[0].post = c, 1
		m.clamp, m.scoresMin = false, 0
		return f.splitCausal(m, scores, chain)
	}
	x := cmp.Or(st.at, scores)
	cut, steps, absorbs, ok := f.flooredCut(st, x, hides)
	if !ok {
		return chain
	}
	cut.fill, cut.post, cut.at = math.Inf(-1), 1, x
	m.masks, m.absorbs = []maskStage{cut}, absorbs
	m.clamp, m.scoresMin = false, 0
	return append(chain[:len(chain):len(chain)], steps...)
}

// flooredCut reads additive mask stage st of the scores x, floored where
// hides says a fill is raised to the floor, as the causal cut (A alone, or
// Add of A and a per-key P), or as the bool form of a mask the plan
// folded. It returns the stage that replaces it (but for its fill), the
// steps that computed the mask and the movement steps A is read through.
func (f *fuser) flooredCut(st maskStage, x string, hides func(float64) bool) (cut maskStage, steps, absorbs []int, ok bool) {
	links := f.passThrough(st.name, true)
	for _, l := range links {
		if off, fill, absorbs, ok := f.causalAddPattern(l.name, x); ok && hides(fill*st.post*l.factor) {
			return maskStage{causal: true, causalOff: off, uniformRows: off < 0}, l.steps, absorbs, true
		}
	}
	if n, linkSteps, ok := f.linkSource(links); ok && n.OpType == "Add" && len(n.Inputs) == 2 && f.isFloat32(n.Inputs[0]) && f.isFloat32(n.Inputs[1]) {
		post := st.post * links[len(links)-1].factor
		for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
			if !f.perKeyNarrowed(o[1], x) {
				continue
			}
			keys, more := f.maskOperand(o[1], x, post)
			if keys.kind == ops.MaskAdditive || !hides(keys.fill*keys.post) {
				continue
			}
			off, fill, absorbs, ok := f.causalAddPattern(o[0], x)
			if !ok || !hides(fill*post) {
				continue
			}
			cut = maskStage{name: keys.name, kind: keys.kind, causal: true, causalOff: off, uniformRows: true}
			return cut, append(linkSteps[:len(linkSteps):len(linkSteps)], more...), absorbs, true
		}
	}
	// A mask the plan folded (its padding keyed by value, or none):
	// hidden wherever nonzero, its causal part the cut when it has more.
	if name, ok := f.boolForm(st.name, x, "/bool_mask_floored", true, true, func(v float32) bool { return hides(float64(v) * st.post) }); ok {
		off, causal := f.cutOffs[name]
		return maskStage{name: name, kind: ops.MaskBoolTrueMasks, causal: causal, causalOff: off, uniformRows: true}, nil, nil, true
	}
	return maskStage{}, nil, nil, false
}

// perKeyNarrowed reports whether mask m broadcasts to the scores x and
// holds one value per key (perKeyMask), or is computed element-wise from
// broadcasts (Expand) of tensors that do: narrowMasks then gives the fused
// node that smaller form.
func (f *fuser) perKeyNarrowed(m, x string) bool {
	if f.perKeyMask(m, x) {
		return true
	}
	if !f.fitsScores(m, x) {
		return false
	}
	s, ok := f.narrowShape(m, map[string][]int{})
	return ok && (len(s) < 2 || s[len(s)-2] == 1)
}

// narrowShape is the shape tensor t would have computed before the
// broadcasts feeding it, as narrowed computes it: an Expand's input's, or
// the broadcast of the narrowed inputs of an element-wise step (narrowOps)
// that reads one. memo holds the shapes found so far.
func (f *fuser) narrowShape(t string, memo map[string][]int) ([]int, bool) {
	if s, ok := memo[t]; ok {
		return s, s != nil
	}
	memo[t] = nil // a cycle finds nothing
	s, ok := f.concreteShape(t)
	if x, isExpand := f.expandInput(t); isExpand {
		s, ok = f.concreteShape(x)
	} else if n, ok2 := f.producerNode(t); ok2 && narrowOps[n.OpType] && len(n.Outputs) == 1 {
		shapes := make([][]int, 0, len(n.Inputs))
		for _, in := range n.Inputs {
			if in == "" {
				continue
			}
			is, ok := f.concreteShape(in)
			if f.types[in].Const == nil {
				is, ok = f.narrowShape(in, memo)
			}
			if !ok {
				return nil, false
			}
			shapes = append(shapes, is)
		}
		b, err := ops.BroadcastShapes(shapes...)
		s, ok = b, err == nil
	}
	if ok {
		memo[t] = s
	}
	return s, ok
}
