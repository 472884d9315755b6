package graph

import (
	"maps"
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
//
// GPT-2's gelu_new (transformers' NewGELUActivation, and the older
// modules' gelu) is the tanh approximation written out,
//
//	0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x³)))
//
// which torch 1.13 exports as eight nodes: Mul(x, 0.5), Pow(x, 3), Mul,
// Add, Mul, Tanh, Add, Mul; FastGELU writes the argument as
// x·√(2/π)·(1 + 0.044715·x·x). The rewrite reads the expressions on either
// side of the Tanh as polynomials: the argument must be c·x + c·k·x³ in
// the one tensor x, the result h·x + h·x·tanh in that x and the Tanh's
// output, with c, k, h and the 1 (the two terms' ratio) within
// geluConstTol of √(2/π), 0.044715, 0.5 and 1, whatever the association
// and operand order of the Adds, Subs, Muls, Divs by a constant and Pows
// to a small integer power that spell them, every intermediate read by
// nothing else and of x's shape. The chain becomes one Gelu step with
// approximate "tanh" (ops' float32 kernel: the argument and the product
// in float32, the tanh within 2 ulp): one pass over x instead of eight,
// and no Pow (float64 math.Pow per element). Over x in [-12, 12] its
// results are within 1.9e-7·max(1, |x|) of the float32 chain's and
// 1.0e-7·max(1, |x|) of the float64 formula's (TestFuseGeluTanh; both
// round 1 + tanh in float32, so for negative x the error scales with |x|).

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
			m, ok = f.matchGeluTanh(i)
		}
		if !ok {
			continue
		}
		n := st.node
		gelu := &ir.Node{
			Name: n.Name + "/Gelu", OpType: "Gelu",
			Inputs: []string{m.x}, Outputs: []string{m.out},
			Doc: "fused by attnrun from the exported GELU " + n.Label(),
		}
		if m.tanh {
			gelu.Attrs = []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("tanh")}}
			gelu.Doc = "fused by attnrun from the exported tanh GELU (gelu_new) around " + n.Label()
		}
		f.replaceChain(gelu, schema, 20, st.ctx.Threads, m.steps, replace)
	}
	if len(replace) > 0 {
		pl.steps = replaceSteps(pl.steps, replace, f.removed)
	}
}

// geluMatch is one exported GELU: its input, its output, the steps it
// replaces, and whether it is the tanh approximation.
type geluMatch struct {
	x, out string
	steps  []int
	tanh   bool
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
	return ok && near(c, v)
}

// matchGeluTanh matches the tanh GELU chain around the Tanh step i: the
// polynomial c·x + c·k·x³ into it, and up to geluTanhLevels steps above
// it, the first whose result is h·x + h·x·tanh.
func (f *fuser) matchGeluTanh(i int) (geluMatch, bool) {
	th := f.pl.steps[i].node
	if f.removed[i] || th.OpType != "Tanh" || !isDefaultDomain(th) || len(th.Inputs) != 1 || len(th.Outputs) != 1 || th.Outputs[0] == "" {
		return geluMatch{}, false
	}
	arg := polyWalk{f: f}
	a, ok := arg.eval(th.Inputs[0])
	if !ok || arg.x == "" || !f.isFloat32(arg.x) || !a.only(monomial{1, 0}, monomial{3, 0}) {
		return geluMatch{}, false
	}
	c := a[monomial{1, 0}]
	if !near(c, math.Sqrt(2/math.Pi)) || !near(a[monomial{3, 0}]/c, 0.044715) {
		return geluMatch{}, false
	}
	out := polyWalk{f: f, x: arg.x, t: th.Outputs[0], steps: append(arg.steps, i)}
	for cur, level := th.Outputs[0], 0; level < geluTanhLevels; level++ {
		ci, ok := f.consumer(cur)
		if !ok {
			return geluMatch{}, false
		}
		walk := out // a fresh copy of the steps so far for each root tried
		walk.steps = slices.Clone(out.steps)
		y, ok := walk.evalStep(ci)
		if !ok {
			return geluMatch{}, false
		}
		cur = f.pl.steps[ci].node.Outputs[0]
		h := y[monomial{1, 1}]
		if !y.only(monomial{1, 0}, monomial{1, 1}) || !near(h, 0.5) || !near(y[monomial{1, 0}]/h, 1) {
			continue // not yet the whole product: one step up
		}
		xt := f.types[arg.x].Type
		for _, k := range walk.steps {
			if !sameType(f.types[f.pl.steps[k].node.Outputs[0]].Type, xt) {
				return geluMatch{}, false // a constant that broadcasts wider
			}
		}
		return geluMatch{x: arg.x, out: cur, steps: walk.steps, tanh: true}, true
	}
	return geluMatch{}, false
}

// geluTanhLevels bounds how many steps above the Tanh the product may end
// (x·(0.5 + 0.5·tanh) takes three).
const geluTanhLevels = 4

// near reports whether v is within geluConstTol (relative) of want.
func near(v, want float64) bool { return math.Abs(v-want) <= geluConstTol*math.Abs(want) }

// monomial is x^[0]·t^[1].
type monomial [2]int

// poly is a polynomial in x and t: its coefficients by monomial, none 0.
type poly map[monomial]float64

// polyMaxDegree bounds the degree a walk builds (in x: the cube times a
// few constants; in t: 1).
const polyMaxDegree = 6

// only reports whether p has exactly the monomials ms.
func (p poly) only(ms ...monomial) bool {
	if len(p) != len(ms) {
		return false
	}
	for _, m := range ms {
		if _, ok := p[m]; !ok {
			return false
		}
	}
	return true
}

// plus returns p + sign·q.
func (p poly) plus(q poly, sign float64) poly {
	r := maps.Clone(p)
	for m, c := range q {
		r[m] += sign * c
		if r[m] == 0 {
			delete(r, m)
		}
	}
	return r
}

// times returns p·q, or false past polyMaxDegree.
func (p poly) times(q poly) (poly, bool) {
	r := poly{}
	for m1, c1 := range p {
		for m2, c2 := range q {
			m := monomial{m1[0] + m2[0], m1[1] + m2[1]}
			if m[0] > polyMaxDegree || m[1] > polyMaxDegree {
				return nil, false
			}
			r[m] += c1 * c2
			if r[m] == 0 {
				delete(r, m)
			}
		}
	}
	return r, true
}

// constant returns p's value when p is a nonzero constant.
func (p poly) constant() (float64, bool) {
	c, ok := p[monomial{}]
	return c, ok && len(p) == 1
}

// polyWalk reads an elementwise expression as a polynomial in the tensor
// x (the first non-constant leaf it meets, when not given) and the tensor
// t, through Add, Sub, Mul, Div by a constant and Pow to a constant power
// of 1 to 4 whose outputs nothing else reads, listing the steps it passes.
type polyWalk struct {
	f     *fuser
	x, t  string
	steps []int
}

// polyMaxSteps bounds the steps of one walk (gelu_new takes 8).
const polyMaxSteps = 16

// eval reads tensor name.
func (w *polyWalk) eval(name string) (poly, bool) {
	switch c, ok := w.f.scalarConst(name); {
	case name == "":
		return nil, false
	case name == w.t:
		return poly{{0, 1}: 1}, true
	case name == w.x:
		return poly{{1, 0}: 1}, true
	case ok:
		if c == 0 {
			return poly{}, true
		}
		return poly{{}: c}, true
	}
	if i, _, ok := w.f.internal(name); ok {
		return w.evalStep(i)
	}
	if w.x != "" || w.f.types[name].Const != nil {
		return nil, false // a second variable, or a constant of several values
	}
	w.x = name
	return poly{{1, 0}: 1}, true
}

// evalStep reads step i's output.
func (w *polyWalk) evalStep(i int) (poly, bool) {
	n := w.f.pl.steps[i].node
	switch {
	case w.f.removed[i] || !isDefaultDomain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || len(w.steps) >= polyMaxSteps:
		return nil, false
	case !slices.Contains([]string{"Add", "Sub", "Mul", "Div", "Pow"}, n.OpType):
		return nil, false
	}
	w.steps = append(w.steps, i)
	a, ok := w.eval(n.Inputs[0])
	if !ok {
		return nil, false
	}
	if n.OpType == "Pow" {
		e, ok := w.f.smallPower(n.Inputs[1])
		r := poly{{}: 1}
		for k := 0; ok && k < e; k++ {
			r, ok = r.times(a)
		}
		return r, ok
	}
	b, ok := w.eval(n.Inputs[1])
	if !ok {
		return nil, false
	}
	switch n.OpType {
	case "Add":
		return a.plus(b, 1), true
	case "Sub":
		return a.plus(b, -1), true
	case "Mul":
		return a.times(b)
	case "Div":
		if c, ok := b.constant(); ok {
			return a.times(poly{{}: 1 / c})
		}
	}
	return nil, false
}

// smallPower returns the value of a one-element constant exponent that is
// an integer from 1 to 4 (float32 or integer typed).
func (f *fuser) smallPower(name string) (int, bool) {
	c := f.types[name].Const
	if c == nil || ir.NumElements(c.Shape) != 1 {
		return 0, false
	}
	if c = f.constValue(name); c == nil || c.Len() != 1 {
		return 0, false
	}
	var e float64
	if c.DType == ir.Float {
		e = float64(c.Float32s()[0])
	} else if v, err := c.AsInt64s(); err == nil {
		e = float64(v[0])
	} else {
		return 0, false
	}
	if e != math.Trunc(e) || e < 1 || e > 4 {
		return 0, false
	}
	return int(e), true
}
