package graph

import (
	"bytes"
	"math"
	"slices"
	"unsafe"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Causal masks as FusedAttention's causal cut.
//
// A chain's one bool mask with a -inf fill that is exactly a causal
// pattern — key j hidden from query i iff j > i + off, in every batch
// matrix — is the fused node's causal = 1, causal_offset = off, with no
// mask tensor: the kernel then never computes the keys past a query
// block's diagonal and runs the rest on its fast path, instead of
// classifying a mask block by block. The pattern must be a plan constant
// (a causal mask folded from the lengths: Trilu, a comparison of Ranges)
// or a view of one (the Slices of a registered causal buffer, which stay
// unfolded when the buffer is large); it is checked element by element
// once per plan.
//
// A mask that combines such a pattern A with a mask B that broadcasts
// along the queries (one value per key: key padding) is split the same
// way, the fused node taking B as its mask:
//
//	Where(Or(A, B), -inf, S)       A, B hide where true (Add on bool,
//	                               PyTorch's export of bool + bool, is Or)
//	Where(And(A, B), S, -inf)      A, B keep where true
//
// through no-op Casts; the Or (or And) and the Casts are then not
// computed, nor are the Slices of a buffer A is read through.
//
// Only a chain with no second mask is split: the fused node applies the
// causal cut after its bias, which matches the export only when nothing
// comes after the mask.

// causalSplit is a chain's bool mask read as a causal cut plus the rest.
type causalSplit struct {
	off  int    // key j is hidden from query i iff j > i + off
	mask string // the rest, broadcast along the queries ("" for none)
	// steps compute the mask from A and B (the Or or And and the Casts
	// around it): the fusion replaces them. absorbs are the movement
	// steps A is read through (Slices of a buffer): dead once the mask
	// is no longer computed.
	steps, absorbs []int
}

// splitCausal puts the causal part of the match's one mask stage on the
// causal cut, when it has one, and returns the chain with the steps the
// split replaces; scores is the tensor of the chain's scores (the product
// of Q and K).
func (f *fuser) splitCausal(m *attnMatch, scores string, chain []int) []int {
	if len(m.masks) != 1 {
		return chain
	}
	st := m.masks[0]
	if st.kind == ops.MaskAdditive || !math.IsInf(st.fill*st.post, -1) {
		return chain
	}
	cs, ok := f.causalMask(st.name, st.kind == ops.MaskBoolTrueMasks, scores)
	if !ok {
		return chain
	}
	st.name, st.causal, st.causalOff = cs.mask, true, cs.off
	m.masks = []maskStage{st}
	m.absorbs = cs.absorbs
	return append(chain[:len(chain):len(chain)], cs.steps...)
}

// causalMask reads bool mask cond (hiding a score where it equals hide)
// of the scores x as a causal pattern, or as Or(pattern, per-key mask)
// (And for keep masks) through no-op Casts.
func (f *fuser) causalMask(cond string, hide bool, x string) (causalSplit, bool) {
	xs, ok := f.concreteShape(x)
	if !ok || len(xs) < 2 {
		return causalSplit{}, false
	}
	if off, absorbs, ok := f.causalPattern(cond, hide, x); ok {
		return causalSplit{off: off, absorbs: absorbs}, true
	}
	combine := "And"
	if hide {
		combine = "Or"
	}
	var steps []int
	for cur := cond; len(steps) < maxViewChain; {
		k, n, ok := f.internal(cur)
		if !ok {
			return causalSplit{}, false
		}
		steps = append(steps, k)
		if f.noOp(n) {
			cur = n.Inputs[0]
			continue
		}
		if (n.OpType != combine && (n.OpType != "Add" || !hide)) || len(n.Inputs) != 2 || len(n.Outputs) != 1 ||
			f.types[n.Inputs[0]].Type.DType != ir.Bool || f.types[n.Inputs[1]].Type.DType != ir.Bool {
			return causalSplit{}, false
		}
		for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
			if !f.perKeyMask(o[1], x) {
				continue
			}
			if off, absorbs, ok := f.causalPattern(o[0], hide, x); ok {
				return causalSplit{off: off, mask: o[1], steps: steps, absorbs: absorbs}, true
			}
		}
		return causalSplit{}, false
	}
	return causalSplit{}, false
}

// perKeyMask reports whether mask m broadcasts to the scores x along the
// queries (its dim -2, if any, is 1) without widening them.
func (f *fuser) perKeyMask(m string, x string) bool {
	ms, ok := f.concreteShape(m)
	return ok && (len(ms) < 2 || ms[len(ms)-2] == 1) && f.fitsScores(m, x)
}

// causalPattern reports whether bool tensor name, a plan constant or a
// view of one through movement steps (absorbs), is exactly a causal
// pattern over the scores x: its last two dims are x's [Sq, Sk] and in
// every matrix key j is hidden (equals hide) from query i iff j > i + off.
func (f *fuser) causalPattern(name string, hide bool, x string) (off int, absorbs []int, ok bool) {
	if !f.fitsScores(name, x) {
		return 0, nil, false
	}
	var data []bool
	var v ops.View
	if c := f.types[name].Const; c != nil {
		if c.DType != ir.Bool {
			return 0, nil, false
		}
		data, v = c.Bools(), ops.Contiguous(c.Shape)
	} else {
		base, bv, chain, ok := f.readView(name)
		c := f.types[base].Const
		if !ok || len(chain) == 0 || c == nil || c.DType != ir.Bool {
			return 0, nil, false
		}
		data, v, absorbs = c.Bools(), bv, chain
	}
	xs, _ := f.concreteShape(x)
	r := len(v.Shape)
	if r < 2 || v.Shape[r-2] != xs[len(xs)-2] || v.Shape[r-1] != xs[len(xs)-1] {
		return 0, nil, false
	}
	off, ok = causalOffset(data, v, hide)
	return off, absorbs, ok
}

// causalOffset returns off when, in every matrix of the view v of data,
// element (i, j) equals hide iff j > i + off. The offset comes from the
// first row that hides some but not all keys; a view with no such row is
// no causal pattern.
func causalOffset(data []bool, v ops.View, hide bool) (int, bool) {
	r := len(v.Shape)
	sq, sk := v.Shape[r-2], v.Shape[r-1]
	rs, cs := v.Strides[r-2], v.Strides[r-1]
	batch := v.Shape[:r-2]
	if sq == 0 || sk == 0 || slices.Contains(batch, 0) {
		return 0, false
	}
	off, found := 0, false
	for i := 0; i < sq && !found; i++ {
		vis := 0
		for vis < sk && data[v.Offset+i*rs+vis*cs] != hide {
			vis++
		}
		if vis > 0 && vis < sk {
			off, found = vis-1-i, true
		}
	}
	if !found {
		return 0, false
	}
	// Row i is tmpl[sk-vis : 2·sk-vis] with vis = i + off + 1 keys
	// visible (clamped to [0, sk]): compared as bytes where the row is
	// contiguous.
	tmpl := make([]bool, 2*sk)
	for k := range tmpl {
		tmpl[k] = (k >= sk) == hide
	}
	tb := boolBytes(tmpl)
	idx := make([]int, len(batch))
	for {
		base := v.Offset
		for d, k := range idx {
			base += k * v.Strides[d]
		}
		for i := 0; i < sq; i++ {
			row, vis := base+i*rs, min(max(i+off+1, 0), sk)
			want := tb[sk-vis : 2*sk-vis]
			if cs == 1 {
				if !bytes.Equal(boolBytes(data[row:row+sk]), want) {
					return 0, false
				}
				continue
			}
			for j := 0; j < sk; j++ {
				if boolByte(data[row+j*cs]) != want[j] {
					return 0, false
				}
			}
		}
		d := len(idx) - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < batch[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return off, true
		}
	}
}

// boolBytes views bools as their bytes (0 or 1).
func boolBytes(b []bool) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
}

// boolByte is a bool's byte (0 or 1).
func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
