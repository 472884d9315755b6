package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// ScatterNDs that overwrite all of their data.
//
// PyTorch exports a slice assignment, x[..., :L] = y, as a ScatterND whose
// indices list every position of the slice: an int64 tensor of the data's
// rank times its element count, built from Ranges, Expands and a Concat on
// every call. transformers' _update_causal_mask (LLaMA, Mistral, Qwen2
// since 4.38) writes the padding into its [B, 1, S, S] causal mask that
// way, with L the whole length: at S=4096 the indices are 512 MiB, and
// building them and scattering by them took 0.6 s of a 0.93 s run. Where
// the indices depend on the shapes alone (evalShapeOnly) and list every
// position of data once, in row-major order, the ScatterND's result is its
// updates (so too where the indices are a plan constant, a short
// sequence's): dropFullScatters runs the step as an Identity of the updates,
// and the steps that built the indices, which nothing reads any more, are
// dropped. It runs at plan time, before the fusions (not with
// Options.NoFuse), and checks the evaluated indices element by element.
func (p *Program) dropFullScatters(pl *plan, types map[string]ops.Value) {
	f := newFuser(p, pl, types)
	changed := false
	for i := range pl.steps {
		st := &pl.steps[i]
		n := st.node
		if n.OpType != "ScatterND" || !isDefaultDomain(n) || len(n.Inputs) != 3 || len(n.Outputs) != 1 {
			continue
		}
		if red, _ := n.AttrString("reduction", "none"); red != "none" {
			continue
		}
		data, ok1 := f.concreteShape(n.Inputs[0])
		upd, ok2 := f.concreteShape(n.Inputs[2])
		ind, ok3 := f.concreteShape(n.Inputs[1])
		if !ok1 || !ok2 || !ok3 || !slices.Equal(data, upd) || len(ind) != len(data)+1 || ind[len(ind)-1] != len(data) ||
			!slices.Equal(ind[:len(data)], data) || types[n.Inputs[2]].Type.DType != types[n.Outputs[0]].Type.DType {
			continue
		}
		identity, err := ops.Lookup("", "Identity", st.ctx.Opset)
		if err != nil {
			continue
		}
		if !f.fullGrid(n.Inputs[1], data) {
			continue
		}
		st.node = &ir.Node{Name: n.Name, OpType: "Identity", Inputs: []string{n.Inputs[2]}, Outputs: n.Outputs}
		st.schema = identity
		st.args = []int{st.args[2]}
		changed = true
	}
	if changed {
		p.dropDead(pl, nil) // the steps that built the indices
	}
}

// fullGrid reports whether the int64 indices idx hold, at each position
// of dims, its own coordinates (rowMajorGrid). Indices that a Concat
// along their last axis builds from one column per dim (PyTorch's
// export of a slice assignment) are checked column by column, each
// evaluated and dropped in turn: at S=4096 the whole [1, 1, S, S, 4] is
// 512 MiB, and it and its four columns were live at once.
func (f *fuser) fullGrid(idx string, dims []int) bool {
	if k, ok := f.producer[idx]; ok && f.types[idx].Const == nil {
		n := f.pl.steps[k].node
		axis, err := n.AttrInt("axis", 0)
		r := len(dims)
		if n.OpType == "Concat" && isDefaultDomain(n) && err == nil && (axis == int64(r) || axis == -1) && len(n.Inputs) == r {
			for d, col := range n.Inputs {
				if shape, ok := f.concreteShape(col); !ok || !slices.Equal(shape, append(slices.Clone(dims), 1)) {
					return false
				}
				base, shape := f.broadcastBase(col, len(dims))
				c, bytes := f.constValue(base), int64(0)
				if c == nil {
					c, bytes = f.evalCone(base)
				}
				ok := c != nil && shape[d] == dims[d] && coordinateColumn(c, shape, d)
				f.prog.opts.Budget.Release(bytes)
				f.evals.dropped(bytes)
				if !ok {
					return false
				}
			}
			return true
		}
	}
	c, _ := f.constOrEvaluated(idx) // folded (small), or evaluated
	return c != nil && rowMajorGrid(c, dims)
}

// broadcastBase follows a column of indices (shape dims + [1], r = len(dims))
// back through the Unsqueeze or Reshape that appended its unit axis, the
// Expand that broadcast it and steps that pass it on unchanged, to the
// tensor it is a broadcast of, and returns that tensor with its shape
// aligned to dims (leading 1s added): PyTorch's slice assignment expands
// an arange per dim to the full index shape, so at S=16384 each column is
// 2 GiB of int64 while its arange is S elements.
func (f *fuser) broadcastBase(col string, r int) (string, []int) {
	cur := col
	for range maxViewChain {
		k, ok := f.producer[cur]
		if !ok || f.removed[k] {
			break
		}
		n := f.pl.steps[k].node
		in, ok1 := f.concreteShape(n.Inputs[0])
		out, ok2 := f.concreteShape(cur)
		if !ok1 || !ok2 || !isDefaultDomain(n) || f.types[n.Inputs[0]].Type.DType != f.types[cur].Type.DType {
			break
		}
		switch {
		case f.noOp(n):
		case (n.OpType == "Unsqueeze" || n.OpType == "Reshape") && slices.Equal(out, append(slices.Clone(in), 1)):
		case n.OpType == "Expand" && len(in) <= len(out):
		default:
			return f.alignedBase(cur, r)
		}
		cur = n.Inputs[0]
	}
	return f.alignedBase(cur, r)
}

// alignedBase returns name with its shape aligned to r dims: the trailing
// unit axis of a column dropped, leading 1s added (nil when it has more).
func (f *fuser) alignedBase(name string, r int) (string, []int) {
	shape, ok := f.concreteShape(name)
	if ok && len(shape) == r+1 && shape[r] == 1 {
		shape = shape[:r]
	}
	if !ok || len(shape) > r {
		return name, make([]int, r) // no column: shape[d] matches no dim
	}
	return name, append(slices.Repeat([]int{1}, r-len(shape)), shape...)
}

// coordinateColumn reports whether integer tensor col, of shape dims (a
// trailing unit axis aside), holds at each position its coordinate along
// dim d.
func coordinateColumn(col *ir.Tensor, dims []int, d int) bool {
	vals, err := col.AsInt64s()
	if err != nil || int64(len(vals)) != ir.NumElements(dims) {
		return false
	}
	inner, outer := 1, 1 // elements per step of dim d; steps of the dims before it
	for _, n := range dims[d+1:] {
		inner *= n
	}
	for _, n := range dims[:d] {
		outer *= n
	}
	at := 0
	for range outer {
		for c := range int64(dims[d]) {
			for _, v := range vals[at : at+inner] {
				if v != c {
					return false
				}
			}
			at += inner
		}
	}
	return true
}

// rowMajorGrid reports whether idx, an integer tensor of shape dims +
// [len(dims)], holds at each position its own coordinates: every element
// of a dims-shaped tensor once, in row-major order.
func rowMajorGrid(idx *ir.Tensor, dims []int) bool {
	vals, err := idx.AsInt64s()
	if err != nil || int64(len(vals)) != ir.NumElements(dims)*int64(len(dims)) {
		return false
	}
	r := len(dims)
	coord := make([]int64, r)
	for at := 0; at < len(vals); at += r {
		if !slices.Equal(vals[at:at+r], coord) {
			return false
		}
		for d := r - 1; d >= 0; d-- {
			if coord[d]++; coord[d] < int64(dims[d]) {
				break
			}
			coord[d] = 0
		}
	}
	return true
}
