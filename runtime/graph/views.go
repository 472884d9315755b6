package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// View resolution for plan-time rewrites.
//
// A chain of data-movement steps (Reshape, Squeeze, Unsqueeze, Flatten,
// Identity, Transpose, Split, Slice with unit steps, Gather of one constant
// index) computes nothing: its
// result is a strided view (ops.View) of the tensor the chain starts from.
// Fused kernels that take views read through the chain instead of running
// it, and write their result through the inverse of the chain that follows
// them (the head merge Transpose+Reshape after attention). The steps read
// through become dead and are dropped (deadSteps); the steps written
// through are replaced by the fused step.

// maxViewChain bounds how many movement steps a view is traced through.
const maxViewChain = 16

// concreteShape returns a tensor's concrete shape in the plan.
func (f *fuser) concreteShape(name string) ([]int, bool) {
	t := f.types[name].Type
	if !t.RankKnown {
		return nil, false
	}
	return t.Shape.Concrete()
}

// reshapeLike reports whether op only reinterprets its first input's
// elements in a new shape (the output's concrete shape).
func reshapeLike(n *ir.Node) bool {
	switch n.OpType {
	case "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity":
		return isDefaultDomain(n)
	}
	return false
}

// viewStep applies the movement step producing out (output k of node n)
// to v, the view of n's first input.
func (f *fuser) viewStep(n *ir.Node, k int, v ops.View) (ops.View, bool) {
	out := n.Outputs[k]
	shape, ok := f.concreteShape(out)
	if !ok || !isDefaultDomain(n) {
		return ops.View{}, false
	}
	switch {
	case reshapeLike(n):
		return v.Reshape(shape)
	case n.OpType == "Transpose":
		perm, ok := transposePerm(n, len(v.Shape))
		if !ok {
			return ops.View{}, false
		}
		return v.Transpose(perm)
	case n.OpType == "Split":
		return f.splitView(n, k, v)
	case n.OpType == "Slice":
		return f.sliceView(n, v, shape)
	case n.OpType == "Gather":
		return f.gatherView(n, v, shape)
	}
	return ops.View{}, false
}

// transposePerm reads a Transpose's perm (default: reversed axes).
func transposePerm(n *ir.Node, rank int) ([]int, bool) {
	p, ok, err := n.AttrInts("perm")
	if err != nil {
		return nil, false
	}
	perm := make([]int, rank)
	if !ok {
		for i := range perm {
			perm[i] = rank - 1 - i
		}
		return perm, true
	}
	if len(p) != rank {
		return nil, false
	}
	for i, x := range p {
		perm[i] = int(x)
	}
	return perm, true
}

// splitView is output k of a Split: the input restricted along the split
// axis to the outputs' concrete extents.
func (f *fuser) splitView(n *ir.Node, k int, v ops.View) (ops.View, bool) {
	axis, err := n.AttrInt("axis", 0)
	if err != nil {
		return ops.View{}, false
	}
	a, err := ops.NormAxis(axis, len(v.Shape))
	if err != nil {
		return ops.View{}, false
	}
	start := 0
	for i := 0; i < k; i++ {
		if n.Outputs[i] == "" {
			return ops.View{}, false
		}
		s, ok := f.concreteShape(n.Outputs[i])
		if !ok || len(s) != len(v.Shape) {
			return ops.View{}, false
		}
		start += s[a]
	}
	s, ok := f.concreteShape(n.Outputs[k])
	if !ok || len(s) != len(v.Shape) {
		return ops.View{}, false
	}
	return v.Slice(a, start, s[a])
}

// sliceView is a Slice with constant starts, axes and unit steps: the
// input restricted along each axis. Every other dim must keep its size.
func (f *fuser) sliceView(n *ir.Node, v ops.View, shape []int) (ops.View, bool) {
	if len(n.Inputs) < 3 || len(shape) != len(v.Shape) {
		return ops.View{}, false
	}
	starts, ok1 := constInputInts(n, 1, f.constValue)
	axes, ok3 := constInputInts(n, 3, f.constValue)
	steps, ok4 := constInputInts(n, 4, f.constValue)
	if !ok1 || !ok3 || !ok4 || starts == nil {
		return ops.View{}, false
	}
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if len(axes) != len(starts) || (steps != nil && len(steps) != len(starts)) {
		return ops.View{}, false
	}
	out := v
	sliced := make([]bool, len(shape))
	for i, ax := range axes {
		a, err := ops.NormAxis(ax, len(shape))
		if err != nil || sliced[a] || (steps != nil && steps[i] != 1) {
			return ops.View{}, false
		}
		sliced[a] = true
		st, dim := starts[i], int64(v.Shape[a])
		if st < 0 {
			st += dim
		}
		st = min(max(st, 0), dim)
		var ok bool
		if out, ok = out.Slice(a, int(st), shape[a]); !ok {
			return ops.View{}, false
		}
	}
	for a, d := range shape {
		if !sliced[a] && d != v.Shape[a] {
			return ops.View{}, false
		}
	}
	return out, true
}

// gatherView is a Gather of one constant index: a scalar index drops the
// axis (timm's q, k, v = qkv[0], qkv[1], qkv[2]), a one-element 1-D index
// keeps it with size 1 (Falcon's fused[:, :, [-2]]). Either way the result
// is the input restricted to that index along the axis.
func (f *fuser) gatherView(n *ir.Node, v ops.View, shape []int) (ops.View, bool) {
	if len(n.Inputs) != 2 || n.Inputs[1] == "" {
		return ops.View{}, false
	}
	c := f.constValue(n.Inputs[1])
	if c == nil || len(c.Shape) > 1 || c.Len() != 1 {
		return ops.View{}, false
	}
	idx, err := c.AsInt64s()
	axis, err2 := n.AttrInt("axis", 0)
	if err != nil || err2 != nil {
		return ops.View{}, false
	}
	a, err := ops.NormAxis(axis, len(v.Shape))
	if err != nil {
		return ops.View{}, false
	}
	i, dim := idx[0], int64(v.Shape[a])
	if i < 0 {
		i += dim
	}
	if i < 0 || i >= dim {
		return ops.View{}, false
	}
	out, ok := v.Slice(a, int(i), 1)
	if ok && len(c.Shape) == 0 {
		out, ok = out.Squeeze([]int{a})
	}
	if !ok || !slices.Equal(out.Shape, shape) {
		return ops.View{}, false
	}
	return out, true
}

// readView traces tensor name back through movement steps and returns the
// deepest tensor it is a view of, with the view; the movement steps traced
// through are listed in chain. With no movement producer, base is name.
func (f *fuser) readView(name string) (base string, v ops.View, chain []int, ok bool) {
	type link struct {
		step int
		out  int
	}
	var links []link // from name back
	x := name
	for len(links) < maxViewChain {
		i, ok := f.producer[x]
		if !ok || f.removed[i] || f.types[x].Const != nil {
			break
		}
		n := f.pl.steps[i].node
		if !reshapeLike(n) && n.OpType != "Transpose" && n.OpType != "Split" && n.OpType != "Slice" && n.OpType != "Gather" {
			break
		}
		if len(n.Inputs) == 0 || n.Inputs[0] == "" || f.types[n.Inputs[0]].Type.DType != f.types[x].Type.DType {
			break
		}
		k := 0
		for j, o := range n.Outputs {
			if o == x {
				k = j
			}
		}
		links = append(links, link{i, k})
		x = n.Inputs[0]
	}
	// Try the deepest base first; a step whose view is not expressible
	// (a Reshape merging non-contiguous dims) makes a shallower base.
	for depth := len(links); depth > 0; depth-- {
		b := name
		if depth > 0 {
			b = f.pl.steps[links[depth-1].step].node.Inputs[0]
		}
		shape, ok := f.concreteShape(b)
		if !ok {
			continue
		}
		cur, good := ops.Contiguous(shape), true
		for j := depth - 1; j >= 0 && good; j-- {
			l := links[j]
			cur, good = f.viewStep(f.pl.steps[l.step].node, l.out, cur)
		}
		if !good {
			continue
		}
		chain = make([]int, depth)
		for j := 0; j < depth; j++ {
			chain[j] = links[j].step
		}
		return b, cur, chain, true
	}
	return name, ops.View{}, nil, false
}

// readInputThrough makes the fused node read its input k through the
// movement steps that produce it: the input becomes the tensor they start
// from, and the int attribute attr the view of it (ops.View.Ints). It
// returns the new node and the steps read through, or fused unchanged and
// none where there are no such steps, accept refuses the view, or the
// node's type inference would no longer give out its type.
func (f *fuser) readInputThrough(schema *ops.Schema, fused *ir.Node, k int, attr, out string, accept func(ops.View) bool) (*ir.Node, []int) {
	base, v, chain, ok := f.readView(fused.Inputs[k])
	if !ok || len(chain) == 0 || !accept(v) {
		return fused, nil
	}
	trial := cloneNode(fused)
	trial.Inputs[k] = base
	trial.Attrs = append(trial.Attrs, &ir.Attribute{Name: attr, Type: ir.AttrInts, Ints: v.Ints()})
	if !f.inferMatches(schema, trial, out) {
		return fused, nil
	}
	return trial, chain
}

// writeView follows tensor name forward through movement steps that are
// its only consumer and returns the last tensor reached (final), the view
// of name's elements inside final, and the steps passed.
func (f *fuser) writeView(name string) (final string, v ops.View, chain []int, ok bool) {
	var path []int
	var outs []string
	x := name
	for len(path) < maxViewChain {
		i, ok := f.consumer(x)
		if !ok {
			break
		}
		n := f.pl.steps[i].node
		if (!reshapeLike(n) && n.OpType != "Transpose") || len(n.Outputs) != 1 || n.Outputs[0] == "" || len(n.Inputs) == 0 || n.Inputs[0] != x {
			break
		}
		path = append(path, i)
		outs = append(outs, n.Outputs[0])
		x = n.Outputs[0]
	}
	for depth := len(path); depth > 0; depth-- {
		fin := outs[depth-1]
		shape, ok := f.concreteShape(fin)
		if !ok {
			continue
		}
		cur, good := ops.Contiguous(shape), true
		for j := depth - 1; j >= 0 && good; j-- {
			n := f.pl.steps[path[j]].node
			in := name
			if j > 0 {
				in = outs[j-1]
			}
			inShape, ok := f.concreteShape(in)
			if !ok {
				good = false
				break
			}
			if n.OpType == "Transpose" {
				perm, ok := transposePerm(n, len(inShape))
				if !ok {
					good = false
					break
				}
				inv := make([]int, len(perm))
				for a, p := range perm {
					if p < 0 || p >= len(perm) {
						good = false
						break
					}
					inv[p] = a
				}
				if good {
					cur, good = cur.Transpose(inv)
				}
				continue
			}
			cur, good = cur.Reshape(inShape)
		}
		if !good {
			continue
		}
		return fin, cur, append([]int{}, path[:depth]...), true
	}
	return name, ops.View{}, nil, false
}

// consumer returns the only step reading tensor name, when name is not a
// graph output and exactly one live step reads it (once).
func (f *fuser) consumer(name string) (int, bool) {
	if f.uses[name] != 1 {
		return 0, false
	}
	for i, st := range f.pl.steps {
		if f.removed[i] {
			continue
		}
		for _, in := range st.node.Inputs {
			if in == name {
				return i, true
			}
		}
	}
	return 0, false
}

// deadSteps drops steps none of whose outputs is read by a later step or
// is a graph output, repeatedly (movement steps a fused kernel now reads
// through). It returns the dropped nodes.
func deadSteps(pl *plan, graphOutputs map[string]bool) []*ir.Node {
	uses := map[string]int{}
	for _, st := range pl.steps {
		for _, in := range st.node.Inputs {
			if in != "" {
				uses[in]++
			}
		}
	}
	dead := make([]bool, len(pl.steps))
	var dropped []*ir.Node
	for i := len(pl.steps) - 1; i >= 0; i-- {
		st := pl.steps[i]
		live := false
		for _, o := range st.node.Outputs {
			if o != "" && (uses[o] > 0 || graphOutputs[o]) {
				live = true
			}
		}
		if live {
			continue
		}
		dead[i] = true
		dropped = append(dropped, st.node)
		for _, in := range st.node.Inputs {
			if in != "" {
				uses[in]--
			}
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	kept := pl.steps[:0:0]
	for i, st := range pl.steps {
		if !dead[i] {
			kept = append(kept, st)
		}
	}
	pl.steps = kept
	return dropped
}

// constInputInts returns the integers of node n's input i, a constant
// (value gives its tensor, nil for none): nil and true for an absent
// optional input, false for one that is not constant integers.
func constInputInts(n *ir.Node, i int, value func(string) *ir.Tensor) ([]int64, bool) {
	if i >= len(n.Inputs) || n.Inputs[i] == "" {
		return nil, true
	}
	c := value(n.Inputs[i])
	if c == nil {
		return nil, false
	}
	vals, err := c.AsInt64s()
	return vals, err == nil
}
