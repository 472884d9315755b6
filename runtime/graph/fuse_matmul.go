package graph

import (
	"sort"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// MatMul rewrite.
//
// After attention fusion, every remaining float32 MatMul step whose
// operands come through movement steps (a Transpose swapping the last two
// axes, a head split Reshape+Transpose, ...) or whose result only feeds an
// Add of a constant bias over the last axis (a Linear layer's MatMul + Add)
// becomes one com.attnrun:FusedMatMul step: it reads A and B through
// strided views (so the transposes are GEMM flags and strides, not copies)
// and adds the bias as the GEMM's initial C. A MatMul whose B is a model
// constant (weights) is rewritten even with nothing to fold, because
// FusedMatMul keeps constant weights packed across runs. So is a Gemm
// that is a Linear layer (gemmAsMatMul: constant B, alpha 1, an optional
// bias of N elements with beta 1), as nn.MultiheadAttention's output
// projection and GPT-2's Conv1D export: unpacked, such a Gemm packed its
// weights in every run, 5× the time of the packed product. The movement
// steps read through drop out when nothing else reads them; the Add is
// replaced. Like the attention rewrite it runs at plan time and
// Options.NoFuse turns it off.

// fuseMatMuls rewrites pl.steps in place and records the rewrites in
// pl.fusions.
func (p *Program) fuseMatMuls(pl *plan, types map[string]ops.Value) {
	schema, err := ops.Lookup(ops.DomainAttnrun, ops.FusedMatMulOp, 1)
	if err != nil {
		return
	}
	f := newFuser(p, pl, types)
	replace := map[int][]step{}
	readChains := map[*ir.Node]int{}
	for i, st := range pl.steps {
		n := st.node
		if f.removed[i] || !isDefaultDomain(n) || len(n.Outputs) != 1 || n.Outputs[0] == "" {
			continue
		}
		var fused *ir.Node
		switch {
		case n.OpType == "MatMul" && len(n.Inputs) == 2 && f.isFloat32(n.Inputs[0]) && f.isFloat32(n.Inputs[1]):
			fused = &ir.Node{
				Name: n.Name + "/FusedMatMul", OpType: ops.FusedMatMulOp, Domain: ops.DomainAttnrun,
				Inputs: append([]string{}, n.Inputs...), Outputs: append([]string{}, n.Outputs...),
			}
		case n.OpType == "Gemm":
			fused = f.gemmAsMatMul(st)
		}
		if fused == nil || !f.inferMatches(schema, fused, n.Outputs[0]) {
			continue // 1-D operands, unknown shapes
		}
		gemm := n.OpType == "Gemm"
		var reads []int
		for k, attr := range []string{"a_view", "b_view"} {
			if gemm && k == 1 {
				break // B is a constant, read through b_view already when transposed
			}
			var chain []int
			fused, chain = f.readInputThrough(schema, fused, k, attr, n.Outputs[0], gemmFriendly)
			reads = append(reads, chain...)
		}
		replaced := []int{i}
		if ai, add, bias, ok := f.biasAdd(n.Outputs[0]); ok && len(fused.Inputs) == 2 {
			trial := cloneNode(fused)
			trial.Inputs = append(trial.Inputs, bias)
			trial.Outputs[0] = add.Outputs[0]
			trial.Doc = "fused by attnrun from " + n.Label() + ", " + add.Label()
			if f.inferMatches(schema, trial, add.Outputs[0]) {
				fused = trial
				replaced = append(replaced, ai)
			}
		}
		// A MatMul with nothing to fold still becomes FusedMatMul when B
		// is a model constant: FusedMatMul packs constant weights once
		// (blas.PackB) instead of in every run.
		if len(reads) == 0 && len(replaced) == 1 && p.Types[fused.Inputs[1]].Const == nil && !gemm {
			continue
		}
		for _, k := range reads {
			readChains[pl.steps[k].node] = len(pl.fusions)
		}
		f.replaceChain(fused, schema, 1, st.ctx.Threads, replaced, replace)
	}
	if len(replace) == 0 {
		return
	}
	pl.steps = replaceSteps(pl.steps, replace, f.removed)
	p.dropDead(pl, readChains)
}

// gemmAsMatMul returns the FusedMatMul computing a Gemm step (opset ≥ 7)
// that is a Linear layer: float32, alpha 1, A not transposed, B a model
// constant (transB becomes a transposed b_view, so that B is packed once
// like a MatMul's weights), and C absent or a bias of N elements with
// beta 1. Anything else stays a Gemm (nil).
func (f *fuser) gemmAsMatMul(st step) *ir.Node {
	n := st.node
	if st.ctx.Opset < 7 || len(n.Inputs) < 2 || len(n.Inputs) > 3 || !f.isFloat32(n.Inputs[0]) || !f.isFloat32(n.Inputs[1]) {
		return nil
	}
	alpha, errA := n.AttrFloat("alpha", 1)
	beta, errB := n.AttrFloat("beta", 1)
	transA, errTA := n.AttrInt("transA", 0)
	transB, errTB := n.AttrInt("transB", 0)
	if errA != nil || errB != nil || errTA != nil || errTB != nil || alpha != 1 || transA != 0 {
		return nil
	}
	b := f.types[n.Inputs[1]].Const
	if b == nil || b.Rank() != 2 {
		return nil
	}
	fused := &ir.Node{
		Name: n.Name + "/FusedMatMul", OpType: ops.FusedMatMulOp, Domain: ops.DomainAttnrun,
		Inputs: append([]string{}, n.Inputs[:2]...), Outputs: append([]string{}, n.Outputs...),
		Doc: "fused by attnrun from " + n.Label(),
	}
	if transB != 0 {
		nOut, k := b.Shape[0], b.Shape[1]
		v := ops.View{Shape: []int{k, nOut}, Strides: []int{1, k}}
		fused.Attrs = append(fused.Attrs, &ir.Attribute{Name: "b_view", Type: ir.AttrInts, Ints: v.Ints()})
	}
	if len(n.Inputs) == 3 && n.Inputs[2] != "" {
		c, ok := f.concreteShape(n.Inputs[2])
		if !ok || beta != 1 || !f.isFloat32(n.Inputs[2]) || len(c) == 0 || len(c) > 2 || (len(c) == 2 && c[0] != 1) {
			return nil
		}
		fused.Inputs = append(fused.Inputs, n.Inputs[2])
	}
	return fused
}

// gemmFriendly reports whether a GEMM can take the view's matrices with
// strides alone (one of the last two strides is 1).
func gemmFriendly(v ops.View) bool {
	r := len(v.Shape)
	return r >= 2 && (v.Strides[r-1] == 1 || v.Strides[r-2] == 1)
}

// biasAdd finds the Add that is the only consumer of x and adds a float32
// constant of N elements over the last axis (shape [N] or [1, .., N]) to
// it, keeping x's shape.
func (f *fuser) biasAdd(x string) (int, *ir.Node, string, bool) {
	i, ok := f.consumer(x)
	if !ok {
		return 0, nil, "", false
	}
	n := f.pl.steps[i].node
	if n.OpType != "Add" || !isDefaultDomain(n) || len(n.Inputs) != 2 || len(n.Outputs) != 1 || n.Outputs[0] == "" {
		return 0, nil, "", false
	}
	bias := n.Inputs[1]
	if bias == x {
		bias = n.Inputs[0]
	}
	if bias == x || (n.Inputs[0] != x && n.Inputs[1] != x) {
		return 0, nil, "", false
	}
	c := f.types[bias].Const
	xs, ok := f.concreteShape(x)
	if c == nil || c.DType != ir.Float || c.Rank() == 0 || !ok || len(xs) == 0 || c.Rank() > len(xs) {
		return 0, nil, "", false
	}
	for k, d := range c.Shape {
		if (k < c.Rank()-1 && d != 1) || (k == c.Rank()-1 && d != xs[len(xs)-1]) {
			return 0, nil, "", false
		}
	}
	if !f.notWider(n, x) {
		return 0, nil, "", false
	}
	return i, n, bias, true
}

// newFuser indexes the plan's steps for a rewrite.
// graphOutputUse is what a graph output adds to its use count: far more
// than the readers any tensor has.
const graphOutputUse = 1 << 20

func newFuser(p *Program, pl *plan, types map[string]ops.Value) *fuser {
	if pl.evals == nil {
		pl.evals = &evalCache{tensors: map[string]*ir.Tensor{}}
	}
	f := &fuser{prog: p, pl: pl, types: types, evals: pl.evals, producer: map[string]int{}, uses: map[string]int{}, slot: map[string]int{}, removed: map[int]bool{}}
	for i, st := range pl.steps {
		for k, name := range st.node.Outputs {
			if name != "" {
				f.producer[name] = i
				f.slot[name] = st.outs[k]
			}
		}
		for k, name := range st.node.Inputs {
			if name != "" {
				f.uses[name]++
				f.slot[name] = st.args[k]
			}
		}
	}
	for _, o := range p.Model.Graph.Outputs {
		f.uses[o.Name] += graphOutputUse // a graph output is never an internal value
	}
	return f
}

// dropDead removes the steps nobody reads any more and lists those a
// fusion read through in its Absorbed nodes, in graph order.
func (p *Program) dropDead(pl *plan, readChains map[*ir.Node]int) {
	outs := map[string]bool{}
	for _, o := range p.Model.Graph.Outputs {
		outs[o.Name] = true
	}
	for _, n := range deadSteps(pl, outs) {
		if k, ok := readChains[n]; ok {
			pl.fusions[k].Absorbed = append(pl.fusions[k].Absorbed, n)
		}
	}
	for _, fu := range pl.fusions {
		sort.Slice(fu.Absorbed, func(i, j int) bool { return p.Index[fu.Absorbed[i]] < p.Index[fu.Absorbed[j]] })
	}
}
