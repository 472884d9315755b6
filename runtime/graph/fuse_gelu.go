package graph

import (
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// GELU rewrite.
//
// PyTorch (before opset 20) exports the exact GELU, F.gelu and nn.GELU, as
// five elementwise nodes, and re-implementations spell it the same way:
//
//	Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5)     torch.onnx's symbolic
//	Mul(Mul(x, 0.5), Add(Erf(Div(x, √2)), 1))     x * 0.5 * (1 + erf(x / √2))
//	Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5) with Mul(x, 1/√2) for the Div
//
// (either operand order of each Add and Mul). After the other rewrites,
// every such float32 chain whose intermediates nothing else reads becomes
// one ONNX Gelu step (opset 20, approximate "none"), the vectorized float32
// kernel of ops/erf.go: one pass over x instead of five, and 1 + erf taken
// from erfc without the cancellation the chain has for negative x (the
// results differ from the chain's by a few float32 ulp, and below x ≈ −5.5
// by less than 10⁻⁷). Options.NoFuse turns it off.

// geluConstTol is how far the chain's constants may be from √2, 1/√2, 1
// and 0.5 (float32 rounding of the exported double constants).
const geluConstTol = 1e-6

// fuseGelus rewrites pl.steps in place and records the rewrites in
// pl.fusions.
func (p *Program) fuseGelus(pl *plan, types map[string]ops.Value) {
	schema, err := ops.Lookup("", "Gelu", 20)
	if err != nil {
		return
	}
	f := newFuser(p, pl, types)
	replace := map[int][]step{}
	for i, st := range pl.steps {
		m, ok := f.matchGelu(i)
		if !ok {
			continue
		}
		n := st.node
		gelu := &ir.Node{
			Name: n.Name + "/Gelu", OpType: "Gelu",
			Inputs: []string{m.x}, Outputs: []string{m.out},
			Doc: "fused by attnrun from the exported GELU " + n.Label(),
		}
		f.replaceChain(gelu, schema, 20, st.ctx.Threads, m.steps, replace)
	}
	if len(replace) > 0 {
		pl.steps = replaceSteps(pl.steps, replace, f.removed)
	}
}

// replaceChain replaces the matched steps of an elementwise chain rewrite
// by one step running node n (op schema at opset, with threads), placed at
// the last of them, marks them removed, and records the fusion. n's inputs
// and output are tensors the plan already has slots for.
func (f *fuser) replaceChain(n *ir.Node, schema *ops.Schema, opset, threads int, matched []int, replace map[int][]step) {
	pl := f.pl
	last := slices.Max(matched)
	args := make([]int, len(n.Inputs))
	for k, name := range n.Inputs {
		args[k] = f.slot[name]
	}
	out := n.Outputs[0]
	ns := step{index: pl.steps[last].index, node: n, schema: schema, ctx: ops.Context{Opset: opset, Threads: threads},
		args: args, outs: []int{f.slot[out]}, want: []ir.TypeInfo{f.types[out].Type}}
	fusion := Fusion{Node: n}
	for k := range pl.steps { // graph order
		if slices.Contains(matched, k) {
			fusion.Replaced = append(fusion.Replaced, pl.steps[k].node)
			f.removed[k] = true
		}
	}
	replace[last] = []step{ns}
	pl.fusions = append(pl.fusions, fusion)
}

// geluMatch is one exported GELU: its input, its output and the steps it
// replaces.
type geluMatch struct {
	x, out string
	steps  []int
}

// matchGelu matches the GELU chain around the Erf step i.
func (f *fuser) matchGelu(i int) (geluMatch, bool) {
	erf := f.pl.steps[i].node
	if f.removed[i] || erf.OpType != "Erf" || !isDefaultDomain(erf) || len(erf.Inputs) != 1 || len(erf.Outputs) != 1 {
		return geluMatch{}, false
	}
	// z = x/√2 or x·(1/√2), read only by the Erf.
	di, div, ok := f.internal(erf.Inputs[0])
	if !ok || len(div.Inputs) != 2 || len(div.Outputs) != 1 {
		return geluMatch{}, false
	}
	var x string
	switch div.OpType {
	case "Div":
		if f.scalarNear(div.Inputs[1], math.Sqrt2) {
			x = div.Inputs[0]
		}
	case "Mul":
		x, ok = f.otherOperand(div, func(c string) bool { return f.scalarNear(c, 1/math.Sqrt2) })
		if !ok {
			x = ""
		}
	}
	if x == "" || !f.isFloat32(x) || !sameType(f.types[x].Type, f.types[erf.Outputs[0]].Type) {
		return geluMatch{}, false
	}
	m := geluMatch{x: x, steps: []int{di, i}}
	// h = erf + 1, read only by a Mul.
	ai, add, ok := f.geluStep(erf.Outputs[0], "Add")
	if !ok {
		return geluMatch{}, false
	}
	if _, ok := f.otherOperand(add, func(c string) bool { return f.scalarNear(c, 1) }); !ok {
		return geluMatch{}, false
	}
	m.steps = append(m.steps, ai)
	// The product of x, 0.5 and h in any association.
	mi, mul, ok := f.geluStep(add.Outputs[0], "Mul")
	if !ok {
		return geluMatch{}, false
	}
	y := mul.Inputs[0]
	if y == add.Outputs[0] {
		y = mul.Inputs[1]
	}
	m.steps = append(m.steps, mi)
	half := func(c string) bool { return f.scalarNear(c, 0.5) }
	switch {
	case y == x || half(y): // (x·h)·0.5 or (0.5·h)·x: one more Mul
		want := func(c string) bool { return half(c) }
		if y != x {
			want = func(c string) bool { return c == x }
		}
		ni, next, ok := f.geluStep(mul.Outputs[0], "Mul")
		if !ok {
			return geluMatch{}, false
		}
		if _, ok := f.otherOperand(next, want); !ok {
			return geluMatch{}, false
		}
		m.steps, m.out = append(m.steps, ni), next.Outputs[0]
	default: // (x·0.5)·h, x·0.5 read only here
		hi, hm, ok := f.internal(y)
		if !ok || hm.OpType != "Mul" || len(hm.Inputs) != 2 || len(hm.Outputs) != 1 {
			return geluMatch{}, false
		}
		if other, ok := f.otherOperand(hm, half); !ok || other != x {
			return geluMatch{}, false
		}
		m.steps, m.out = append(m.steps, hi), mul.Outputs[0]
	}
	if !sameType(f.types[m.out].Type, f.types[x].Type) {
		return geluMatch{}, false // a constant that broadcasts wider
	}
	return m, true
}

// geluStep returns the only step reading tensor name when it is a two-input
// default-domain op of type op (one output).
func (f *fuser) geluStep(name, op string) (int, *ir.Node, bool) {
	i, ok := f.consumer(name)
	if !ok {
		return 0, nil, false
	}
	n := f.pl.steps[i].node
	if n.OpType != op || !isDefaultDomain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
		return 0, nil, false
	}
	return i, n, true
}

// otherOperand returns the operand of a two-input node that is not the one
// is picks out (is true for exactly one of them).
func (f *fuser) otherOperand(n *ir.Node, is func(string) bool) (string, bool) {
	a, b := n.Inputs[0], n.Inputs[1]
	switch {
	case is(b) && !is(a):
		return a, true
	case is(a) && !is(b):
		return b, true
	}
	return "", false
}

// scalarNear reports whether name is a one-element float32 constant within
// geluConstTol (relative) of v.
func (f *fuser) scalarNear(name string, v float64) bool {
	c, ok := f.scalarConst(name)
	return ok && math.Abs(c-v) <= geluConstTol*v
}
