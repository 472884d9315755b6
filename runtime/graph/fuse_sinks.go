package graph

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Sinks: a logit a head joined to every row of the scores.
//
// gpt-oss (transformers' GptOssAttention, eager) gives each head a learned
// logit that takes part in every row's softmax and is dropped after it:
//
//	sinks = module.sinks.reshape(1, -1, 1, 1).expand(B, -1, Sq, -1)
//	combined = torch.cat([attn_weights, sinks], dim=-1)
//	combined = combined - combined.max(dim=-1, keepdim=True).values
//	probs = F.softmax(combined, dim=-1)
//	scores = probs[..., :-1]
//	attn_output = torch.matmul(scores, value_states)
//
// which exports as Concat(scores, Expand(Reshape(sinks))) on the last axis,
// the row maximum taken off (rowMaxShift), the Softmax, and a Slice that
// drops the last column before the product with V. FusedAttention takes
// the sink logits as its input 6 (one a batch matrix: the Expand that
// writes them out over the queries is looked through), so the fusion reads
// the chain so: the Slice on the way from the product to the Softmax
// (sinkSlice), the Concat first on the scores' side (sinksOperand), before
// any scale, mask or cap, which would otherwise apply to the sink too.

// sinkSlice reports whether n is a Slice that drops the last element of
// its input's last axis (isSinkSlice), with the plan's constants.
func (f *fuser) sinkSlice(n *ir.Node) bool {
	return isSinkSlice(n, f.types, f.constValue)
}

// isSinkSlice reports whether n is a Slice that drops the last element of
// its input's last axis (probs[..., :-1]): starts 0, ends -1 (or the
// axis's length minus one), axes the last axis, steps 1, all constants
// (value gives a constant's tensor, nil for none).
func isSinkSlice(n *ir.Node, types map[string]ops.Value, value func(string) *ir.Tensor) bool {
	if n.OpType != "Slice" || len(n.Inputs) < 3 || len(n.Outputs) != 1 || !isDefaultDomain(n) {
		return false
	}
	t := types[n.Inputs[0]].Type
	if !t.RankKnown || len(t.Shape) < 2 {
		return false
	}
	constant := func(name string) *ir.Tensor {
		if types[name].Const == nil {
			return nil
		}
		return value(name)
	}
	starts, ok1 := constInputInts(n, 1, constant)
	ends, ok2 := constInputInts(n, 2, constant)
	axes, ok3 := constInputInts(n, 3, constant)
	steps, ok4 := constInputInts(n, 4, constant)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(starts) != 1 || len(ends) != 1 || len(axes) != 1 || starts[0] != 0 {
		return false
	}
	last := len(t.Shape) - 1
	if a, err := ops.NormAxis(axes[0], len(t.Shape)); err != nil || a != last {
		return false
	}
	if steps != nil && (len(steps) != 1 || steps[0] != 1) {
		return false
	}
	d := t.Shape[last]
	return ends[0] == -1 || d.Known() && d.Value > 0 && ends[0] == d.Value-1
}

// sinksOperand reads n, met first on the scores' side of a chain whose
// weights lose their last column (sinkSlice), as Concat(scores, sinks) on
// the last axis: it returns the scores, the sink logits as FusedAttention
// takes them (rank ≥ 2, last two dims 1: an Expand over the queries looked
// through) and why not where it is not.
func (f *fuser) sinksOperand(n *ir.Node) (scores, sinks string, why string) {
	if n.OpType != "Concat" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return "", "", fmt.Sprintf("node %q (%s) before the softmax of weights whose last column is dropped: not a join of the scores and one sink column", n.Label(), n.OpType)
	}
	t := f.types[n.Outputs[0]].Type
	axis, err := n.AttrInt("axis", 0)
	if err != nil || !t.RankKnown {
		return "", "", fmt.Sprintf("node %q (Concat) has no axis or rank", n.Label())
	}
	if a, err := ops.NormAxis(axis, len(t.Shape)); err != nil || a != len(t.Shape)-1 {
		return "", "", fmt.Sprintf("node %q (Concat) joins on axis %d, not the keys' (the last)", n.Label(), axis)
	}
	scores, sinks = n.Inputs[0], n.Inputs[1]
	if !f.isFloat32(sinks) {
		return "", "", fmt.Sprintf("node %q (Concat): the sink logits %q are not float32", n.Label(), sinks)
	}
	if k, ok := f.producer[sinks]; ok {
		if e := f.pl.steps[k].node; e.OpType == "Expand" && isDefaultDomain(e) && len(e.Inputs) == 2 && matrixOnes(f.types[e.Inputs[0]].Type) {
			sinks = e.Inputs[0] // one logit a batch matrix, written out over the queries
		}
	}
	if !matrixOnes(f.types[sinks].Type) {
		var ok bool
		if sinks, ok = f.sinksPerMatrix(sinks); !ok {
			return "", "", fmt.Sprintf("node %q (Concat): the sink logits %q are not one a batch matrix (last two dims 1)", n.Label(), sinks)
		}
	}
	return scores, sinks, ""
}

// sinksPerMatrix returns, for plan constant c of shape [..., Sq, 1] whose
// rows are one value a batch matrix (the folded Expand of a parameter a
// head), that value a matrix as a constant of shape [..., 1, 1].
func (f *fuser) sinksPerMatrix(c string) (string, bool) {
	t := f.constValue(c)
	if t == nil || t.DType != ir.Float || len(t.Shape) < 2 || t.Shape[len(t.Shape)-1] != 1 {
		return c, false
	}
	name := ops.AttentionTempPrefix + c + "/per_matrix"
	if v, ok := f.types[name]; ok {
		return name, v.Const != nil
	}
	rows := t.Shape[len(t.Shape)-2]
	vals := t.Float32s()
	if rows == 0 {
		return c, false
	}
	out := make([]float32, len(vals)/rows)
	for b := range out {
		out[b] = vals[b*rows]
		for _, x := range vals[b*rows : (b+1)*rows] {
			if x != out[b] && !(x != x && out[b] != out[b]) { // NaN equals NaN here
				return c, false
			}
		}
	}
	shape := append(append([]int{}, t.Shape[:len(t.Shape)-2]...), 1, 1)
	f.types[name] = ops.Value{Type: ops.Known(ir.Float, shape), Const: ir.FromSlice(shape, out)}
	return name, true
}

// matrixOnes reports whether t has rank ≥ 2 and its last two dims are 1.
func matrixOnes(t ir.TypeInfo) bool {
	r := len(t.Shape)
	one := func(d ir.Dim) bool { return d.Known() && d.Value == 1 }
	return t.RankKnown && r >= 2 && one(t.Shape[r-2]) && one(t.Shape[r-1])
}
