package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Expands that broadcasting makes redundant.
//
// Exports often materialize a broadcast that the op reading it would do
// anyway. F.normalize(x) exports as
//
//	Div(x, Expand(Clip(ReduceL2(x, -1), eps), Shape(x)))
//
// (Swin V2's cosine attention, CLIP-style embeddings): the Expand writes
// the [.., 1] norm out at x's full shape, and the Div reads it back, where
// Div(x, norm) broadcasts to the same result. dropBroadcastExpands runs
// at plan time, before the fusions (not with Options.NoFuse): a step that
// reads an Expand's output and is an element-wise op (narrowOps) whose
// output keeps its concrete type with the Expand's input in its place
// reads that input instead, and the steps nothing reads any more (those
// Expands) are dropped. The values are the same bit for bit:
// an element-wise op reads each input element at the broadcast position,
// whether the broadcast was written out or not.
func (p *Program) dropBroadcastExpands(pl *plan, types map[string]ops.Value) {
	f := newFuser(p, pl, types)
	changed := false
	for i := range pl.steps {
		st := &pl.steps[i]
		n := st.node
		if !narrowOps[n.OpType] || !isDefaultDomain(n) || len(n.Outputs) != 1 {
			continue
		}
		for k, name := range n.Inputs {
			x, ok := f.expandInput(name)
			if !ok {
				continue
			}
			trial := cloneNode(st.node)
			trial.Inputs[k] = x
			in := make([]ops.Value, len(trial.Inputs))
			for j, t := range trial.Inputs {
				if t != "" {
					in[j] = types[t]
				}
			}
			res, err := st.schema.Infer(trial, st.ctx.Opset, in)
			if err != nil || len(res) != 1 || !sameType(res[0].Type, types[n.Outputs[0]].Type) {
				continue
			}
			st.node = trial
			st.args = slices.Clone(st.args)
			st.args[k] = f.slotOf(x)
			if c := types[x].Const; c != nil {
				pl.consts[st.args[k]] = c
			}
			changed = true
		}
	}
	if changed {
		p.dropDead(pl, nil) // the Expands nothing reads any more
	}
}

// expandInput returns the input of the Expand step computing tensor name.
func (f *fuser) expandInput(name string) (string, bool) {
	k, ok := f.producer[name]
	if !ok || name == "" {
		return "", false
	}
	n := f.pl.steps[k].node
	if n.OpType != "Expand" || !isDefaultDomain(n) || len(n.Inputs) != 2 || f.types[n.Inputs[0]].Type.DType == ir.Undefined {
		return "", false
	}
	return n.Inputs[0], true
}
