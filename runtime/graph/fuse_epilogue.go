package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// GEMM epilogue rewrite.
//
// After the other rewrites, a FusedMatMul step (fuse_matmul.go) whose
// output only feeds an activation the GEMM's epilogue has a kernel for
// (ops.FusedMatMulActivation: Relu, Gelu, Gelu with approximate "tanh"),
// or only SiLU's two steps, Sigmoid(h) and Mul(h, Sigmoid(h)) (how
// PyTorch exports nn.SiLU; the sigmoid read by that Mul alone), takes it
// as its activation attribute; then one whose output (or its
// activation's) only feeds a Mul by a float32 tensor of exactly its shape
// (a gated MLP's other half) takes that tensor as its gate input; then
// one that only feeds an Add of such a tensor (a transformer's skip
// connection) takes it as its residual input:
//
//	Relu(FusedMatMul(x, W1, b1))            FusedMatMul(x, W1, b1, activation=Relu)
//	Add(FusedMatMul(h, W2, b2), x)          FusedMatMul(h, W2, b2, residual x)
//	Mul(h·σ(h), g), h = FusedMatMul(x, W1)  FusedMatMul(x, W1, activation=Silu, gate g)
//
// The last is LLaMA's SwiGLU MLP, w2(silu(w1·x) ⊙ w3·x): the gate is
// w3's output, which may be computed after w1's product: the fused step
// runs at the Mul's position, where every input is computed (each is read
// by a step it replaces, and steps are in execution order).
//
// Steps that only reshape (keepsOrder), keeping the last dim, may sit
// before the activation, the Mul or the Add: GPT-2's Conv1D and
// nn.MultiheadAttention's output projection compute a Gemm on [S·B, C]
// and view it back as [B, S, C] or [S, B, C], and batch-first attention
// then transposes that to [B, S, C], the same order at batch 1. The fused
// step then reads its A, consecutive rows, through a view of the last
// shape's leading dims (a_view), so that its output has that shape: the
// same rows, and the activation is elementwise.
//
// The GEMM then applies them to each block of the output while the block
// is in cache, instead of a pass of their own over the whole output: on
// the 12-layer encoder at S=128 the 12 Relus and 24 residual Adds were
// 3% of the run (see ops/matmul_epilogue.go). The fused step runs where
// the last step it replaces ran. Its results are bit for bit the unfused
// steps' (the same kernels on the same values). Options.NoFuse turns it
// off with the other rewrites.

// maxReshapeRun bounds the steps that only reshape an epilogue chain
// passes through (PyTorch's exports have at most two: a Reshape and a
// Transpose of a size-1 axis).
const maxReshapeRun = 4

// epilogueChain is what fuseEpilogues folds into one FusedMatMul step.
type epilogueChain struct {
	fused    *ir.Node // the FusedMatMul with its activation, gate and residual
	out      string   // the fused step's output: the chain's last
	absorbed []int    // the reshaping, activation, gate Mul and Add steps, in order
}

// fuseEpilogues rewrites pl.steps in place and records the rewrites in
// the FusedMatMul steps' fusions (pl.fusions).
func (p *Program) fuseEpilogues(pl *plan, types map[string]ops.Value) {
	schema, err := ops.Lookup(ops.DomainAttnrun, ops.FusedMatMulOp, 1)
	if err != nil {
		return
	}
	f := newFuser(p, pl, types)
	fusionOf := map[*ir.Node]int{}
	for k, fu := range pl.fusions {
		fusionOf[fu.Node] = k
	}
	replace := map[int][]step{}
	merged := map[int]bool{} // fusions absorbed into another
	for i, st := range pl.steps {
		n := st.node
		if f.removed[i] || n.Domain != ops.DomainAttnrun || n.OpType != ops.FusedMatMulOp || len(n.Inputs) > 3 || n.Attr("activation") != nil {
			continue
		}
		c := f.epilogueChain(schema, n)
		if len(c.absorbed) == 0 {
			continue
		}
		last := c.absorbed[len(c.absorbed)-1]
		fs := step{index: pl.steps[last].index, node: c.fused, schema: schema, ctx: st.ctx,
			outs: []int{f.slot[c.out]}, want: []ir.TypeInfo{types[c.out].Type}}
		for _, name := range c.fused.Inputs {
			s := -1
			if name != "" {
				s = f.slot[name]
			}
			fs.args = append(fs.args, s)
		}
		replace[last] = []step{fs}
		k, ok := fusionOf[n]
		if !ok {
			k = len(pl.fusions)
			pl.fusions = append(pl.fusions, Fusion{Replaced: []*ir.Node{n}})
		}
		pl.fusions[k].Node = c.fused
		f.removed[i] = true
		for _, j := range c.absorbed {
			// An absorbed fused step (a Gelu of fuse_gelu.go) hands over
			// the graph nodes it replaced.
			a := pl.steps[j].node
			if g, ok := fusionOf[a]; ok {
				pl.fusions[k].Replaced = append(pl.fusions[k].Replaced, pl.fusions[g].Replaced...)
				merged[g] = true
			} else {
				pl.fusions[k].Replaced = append(pl.fusions[k].Replaced, a)
			}
			f.removed[j] = true
		}
	}
	if len(replace) == 0 {
		return
	}
	pl.steps = replaceSteps(pl.steps, replace, f.removed)
	p.dropDead(pl, nil) // what computed the shapes of the Reshapes taken
	if len(merged) > 0 {
		kept := pl.fusions[:0]
		for g, fu := range pl.fusions {
			if !merged[g] {
				kept = append(kept, fu)
			}
		}
		pl.fusions = kept
	}
}

// epilogueChain matches the activation (one op, or SiLU's Sigmoid and
// Mul), the gate Mul and the residual Add after the FusedMatMul node n,
// and a run of steps that only reshape before one of them (taken with
// it), each taken only when the fused node still infers the plan's type
// for its output.
func (f *fuser) epilogueChain(schema *ops.Schema, n *ir.Node) epilogueChain {
	c := epilogueChain{fused: n, out: n.Outputs[0]}
	reshaped := false
	// next reports whether the chain goes on, at(y) accepting the tensor
	// y it reaches (at keeps what it matched there: its last call is the
	// accepting one): the chain's own output, or, once, the output of a
	// run of steps that only reshape it (each reading the last alone),
	// with the node computing y (base) and the run's steps.
	next := func(at func(y string) bool) (base *ir.Node, run []int, ok bool) {
		if at(c.out) {
			return c.fused, nil, true
		}
		if reshaped {
			return nil, nil, false
		}
		y := c.out
		for k, okK := f.consumer(y); okK && len(run) < maxReshapeRun; k, okK = f.consumer(y) {
			rs := f.pl.steps[k].node
			xs, okX := f.concreteShape(y)
			if len(rs.Inputs) == 0 || len(rs.Outputs) != 1 || rs.Outputs[0] == "" || rs.Inputs[0] != y || !okX || !f.keepsOrder(rs, xs) {
				break
			}
			run, y = append(run, k), rs.Outputs[0]
			if trial, ok := f.reshapedRows(c.fused, y); ok && f.inferMatches(schema, trial, y) && at(y) {
				return trial, slices.Clone(run), true
			}
		}
		return nil, nil, false
	}
	// take makes trial, computing tensor out, the chain's node when it
	// infers right, absorbing the run of reshapes and the op's steps.
	take := func(trial *ir.Node, out string, run []int, op ...int) {
		trial.Outputs = []string{out}
		if f.inferMatches(schema, trial, out) {
			c.fused, c.out = trial, out
			c.absorbed = append(append(c.absorbed, run...), op...)
			reshaped = reshaped || len(run) > 0
		}
	}
	activation := func(y string) (j int, name string, ok bool) {
		if j, ok = f.consumer(y); !ok {
			return 0, "", false
		}
		act := f.pl.steps[j].node
		if name, ok = ops.FusedMatMulActivation(act); ok && len(act.Inputs) == 1 && len(act.Outputs) == 1 && act.Outputs[0] != "" && f.notWider(act, y) {
			return j, name, true
		}
		return 0, "", false
	}
	withActivation := func(base *ir.Node, name string) *ir.Node {
		trial := cloneNode(base)
		trial.Attrs = append(trial.Attrs, &ir.Attribute{Name: "activation", Type: ir.AttrString, String: []byte(name)})
		return trial
	}
	var j, sig, mul int
	var name string
	if base, run, ok := next(func(y string) (ok bool) { j, name, ok = activation(y); return ok }); ok {
		take(withActivation(base, name), f.pl.steps[j].node.Outputs[0], run, j)
	} else if base, run, ok := next(func(y string) (ok bool) { sig, mul, ok = f.siluSteps(y); return ok }); ok {
		take(withActivation(base, "Silu"), f.pl.steps[mul].node.Outputs[0], run, sig, mul)
	}
	// operand reads the elementwise op (Mul for the gate, Add for the
	// residual) of the chain's output y with a tensor of its shape.
	for _, e := range []struct {
		op    string
		input int // the FusedMatMul input it becomes
	}{{"Mul", 4}, {"Add", 3}} {
		operand := func(y string) (j int, r string, ok bool) {
			if j, ok = f.consumer(y); ok {
				r, ok = f.sameShapeOperand(f.pl.steps[j].node, e.op, y)
			}
			return j, r, ok
		}
		var r string
		if base, run, ok := next(func(y string) (ok bool) { j, r, ok = operand(y); return ok }); ok {
			take(withInput(base, e.input, r), f.pl.steps[j].node.Outputs[0], run, j)
		}
	}
	return c
}

// withInput returns a copy of n with input k set to tensor name (absent
// inputs before it "").
func withInput(n *ir.Node, k int, name string) *ir.Node {
	trial := cloneNode(n)
	for len(trial.Inputs) <= k {
		trial.Inputs = append(trial.Inputs, "")
	}
	trial.Inputs[k] = name
	return trial
}

// siluSteps returns the Sigmoid and Mul steps computing SiLU, x·σ(x), of
// tensor x (how PyTorch exports nn.SiLU and F.silu), when they are x's
// only readers: Sigmoid(x) read only by Mul(x, σ) or Mul(σ, x), neither
// broadcasting.
func (f *fuser) siluSteps(x string) (sig, mul int, ok bool) {
	if f.uses[x] != 2 || !f.isFloat32(x) {
		return 0, 0, false
	}
	var readers []int
	for i, st := range f.pl.steps {
		if !f.removed[i] && slices.Contains(st.node.Inputs, x) {
			readers = append(readers, i)
		}
	}
	if len(readers) != 2 {
		return 0, 0, false
	}
	sig, mul = readers[0], readers[1]
	if f.pl.steps[sig].node.OpType != "Sigmoid" {
		sig, mul = mul, sig
	}
	s := f.pl.steps[sig].node
	if s.OpType != "Sigmoid" || !isDefaultDomain(s) || len(s.Inputs) != 1 || len(s.Outputs) != 1 || s.Outputs[0] == "" || !f.notWider(s, x) {
		return 0, 0, false
	}
	sx := s.Outputs[0]
	j, m, ok := f.geluStep(sx, "Mul") // σ's only reader, a Mul
	if !ok || j != mul || !f.notWider(m, x) {
		return 0, 0, false
	}
	if other, ok := f.otherOperand(m, func(in string) bool { return in == sx }); !ok || other != x {
		return 0, 0, false
	}
	return sig, mul, true
}

// reshapedRows returns the FusedMatMul n computing tensor y instead, the
// result of steps that only reshape n's output (keepsOrder) and keep its
// last dim, by reading n's A through a view of y's leading dims (n's
// output rows are then y's), when n reads A as consecutive rows (no
// a_view, or a contiguous one: a Reshape read through) and B is one
// matrix.
func (f *fuser) reshapedRows(n *ir.Node, y string) (*ir.Node, bool) {
	as, okA := f.concreteShape(n.Inputs[0])
	offset := 0
	if a := n.Attr("a_view"); a != nil {
		v, err := ops.ParseView(a.Ints)
		if err != nil || !slices.Equal(v.Strides, ops.Contiguous(v.Shape).Strides) {
			return nil, false
		}
		as, offset = v.Shape, v.Offset
	}
	bs, okB := f.concreteShape(n.Inputs[1])
	if a := n.Attr("b_view"); a != nil {
		v, err := ops.ParseView(a.Ints)
		bs, okB = v.Shape, err == nil
	}
	xs, okX := f.concreteShape(n.Outputs[0])
	ys, okY := f.concreteShape(y)
	if !okA || !okX || !okY || !okB || len(bs) != 2 || len(as) < 2 || len(ys) < 2 || len(xs) < 2 ||
		ys[len(ys)-1] != xs[len(xs)-1] || ops.ShapeElems(ys) != ops.ShapeElems(xs) {
		return nil, false
	}
	v := ops.Contiguous(append(slices.Clone(ys[:len(ys)-1]), as[len(as)-1]))
	v.Offset = offset
	trial := cloneNode(n)
	trial.Attrs = slices.DeleteFunc(trial.Attrs, func(a *ir.Attribute) bool { return a.Name == "a_view" })
	trial.Attrs = append(trial.Attrs, &ir.Attribute{Name: "a_view", Type: ir.AttrInts, Ints: v.Ints()})
	trial.Outputs = []string{y}
	return trial, true
}

// sameShapeOperand returns the other operand of n when n is the binary
// op (Add, Mul) of x and a float32 tensor of exactly x's concrete shape
// (no broadcasting either way), not x itself: a skip connection's Add, a
// gated MLP's Mul.
func (f *fuser) sameShapeOperand(n *ir.Node, op, x string) (string, bool) {
	if n.OpType != op || !isDefaultDomain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
		return "", false
	}
	r := n.Inputs[0]
	if r == x {
		r = n.Inputs[1]
	}
	if r == x || r == "" || !f.isFloat32(r) {
		return "", false
	}
	xs, okX := f.concreteShape(x)
	rs, okR := f.concreteShape(r)
	if !okX || !okR || !slices.Equal(xs, rs) || !f.notWider(n, x) {
		return "", false
	}
	return r, true
}

// keepsOrder reports whether movement step n only gives its first input,
// of shape xs, another shape, leaving every element where it is: a
// Reshape, Flatten, Squeeze or Unsqueeze, or a Transpose that moves only
// axes of size 1 (batch-first nn.MultiheadAttention's [S, 1, C] → [1, S,
// C] at batch 1).
func (f *fuser) keepsOrder(n *ir.Node, xs []int) bool {
	v, ok := f.viewStep(n, 0, ops.Contiguous(xs))
	if !ok || v.Offset != 0 {
		return false
	}
	stride := 1
	for k := len(v.Shape) - 1; k >= 0; k-- {
		if v.Shape[k] == 1 {
			continue
		}
		if v.Strides[k] != stride {
			return false
		}
		stride *= v.Shape[k]
	}
	return true
}
