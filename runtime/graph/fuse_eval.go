package graph

import (
	"runtime"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/budget"
)

// Masks computed from the shapes alone, too large to fold.
//
// Folding (Program.fold) computes a node ahead of time only when its
// result has at most maxFoldElements elements, so that a plan never holds
// large constants. A mask that an export builds from its lengths (a Trilu
// of a ConstantOfShape, a comparison of Ranges: LLaMA's, Falcon's,
// BLOOM's and nn.Transformer's causal masks, Mistral's sliding window) has
// Sq·Sk elements, past 4Mi from about 2048 tokens on, and so stays a chain
// of steps that runs on every call; the causal cut (fuse_causal.go) then
// found no constant to check, and the fused attention computed every key
// block of every row and read the mask per score. The fuser instead
// evaluates such a mask once, while it builds the plan (evalShapeOnly): the
// steps that compute it are run on the side, from the plan's constants
// alone, each intermediate dropped as soon as the steps after it have read
// it; the result is checked, and dropped with the plan's fusion pass. Where
// it is a causal pattern the fused node takes the cut, where it is a mask
// of 0 and one fill the node takes its bool form (a plan constant of a byte
// an element; fuse_chain.go), and the steps, which nothing reads any more,
// are dropped from the plan (dropDead); otherwise the plan is as before.

// maxEvalSteps bounds the steps one evaluation runs.
const maxEvalSteps = 64

// maxEvalFloatConst is the most elements a float constant that an
// evaluation reads may have (fills and scales: scalars).
const maxEvalFloatConst = 16

// evalShapeOnly returns the value of tensor name when the plan's steps
// compute it from constants alone (no graph input reaches it), through at
// most maxEvalSteps standard ONNX steps whose outputs the plan would create
// itself (each within Options.MaxTensorBytes), within the memory budget;
// nil otherwise: the mask then runs as steps, which allocate as much on
// every call.
// The result is reserved from the budget until the plan's passes end
// (plan.releaseEvaluated): the passes share it, as no pass changes the
// value of a tensor it keeps the name of.
func (f *fuser) evalShapeOnly(name string) *ir.Tensor {
	if f.prog == nil || f.failed[name] {
		return nil
	}
	if c, ok := f.evals.tensors[name]; ok {
		return c
	}
	if src := f.noOpSource(name); src != name {
		// The same values in the same shape (fuser.noOp): transformers'
		// LLaMA mask reads its [B, 1, S, S] causal part through three
		// full Slices, each once evaluated on its own.
		return f.evalShapeOnly(src)
	}
	c, bytes := f.evalCone(name)
	if c == nil {
		// Not tried again in this pass; a later one may find more of
		// the budget free.
		if f.failed == nil {
			f.failed = map[string]bool{}
		}
		f.failed[name] = true
		return nil
	}
	f.evals.tensors[name] = c
	f.evals.bytes += bytes
	return c
}

// constOrEvaluated returns the value of tensor name: a plan constant's
// data, or what evalShapeOnly computes (evaluated); nil when neither.
func (f *fuser) constOrEvaluated(name string) (c *ir.Tensor, evaluated bool) {
	if f.types[name].Const != nil {
		return f.constValue(name), false
	}
	c = f.evalShapeOnly(name)
	return c, c != nil
}

// evalCone computes tensor name from the steps that lead to it and
// returns it with the bytes it holds of the budget (nil, 0 when it
// cannot).
func (f *fuser) evalCone(name string) (*ir.Tensor, int64) {
	order, ok := f.evalOrder(name)
	if !ok || len(order) == 0 {
		return nil, 0
	}
	// Reads left of each computed tensor within the cone.
	reads := map[string]int{}
	for _, i := range order {
		for _, in := range f.pl.steps[i].node.Inputs {
			reads[in]++
		}
	}
	live := map[string]*ir.Tensor{}
	held := map[string]int64{} // each live tensor's bytes of the budget
	drop := func(t string) {
		f.prog.opts.Budget.Release(held[t])
		f.evals.dropped(held[t])
		delete(live, t)
		delete(held, t)
	}
	fail := func() (*ir.Tensor, int64) {
		for t := range live {
			drop(t)
		}
		return nil, 0
	}
	for _, i := range order {
		st := f.pl.steps[i]
		n := st.node
		args := make([]*ir.Tensor, len(n.Inputs))
		for k, in := range n.Inputs {
			switch {
			case in == "":
			case live[in] != nil:
				args[k] = live[in]
			default:
				if args[k] = f.constValue(in); args[k] == nil {
					return fail()
				}
			}
		}
		sizes, _ := outputBytes(f.types, n, f.prog.opts.MaxTensorBytes) // sized by evalOrder
		var bytes int64
		for _, b := range sizes {
			bytes += b
		}
		if !f.prog.opts.Budget.Reserve(bytes) {
			return fail() // over the budget: the mask stays steps of the plan
		}
		res, err := f.evalView(n, args)
		if res == nil && err == nil {
			res, err = runKernel(st.schema, &ops.Context{Opset: st.ctx.Opset, Threads: max(1, f.prog.opts.Threads)}, n, args)
		}
		if err != nil {
			f.prog.opts.Budget.Release(bytes)
			return fail() // the steps report it when they run
		}
		for k, o := range n.Outputs {
			if o == "" {
				continue
			}
			if k >= len(res) || reads[o] == 0 && o != name {
				f.prog.opts.Budget.Release(sizes[k]) // an output nothing here reads
				continue
			}
			live[o], held[o] = res[k], sizes[k]
		}
		for _, in := range n.Inputs {
			if reads[in]--; reads[in] == 0 && in != name && live[in] != nil {
				drop(in)
			}
		}
	}
	c, bytes := live[name], held[name]
	if c == nil {
		return fail()
	}
	return c, bytes
}

// evalView returns, for a step that only reinterprets its first input's
// elements in another shape (a Reshape, Squeeze, Unsqueeze, Flatten or
// Identity, an Expand that adds no element, a Slice that keeps them all),
// its output as a tensor sharing the input's data: evaluated tensors are
// never written, and at S=4096 the copies of a mask's [1, 1, S, S]
// Unsqueezes and Expand were a fifth of the LLaMA mask's plan time. Nil for
// other steps. Its bytes stay reserved as if it were a copy.
func (f *fuser) evalView(n *ir.Node, args []*ir.Tensor) ([]*ir.Tensor, error) {
	if len(n.Outputs) != 1 || len(args) == 0 || args[0] == nil || args[0].Data == nil {
		return nil, nil
	}
	out, ok := f.concreteShape(n.Outputs[0])
	if !ok || f.types[n.Outputs[0]].Type.DType != args[0].DType || ir.NumElements(out) != ir.NumElements(args[0].Shape) {
		return nil, nil
	}
	if !reshapeLike(n) && !f.noOp(n) && (n.OpType != "Expand" || !isDefaultDomain(n)) {
		return nil, nil
	}
	return []*ir.Tensor{{DType: args[0].DType, Shape: slices.Clone(out), Data: args[0].Data}}, nil
}

// evalOrder lists, in an order that computes each before its readers, the
// steps that compute tensor name from constants: false when a graph input,
// a float constant of more than maxEvalFloatConst elements or a step
// evalShapeOnly does not run reaches it, or there are more than
// maxEvalSteps of them.
func (f *fuser) evalOrder(name string) ([]int, bool) {
	var order []int
	seen := map[int]bool{}
	var visit func(t string) bool
	visit = func(t string) bool {
		if t == "" {
			return true
		}
		if c := f.types[t].Const; c != nil {
			// A mask is built from shapes, scalars and bool or integer
			// constants; a float table (T5's learned position buckets)
			// makes a bias, which no mask check takes: not worth a plan's
			// time to compute.
			return !c.DType.IsFloat() || ir.NumElements(c.Shape) <= maxEvalFloatConst
		}
		i, ok := f.producer[t]
		if !ok {
			return false // a graph input
		}
		if seen[i] {
			return true
		}
		seen[i] = true
		st := f.pl.steps[i]
		if !isDefaultDomain(st.node) || st.schema == nil || len(seen) > maxEvalSteps {
			return false
		}
		if _, ok := outputBytes(f.types, st.node, f.prog.opts.MaxTensorBytes); !ok {
			return false
		}
		for _, in := range st.node.Inputs {
			if !visit(in) {
				return false
			}
		}
		order = append(order, i)
		return true
	}
	return order, visit(name)
}

// outputBytes returns the bytes of each output of n (0 for an omitted
// one), and whether every output has a concrete shape of at most maxBytes
// bytes.
func outputBytes(types map[string]ops.Value, n *ir.Node, maxBytes int64) ([]int64, bool) {
	sizes := make([]int64, len(n.Outputs))
	for k, o := range n.Outputs {
		if o == "" {
			continue
		}
		t := types[o].Type
		dims, ok := t.Shape.Concrete()
		if !t.RankKnown || !ok {
			return nil, false
		}
		e, size := ir.NumElements(dims), int64(max(t.DType.Size(), 1))
		if e < 0 || e > maxBytes/size {
			return nil, false
		}
		sizes[k] = e * size
	}
	return sizes, true
}

// evalCache holds the tensors evalShapeOnly computed while a plan is
// built, with the bytes they hold of the memory budget, and counts the
// bytes of evaluated tensors dropped since the garbage collector last ran.
type evalCache struct {
	tensors map[string]*ir.Tensor
	bytes   int64
	garbage int64
	// diagonals holds what biasDiagonals found for a tensor (a nil
	// tensor where it found none).
	diagonals map[string]diagonalsOf
}

// releaseEvaluated drops the tensors evalShapeOnly computed for the plan
// and returns their bytes to the budget.
func (pl *plan) releaseEvaluated(b *budget.Budget) {
	if pl.evals == nil {
		return
	}
	b.Release(pl.evals.bytes)
	pl.evals.dropped(pl.evals.bytes)
	pl.evals = nil
}

// evalCollectBytes is how much an evaluation may leave to the garbage
// collector before it collects.
const evalCollectBytes = 64 << 20

// dropped counts bytes of evaluated tensors no longer held and collects
// them once they reach evalCollectBytes. Go's collector would wait until
// the heap doubled its size at the last collection: after the ScatterND
// indices of transformers' LLaMA mask at S=4096 (1 GiB live at once) the
// plan's later evaluations grew the heap to 2.1 GiB of mostly garbage,
// which the memory budget had already been given back.
func (c *evalCache) dropped(bytes int64) {
	if c.garbage += bytes; c.garbage >= evalCollectBytes {
		runtime.GC()
		c.garbage = 0
	}
}
