package graph

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Gathers of a table's rows whose output is transposed to put the row's
// values first.
//
// T5's relative position bias is Transpose(Gather(table, buckets), perm)
// with table a learned [num_buckets, H] weight, buckets [S, S] and perm
// moving the H values of each (query, key) pair to the front: [H, S, S].
// Past 1024 tokens it runs on every call, and at S=2048 with 12 heads the
// Gather writes 200 MB and the Transpose reads and writes them again. The
// same values are Gather(tableᵀ, buckets, axis=1), one pass over the
// buckets writing [H, S, S] directly (the Gather kernel takes the buckets
// in blocks and writes each head's part of a block in turn).
// gatherTransposed runs at plan time, before the fusions (not with
// Options.NoFuse): the Transpose step becomes that Gather, reading the
// table transposed, a plan constant of num_buckets × H values made here,
// and the first Gather, which nothing reads any more, is dropped.
func (p *Program) gatherTransposed(pl *plan, types map[string]ops.Value) {
	f := newFuser(p, pl, types)
	changed := false
	for i := range pl.steps {
		st := &pl.steps[i]
		n := st.node
		if n.OpType != "Transpose" || !isDefaultDomain(n) || len(n.Inputs) != 1 || len(n.Outputs) != 1 {
			continue
		}
		_, g, ok := f.internal(n.Inputs[0])
		if !ok || g.OpType != "Gather" || len(g.Inputs) != 2 {
			continue
		}
		table := f.constValue(g.Inputs[0])
		axis, err1 := g.AttrInt("axis", 0)
		perm, ok2, err2 := n.AttrInts("perm")
		r := len(f.types[n.Inputs[0]].Type.Shape)
		if table == nil || table.Rank() != 2 || err1 != nil || axis != 0 || err2 != nil || !ok2 || !movesLastFirst(perm, r) {
			continue
		}
		gather, err1 := ops.Lookup("", "Gather", st.ctx.Opset)
		tt, err2 := f.transposed(table, st.ctx.Opset)
		if err1 != nil || err2 != nil {
			continue
		}
		name := g.Inputs[0] + "/transposed"
		types[name] = ops.Value{Type: ops.Known(tt.DType, tt.Shape), Const: tt}
		trial := &ir.Node{Name: n.Name, OpType: "Gather", Inputs: []string{name, g.Inputs[1]}, Outputs: n.Outputs,
			Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: 1}}}
		res, err := gather.Infer(trial, st.ctx.Opset, []ops.Value{types[name], types[g.Inputs[1]]})
		if err != nil || len(res) != 1 || !sameType(res[0].Type, types[n.Outputs[0]].Type) {
			delete(types, name)
			continue
		}
		st.node, st.schema = trial, gather
		st.args = []int{f.slotOf(name), f.slotOf(g.Inputs[1])}
		pl.consts[st.args[0]] = tt
		changed = true
	}
	if changed {
		p.dropDead(pl, nil) // the Gathers nothing reads any more
	}
}

// movesLastFirst reports whether perm, of rank r, moves the last axis to
// the front and keeps the others in order.
func movesLastFirst(perm []int64, r int) bool {
	if len(perm) != r || r < 2 || perm[0] != int64(r-1) {
		return false
	}
	for k := 1; k < r; k++ {
		if perm[k] != int64(k-1) {
			return false
		}
	}
	return true
}

// transposed returns the 2-D tensor t transposed, by the Transpose op.
func (f *fuser) transposed(t *ir.Tensor, opset int) (*ir.Tensor, error) {
	schema, err := ops.Lookup("", "Transpose", opset)
	if err != nil {
		return nil, err
	}
	n := &ir.Node{Name: "transposed", OpType: "Transpose", Inputs: []string{"t"}, Outputs: []string{"tt"},
		Attrs: []*ir.Attribute{{Name: "perm", Type: ir.AttrInts, Ints: []int64{1, 0}}}}
	res, err := runKernel(schema, &ops.Context{Opset: opset, Threads: 1}, n, []*ir.Tensor{t})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}
