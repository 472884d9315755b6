package graph

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Masks computed from the shapes alone, too large to fold.
//
// Folding (Program.fold) computes a node ahead of time only when its
// result has at most maxFoldElements elements, so that a plan never holds
// large constants. A causal mask that an export builds from its lengths
// (a Trilu of a ConstantOfShape, a comparison of Ranges: LLaMA's, Falcon's,
// BLOOM's, nn.Transformer's generate_square_subsequent_mask) has Sq·Sk
// elements, past 4Mi from about 2048 tokens on, and so stays a chain of
// steps that runs on every call; the causal cut (fuse_causal.go) then
// found no constant to check, and the fused attention computed every key
// block of every row and read the mask per score. The fuser instead
// evaluates such a mask once, while it builds the plan (evalShapeOnly): the
// chain's steps are run on the side, from the plan's constants alone, the
// result is checked, and it is dropped with the plan's fusion pass. Where it
// is a causal pattern the fused node takes the cut, and the chain, which
// nothing reads any more, is dropped from the plan (dropDead); where it is
// not, the plan is as before.

// maxEvalElements bounds each tensor evalShapeOnly computes: a mask of
// 8192 × 8192 elements.
const maxEvalElements = 1 << 26

// maxEvalSteps bounds the steps one evaluation runs.
const maxEvalSteps = 64

// evalShapeOnly returns the value of tensor name when the plan's steps
// compute it from constants alone (no graph input reaches it), through at
// most maxEvalSteps standard ONNX steps with outputs of at most
// maxEvalElements elements each, within the memory budget; nil otherwise.
// The tensors it computes are reserved from the budget until
// releaseEvaluated.
func (f *fuser) evalShapeOnly(name string) *ir.Tensor {
	if f.prog == nil {
		return nil
	}
	if c, ok := f.evaluated[name]; ok {
		return c
	}
	budget := maxEvalSteps
	c := f.evalTensor(name, &budget)
	if f.evaluated == nil {
		f.evaluated = map[string]*ir.Tensor{}
	}
	f.evaluated[name] = c // nil too: not tried twice
	return c
}

// evalTensor computes tensor name for evalShapeOnly, counting the steps it
// runs down from *steps.
func (f *fuser) evalTensor(name string, steps *int) *ir.Tensor {
	if c := f.types[name].Const; c != nil {
		return f.constValue(name)
	}
	if c, ok := f.evaluated[name]; ok {
		return c
	}
	i, ok := f.producer[name]
	if !ok || *steps <= 0 {
		return nil // a graph input, or too long a chain
	}
	*steps--
	st := f.pl.steps[i]
	n := st.node
	if !isDefaultDomain(n) || st.schema == nil {
		return nil
	}
	var bytes int64
	for _, o := range n.Outputs {
		if o == "" {
			continue
		}
		t := f.types[o].Type
		dims, ok := t.Shape.Concrete()
		if !t.RankKnown || !ok {
			return nil
		}
		e := ir.NumElements(dims)
		if e < 0 || e > maxEvalElements {
			return nil
		}
		bytes += e * int64(max(t.DType.Size(), 1))
	}
	args := make([]*ir.Tensor, len(n.Inputs))
	for k, in := range n.Inputs {
		if in == "" {
			continue
		}
		if args[k] = f.evalTensor(in, steps); args[k] == nil {
			return nil
		}
	}
	if !f.prog.opts.Budget.Reserve(bytes) {
		return nil // over the budget: the mask stays steps of the plan
	}
	f.evalBytes += bytes
	res, err := runKernel(st.schema, &ops.Context{Opset: st.ctx.Opset, Threads: max(1, f.prog.opts.Threads)}, n, args)
	if err != nil {
		return nil // the steps report it when they run
	}
	if f.evaluated == nil {
		f.evaluated = map[string]*ir.Tensor{}
	}
	for k, o := range n.Outputs {
		if o != "" && k < len(res) {
			f.evaluated[o] = res[k]
		}
	}
	return f.evaluated[name]
}

// releaseEvaluated drops the tensors evalShapeOnly computed and returns
// their bytes to the budget.
func (f *fuser) releaseEvaluated() {
	if f.prog != nil {
		f.prog.opts.Budget.Release(f.evalBytes)
	}
	f.evaluated, f.evalBytes = nil, 0
}
