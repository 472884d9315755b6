package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Relative positions decomposed over a grid of keys.
//
// SAM's and ViTDet's image encoders (segment_anything's
// add_decomposed_rel_pos, transformers' SamVisionAttention and
// VitDetAttention) add to the scores of an image's h × w patches a term by
// the key's row and one by its column:
//
//	attn = Reshape(attn, [B·H, qh, qw, kh, kw])
//	attn = attn + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
//	attn = Reshape(attn, [B·H, qh·qw, kh·kw])
//
// with rel_h [B·H, qh, qw, kh] and rel_w [B·H, qh, qw, kw] computed from Q
// on every call. The fused node takes the two as its bias by a key grid
// (FusedAttention's bias_grid = kw): [B·H, Sq, kh + kw], rel_h's terms
// then rel_w's for each query, joined by a Concat the fusion runs before
// it, so that the Sq×Sk sum is never made. gridBiasOf reads the Reshapes
// and the Adds between them; the added terms may come in either order and
// either operand of each Add, and must be one by grid row and one by grid
// column, each with every query's own terms. transformers' SamVisionAttention
// adds the two first and the sum, viewed as the scores, to them
// (gridSumOf): the same bias.

// gridBias is a bias by a key grid the walk met: rows ([batch..., A...,
// kh, 1]) and cols ([batch..., A..., 1, kw]) are the terms, A the query
// dims (their product Sq), seen by the fused node as [batch..., Sq, kh]
// and [batch..., Sq, kw] joined along the last axis.
type gridBias struct {
	rows, cols string
	batch      []int // the terms' batch dims
	sq, kh, kw int
}

// gridBiasName is the tensor the fused node reads a bias by the key grid of
// terms rows as.
func gridBiasName(rows string) string { return ops.AttentionTempPrefix + rows + "/grid_bias" }

// gridBiasOf reads n, a Reshape of the scores' last two dims [Sq, Sk] from
// [A..., kh, kw] (Sq = the product of A, Sk = kh·kw), as the end of a
// bias by a key grid: back from n through Adds of a term by grid row and
// one by grid column to the Reshape of the scores into [batch..., A...,
// kh, kw]. It returns the mask stage (post the scales applied after it),
// the Adds and the first Reshape (the steps it replaces, n's own not
// among them), and the scores tensor before them.
func (f *fuser) gridBiasOf(n *ir.Node, post float64) (maskStage, []int, string, bool) {
	out, grid, ok := f.gridView(n)
	if !ok {
		return maskStage{}, nil, "", false
	}
	gb := gridBias{sq: out[len(out)-2], kh: grid[len(grid)-2], kw: grid[len(grid)-1]}
	var steps []int
	x := n.Inputs[0]
	for {
		k, a, ok := f.internal(x)
		if !ok {
			return maskStage{}, nil, "", false
		}
		steps = append(steps, k)
		if a.OpType == "Reshape" && len(a.Inputs) == 2 && gb.rows != "" && gb.cols != "" {
			// The scores split into the grid: back to Sq, Sk as n makes them.
			if in, ok := f.concreteShape(a.Inputs[0]); !ok || !slices.Equal(in, out) {
				return maskStage{}, nil, "", false
			}
			return f.gridStage(&gb, post, a.Inputs[0]), steps, a.Inputs[0], true
		}
		if a.OpType != "Add" || len(a.Inputs) != 2 || !isDefaultDomain(a) {
			return maskStage{}, nil, "", false
		}
		matched := false
		for o := range 2 {
			if f.notWider(a, a.Inputs[1-o]) && f.gridTerm(a.Inputs[o], grid, len(out), &gb) {
				x, matched = a.Inputs[1-o], true
				break
			}
		}
		if !matched {
			return maskStage{}, nil, "", false
		}
	}
}

// gridSumOf reads t, a term added to the scores (tensor scores), as the
// sum of a term by the key's grid row and one by its column viewed as the
// scores: Reshape(Add(rows, cols)) from [batch..., A..., kh, kw]
// (transformers' SamVisionAttention: rel_h[..., None] + rel_w[..., None,
// :], reshape_as the scores). It returns the mask stage and the Reshape's
// and the Add's steps, which it replaces: the sum is never made.
func (f *fuser) gridSumOf(t, scores string, post float64) (maskStage, []int, bool) {
	rk, rn, ok := f.internal(t)
	if !ok {
		return maskStage{}, nil, false
	}
	out, grid, ok := f.gridView(rn)
	if s, _ := f.concreteShape(scores); !ok || !slices.Equal(s, out) {
		return maskStage{}, nil, false
	}
	ak, an, ok := f.internal(rn.Inputs[0])
	if !ok || an.OpType != "Add" || len(an.Inputs) != 2 || an.Inputs[0] == an.Inputs[1] {
		return maskStage{}, nil, false
	}
	gb := gridBias{sq: out[len(out)-2], kh: grid[len(grid)-2], kw: grid[len(grid)-1]}
	if !f.gridTerm(an.Inputs[0], grid, len(out), &gb) || !f.gridTerm(an.Inputs[1], grid, len(out), &gb) {
		return maskStage{}, nil, false
	}
	return f.gridStage(&gb, post, scores), []int{rk, ak}, true
}

// gridTerm reads tensor term as one of gb's two terms on the grid view
// grid of scores of rank r: [batch..., A..., kh, 1] (by grid row) or
// [batch..., A..., 1, kw] (by grid column), A as grid has it and batch
// broadcasting to grid's (and the same as the other term's). It records
// the term in gb.
func (f *fuser) gridTerm(term string, grid []int, r int, gb *gridBias) bool {
	shape, ok := f.concreteShape(term)
	g := len(grid)
	if !ok || !f.isFloat32(term) || len(shape) != g || !slices.Equal(shape[r-2:g-2], grid[r-2:g-2]) {
		return false
	}
	batch := shape[:r-2]
	if gb.batch != nil && !slices.Equal(batch, gb.batch) || !broadcastsTo(batch, grid[:r-2]) {
		return false
	}
	switch kh, kw := shape[g-2], shape[g-1]; {
	case gb.rows == "" && kh == gb.kh && kw == 1:
		gb.rows = term
	case gb.cols == "" && kh == 1 && kw == gb.kw:
		gb.cols = term
	default:
		return false
	}
	gb.batch = batch
	return true
}

// gridStage returns the additive mask stage of the bias by a key grid gb,
// both its terms found, applied to the scores at: the tensor its terms
// are joined into (gridBiasNodes), typed here.
func (f *fuser) gridStage(gb *gridBias, post float64, at string) maskStage {
	name := gridBiasName(gb.rows)
	f.types[name] = ops.Value{Type: ops.Known(ir.Float, append(slices.Clone(gb.batch), gb.sq, gb.kh+gb.kw))}
	return maskStage{name: name, kind: ops.MaskAdditive, post: post, at: at, grid: gb}
}

// gridView returns the output and input shapes of n when it is a Reshape
// of float32 scores [batch..., A..., kh, kw] into [batch..., Sq, Sk], Sq
// the product of A (one dim or more) and Sk = kh·kw: the scores seen as a
// grid of keys, viewed back.
func (f *fuser) gridView(n *ir.Node) (out, grid []int, ok bool) {
	if n.OpType != "Reshape" || len(n.Inputs) != 2 || !f.isFloat32(n.Inputs[0]) {
		return nil, nil, false
	}
	out, ok1 := f.concreteShape(n.Outputs[0])
	grid, ok2 := f.concreteShape(n.Inputs[0])
	r, g := len(out), len(grid)
	if !ok1 || !ok2 || r < 2 || g < r+1 || !slices.Equal(grid[:r-2], out[:r-2]) {
		return nil, nil, false
	}
	kh, kw := grid[g-2], grid[g-1]
	return out, grid, kw >= 1 && kh*kw == out[r-1] && ops.ShapeElems(grid[r-2:g-2]) == out[r-2]
}

// broadcastsTo reports whether dims, of the same rank as to, broadcast to
// it (each 1 or to's).
func broadcastsTo(dims, to []int) bool {
	for i, d := range dims {
		if d != 1 && d != to[i] {
			return false
		}
	}
	return len(dims) == len(to)
}

// gridBiasNodes adds to added the nodes making each bias by a key grid of
// match m: its two terms seen as [batch..., Sq, kh] and [batch..., Sq, kw]
// (Reshapes, views) and joined along the last axis (a Concat). ok is false
// when one has no schema.
func (f *fuser) gridBiasNodes(m attnMatch, added *addedNodes) bool {
	for _, st := range m.masks {
		gb := st.grid
		if gb == nil || f.madeOrAdded(st.name, added) {
			continue
		}
		reshape, err1 := ops.Lookup(ops.DomainONNX, "Reshape", regroupReshapeOpset)
		concat, err2 := ops.Lookup(ops.DomainONNX, "Concat", regroupReshapeOpset)
		if err1 != nil || err2 != nil {
			return false
		}
		var parts []string
		for _, t := range []struct {
			name, part string
			n          int
		}{{gb.rows, "/rows", gb.kh}, {gb.cols, "/cols", gb.kw}} {
			part := st.name + t.part
			added.add(false, f.reshapeNode(t.name, part, append(slices.Clone(gb.batch), gb.sq, t.n), "a term of the key grid's bias, a row a query"), reshape, regroupReshapeOpset)
			parts = append(parts, part)
		}
		added.add(false, &ir.Node{Name: st.name, OpType: "Concat", Inputs: parts, Outputs: []string{st.name},
			Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: -1}},
			Doc:   "the key grid's bias: each query's terms by grid row, then by grid column"}, concat, regroupReshapeOpset)
	}
	return true
}
