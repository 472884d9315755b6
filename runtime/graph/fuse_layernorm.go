package graph

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// LayerNorm rewrite.
//
// LayerNormalization is an ONNX op from opset 17. Below it (torch 1.13's
// default export is opset 14) PyTorch exports nn.LayerNorm and
// F.layer_norm as a chain of eight or nine elementwise and reduction nodes:
//
//	m = ReduceMean(x, axes)           axes: the last k axes, keepdims=1
//	d = Sub(x, m)
//	v = ReduceMean(Pow(d, 2), axes)   (or Mul(d, d))
//	y = Div(d, Sqrt(Add(v, eps)))     (either operand order of the Add)
//	y = Add(Mul(y, scale), bias)      (either operand order; bias optional)
//
// Every such float32 chain whose intermediates nothing else reads, with a
// constant scale and bias that broadcast to the normalized dims, becomes
// one LayerNormalization step (opset 17, axis = -k), the one-pass kernel of
// ops/layernorm.go: a pass over x instead of nine, no full-size
// intermediates, and the statistics accumulated with partial sums and a
// corrected mean (the results differ from the chain's float32 ones by a
// few ulp). Options.NoFuse turns it off.

// fuseLayerNorms rewrites pl.steps in place and records the rewrites in
// pl.fusions.
func (p *Program) fuseLayerNorms(pl *plan, types map[string]ops.Value) {
	p.fuseNormChains(pl, types, "LayerNormalization", 17, func(f *fuser, i int) (*ir.Node, []int, bool) {
		m, ok := f.matchLayerNorm(i)
		if !ok {
			return nil, nil, false
		}
		inputs := []string{m.x, m.scale}
		if m.bias != "" {
			inputs = append(inputs, m.bias)
		}
		return normNode(f.pl.steps[i].node, "LayerNormalization", "layer norm", inputs, m.out, m.k, m.eps), m.steps, true
	})
}

// normNode is the op node (LayerNormalization, RMSNormalization) that
// replaces a norm chain starting at first: over the last k axes, with
// epsilon eps.
func normNode(first *ir.Node, op, what string, inputs []string, out string, k int, eps float32) *ir.Node {
	return &ir.Node{
		Name: first.Name + "/" + op, OpType: op, Inputs: inputs, Outputs: []string{out},
		Attrs: []*ir.Attribute{
			{Name: "axis", Type: ir.AttrInt, Int: int64(-k)},
			{Name: "epsilon", Type: ir.AttrFloat, Float: eps},
		},
		Doc: "fused by attnrun from the exported " + what + " " + first.Label(),
	}
}

// fuseNormChains replaces every chain that match finds, starting at a
// step, with the one node it builds (op of the default domain at opset;
// match returns the node and the steps it replaces), where the node's type
// inference gives the chain's output type (a scale or bias that
// broadcasts wider than the normalized dims does not).
func (p *Program) fuseNormChains(pl *plan, types map[string]ops.Value, op string, opset int, match func(f *fuser, i int) (*ir.Node, []int, bool)) {
	schema, err := ops.Lookup("", op, opset)
	if err != nil {
		return
	}
	f := newFuser(p, pl, types)
	replace := map[int][]step{}
	for i, st := range pl.steps {
		n, steps, ok := match(f, i)
		if !ok || !f.inferMatches(schema, n, n.Outputs[0]) {
			continue
		}
		f.replaceChain(n, schema, opset, st.ctx.Threads, steps, replace)
	}
	if len(replace) > 0 {
		pl.steps = replaceSteps(pl.steps, replace, f.removed)
	}
}

// layerNormMatch is one exported layer norm: its input, scale, optional
// bias, output, epsilon, the number k of trailing axes it normalizes, and
// the steps it replaces.
type layerNormMatch struct {
	x, scale, bias, out string
	eps                 float32
	k                   int
	steps               []int
}

// matchLayerNorm matches the layer norm chain starting at the ReduceMean
// step i (the mean of x).
func (f *fuser) matchLayerNorm(i int) (layerNormMatch, bool) {
	var m layerNormMatch
	mean := f.pl.steps[i].node
	if f.removed[i] || mean.OpType != "ReduceMean" || !isDefaultDomain(mean) || len(mean.Outputs) != 1 {
		return m, false
	}
	m.x = mean.Inputs[0]
	if !f.isFloat32(m.x) {
		return m, false
	}
	xt := f.types[m.x].Type
	axes, ok := f.trailingAxes(mean, len(xt.Shape))
	if !ok {
		return m, false
	}
	m.k = axes
	m.steps = []int{i}
	// d = x - m: read by the variance's Pow (or Mul) and by the Div.
	si, sub, ok := f.lnStep(mean.Outputs[0], "Sub")
	if !ok || sub.Inputs[0] != m.x || sub.Inputs[1] != mean.Outputs[0] {
		return m, false
	}
	d := sub.Outputs[0]
	m.steps = append(m.steps, si)
	pi, sq, ok := f.squareOf(d)
	if !ok {
		return m, false
	}
	m.steps = append(m.steps, pi)
	sqrt, k, eps, steps, ok := f.meanSquareRoot(sq, len(xt.Shape))
	if !ok || k != m.k {
		return m, false
	}
	m.eps, m.steps = eps, append(m.steps, steps...)
	di, div, ok := f.lnStep(sqrt.Outputs[0], "Div")
	if !ok || div.Inputs[0] != d || div.Inputs[1] != sqrt.Outputs[0] {
		return m, false
	}
	m.steps = append(m.steps, di)
	// d is read by the square and the Div only.
	reads := 1
	if sq.Inputs[0] == sq.Inputs[1] {
		reads = 2
	}
	if f.uses[d] != reads+1 {
		return m, false
	}
	// y·scale, then an optional + bias.
	mi, mul, ok := f.lnStep(div.Outputs[0], "Mul")
	if !ok {
		return m, false
	}
	if m.scale, ok = f.otherOperand(mul, func(c string) bool { return c == div.Outputs[0] }); !ok || !f.floatConst(m.scale) {
		return m, false
	}
	m.steps, m.out = append(m.steps, mi), mul.Outputs[0]
	if bi, badd, ok := f.lnStep(mul.Outputs[0], "Add"); ok {
		if bias, ok := f.otherOperand(badd, func(c string) bool { return c == mul.Outputs[0] }); ok && f.floatConst(bias) {
			m.bias = bias
			m.steps, m.out = append(m.steps, bi), badd.Outputs[0]
		}
	}
	if !sameType(f.types[m.out].Type, xt) {
		return m, false
	}
	return m, true
}

// lnStep returns the only step reading tensor name when it is a
// default-domain op of type op with one output (two inputs for the
// binary ops).
func (f *fuser) lnStep(name, op string) (int, *ir.Node, bool) {
	i, ok := f.consumer(name)
	if !ok {
		return 0, nil, false
	}
	n := f.pl.steps[i].node
	if n.OpType != op || !isDefaultDomain(n) || len(n.Outputs) != 1 || n.Outputs[0] == "" {
		return 0, nil, false
	}
	if op != "Sqrt" && op != "ReduceMean" && len(n.Inputs) != 2 {
		return 0, nil, false
	}
	return i, n, true
}

// squareOf returns the step squaring d, Pow(d, 2) or Mul(d, d), when it is
// the only one of d's readers besides the Div.
func (f *fuser) squareOf(d string) (int, *ir.Node, bool) {
	for i, st := range f.pl.steps {
		n := st.node
		if f.removed[i] || !f.isSquare(n) || n.Inputs[0] != d {
			continue
		}
		if f.uses[n.Outputs[0]] != 1 {
			return 0, nil, false
		}
		return i, n, true
	}
	return 0, nil, false
}

// isSquare reports whether n squares its first input: Pow(x, 2) or
// Mul(x, x), with one output.
func (f *fuser) isSquare(n *ir.Node) bool {
	if !isDefaultDomain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return false
	}
	switch n.OpType {
	case "Pow":
		return f.scalarNear(n.Inputs[1], 2)
	case "Mul":
		return n.Inputs[0] == n.Inputs[1]
	}
	return false
}

// meanSquareRoot follows the square sq of a rank-r tensor, as layer and
// RMS norms both compute it, to sqrt(ReduceMean(sq) + eps): the mean over
// the last k axes (keepdims), eps a scalar constant ≥ 0 added in either
// order. It returns the Sqrt node, k, eps and the three steps
// (ReduceMean, Add, Sqrt), each the only reader of the one before.
func (f *fuser) meanSquareRoot(sq *ir.Node, r int) (*ir.Node, int, float32, []int, bool) {
	vi, v, ok := f.lnStep(sq.Outputs[0], "ReduceMean")
	if !ok || v.Inputs[0] != sq.Outputs[0] {
		return nil, 0, 0, nil, false
	}
	k, ok := f.trailingAxes(v, r)
	if !ok {
		return nil, 0, 0, nil, false
	}
	ai, add, ok := f.lnStep(v.Outputs[0], "Add")
	if !ok {
		return nil, 0, 0, nil, false
	}
	epsName, ok := f.otherOperand(add, func(c string) bool { return c == v.Outputs[0] })
	if !ok {
		return nil, 0, 0, nil, false
	}
	eps, ok := f.scalarConst(epsName)
	if !ok || !(eps >= 0) {
		return nil, 0, 0, nil, false
	}
	qi, sqrt, ok := f.lnStep(add.Outputs[0], "Sqrt")
	if !ok {
		return nil, 0, 0, nil, false
	}
	return sqrt, k, float32(eps), []int{vi, ai, qi}, true
}

// trailingAxes returns k when the ReduceMean n keeps its dims and reduces
// exactly the last k axes of its rank-r input (axes from the attribute,
// before opset 18, or from a constant input).
func (f *fuser) trailingAxes(n *ir.Node, r int) (int, bool) {
	if keep, err := n.AttrInt("keepdims", 1); err != nil || keep != 1 || r == 0 {
		return 0, false
	}
	if noop, err := n.AttrInt("noop_with_empty_axes", 0); err != nil || noop != 0 {
		return 0, false
	}
	axes, ok, err := n.AttrInts("axes")
	if err != nil {
		return 0, false
	}
	if !ok {
		if len(n.Inputs) < 2 || n.Inputs[1] == "" {
			return 0, false // all axes: not a layer norm over trailing dims
		}
		c := f.types[n.Inputs[1]].Const
		if c == nil || c.DType != ir.Int64 || f.constValue(n.Inputs[1]) == nil {
			return 0, false
		}
		axes = c.Int64s()
	} else if len(n.Inputs) > 1 && n.Inputs[1] != "" {
		return 0, false
	}
	seen := map[int]bool{}
	for _, a := range axes {
		na, err := ops.NormAxis(a, r)
		if err != nil || na < r-len(axes) || seen[na] {
			return 0, false
		}
		seen[na] = true
	}
	return len(axes), len(axes) > 0
}

// floatConst reports whether name is a float32 constant (a weight).
func (f *fuser) floatConst(name string) bool {
	c := f.types[name].Const
	return c != nil && c.DType == ir.Float
}
