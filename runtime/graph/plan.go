package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// maxCachedPlans bounds the number of plans in the per-shape plan cache,
// besides its byte bound (see budget.go): inputs of ever-changing shapes
// must not grow memory forever.
const maxCachedPlans = 32

// RunOptions customize one Run.
type RunOptions struct {
	// OnNode, when set, is called before each executed node with its index
	// in Program.Order. Folded nodes are not executed and not reported. A
	// fused step (fuse.go) is reported with its fused node and, in fused,
	// a description naming the nodes it replaced (see Fusion.Describe);
	// fused is "" for every other step.
	OnNode func(i int, n *ir.Node, fused string)
	// ReuseOutputs lets the run write float32 graph outputs into buffers
	// the program keeps for the plan, instead of new memory: the returned
	// tensors are then valid only until the next run of the same Program
	// (a caller that copies its outputs away before running again, like a
	// backend, saves the allocation and the page faults of fresh memory).
	// A graph output that only reshapes a graph input (Identity, Reshape)
	// then shares that input's data instead of copying it.
	ReuseOutputs bool
	// Profile, when set, receives the time each executed step took, in
	// order (OnNode, the kernel, the result check, releasing dead values).
	Profile *[]StepTime
	// OutputInto, when set, is asked for the memory of every float32
	// graph output that a step computes into a buffer (RunInto; also one
	// a reshape-like step makes of such a buffer, see outputViews), with
	// the output's name and shape. It returns exactly as many elements to
	// compute the output into, or nil to leave the memory to the program
	// (new memory, or a buffer of its own with ReuseOutputs). The output
	// Run returns then shares that memory: a backend hands out slices of
	// the memory it sends its outputs in (the shared tensor region) and
	// saves copying them there. The memory must not overlap the inputs
	// or another output's.
	OutputInto func(name string, shape []int) []float32
}

// plan is the execution recipe for one set of concrete input shapes: the
// nodes left after folding, the slot each tensor lives in, and which slots
// to free after each step.
type plan struct {
	steps   []step
	nslots  int
	inputs  map[string]int       // graph input name → slot
	consts  map[int]*ir.Tensor   // slot → constant (initializers, folded)
	outputs []int                // graph outputs' slots, in order
	types   map[string]ops.Value // concrete types of every tensor
	fusions []Fusion             // fused regions (fuse.go), in step order
	// attnReasons says why an Attention node was not rewritten
	// (fuse_attention_op.go).
	attnReasons map[*ir.Node]string
	// attnMisses says, for each MatMul or Einsum the attention fusion
	// tried as the product with V and did not fuse, why
	// (fuse_missed.go).
	attnMisses map[*ir.Node]string
	mem        memPlan // buffers of the steps that run into them
	// values reads constants' data for the fusion matchers while the plan
	// is built (nil after).
	values *valueReader
	// released names the tensors folded for the plan and dropped during
	// the fold, every reader of theirs folded too (buildPlan).
	released map[string]bool
	// evals holds the tensors the rewrite passes computed from constants
	// while the plan is built (fuse_eval.go; nil after).
	evals *evalCache

	// Cache bookkeeping (budget.go), under Program.mu.
	key    string
	folded int64 // bytes of constants folded for this plan, reserved from the budget
	cost   int64 // folded plus bookkeeping: what the plan counts in the cache
	refs   int   // runs (and Plan/Fusions calls) using the plan
	cached bool
}

type step struct {
	index  int // position in Program.Order
	node   *ir.Node
	schema *ops.Schema
	ctx    ops.Context
	args   []int // slot per input; -1 for omitted
	outs   []int // slot per output; -1 for omitted
	free   []int // slots whose last use is this step
	want   []ir.TypeInfo
	// dims are want's shapes where fully known (nil where not), worked out
	// once per plan rather than on every run (runInto, checkResult).
	dims [][]int
	// view: the step only reshapes its first input; its output shares the
	// input's data (memory.go).
	view bool
	// sameCast: the step is a Cast to its input's own element type (an
	// fp32 export's x.to(torch.float32), .float()): an Identity, which
	// runs as a view.
	sameCast bool
	// output: the step writes a graph output, which must not be memory
	// a later run reuses unless RunOptions.ReuseOutputs.
	output bool
	// outputView: the step reshapes a graph input into a graph output; it
	// runs as a view when RunOptions.ReuseOutputs is set (memory.go).
	outputView bool
	// bufs, when set, gives the arena buffer each output is computed into
	// with the schema's RunInto (-1 for an omitted output); fresh marks
	// graph outputs, and the tensors a graph output is a view of
	// (outputViews), which get new memory unless RunOptions.ReuseOutputs.
	bufs  []int
	fresh []bool
	// outName names, for each fresh output, the graph output it is or
	// becomes through a view (RunOptions.OutputInto); "" for the others.
	outName []string
	// fused describes a fused step (Fusion.Describe) for its errors;
	// "" for a step of the graph's own.
	fused string
}

// describe names the step in messages: `node "x" (Op)`, or for a fused
// step `fused node "x" (com.attnrun:Op, replacing "a", "b")`.
func (st *step) describe() string {
	if st.fused != "" {
		return st.fused
	}
	return fmt.Sprintf("node %q (%s)", st.node.Label(), st.node.QualifiedOp())
}

// wrapErr makes an error raised while running a fused step name the fused
// node and the nodes it replaced, instead of the fused node alone.
func (st *step) wrapErr(err error) error {
	if st.fused == "" || err == nil {
		return err
	}
	rest := strings.TrimPrefix(err.Error(), fmt.Sprintf("node %q (%s): ", st.node.Label(), st.node.QualifiedOp()))
	return &stepError{msg: ir.Elide(st.fused + ": " + rest), err: err}
}

// stepError is an error re-worded by step.wrapErr; it unwraps to the
// original.
type stepError struct {
	msg string
	err error
}

func (e *stepError) Error() string { return e.msg }
func (e *stepError) Unwrap() error { return e.err }

// CheckInputs validates named inputs against the graph's declared inputs:
// none missing, none extra, element types equal, ranks equal, known dims
// equal. With Options.StrictDims each symbolic dim must also be bound to
// one size across all inputs; see ValidateInputs.
func (p *Program) CheckInputs(inputs map[string]*ir.Tensor) error {
	_, err := p.ValidateInputs(inputs)
	return err
}

// DimBinding is the size one graph input gives a dim_param.
type DimBinding struct {
	Input string // the graph input
	Dim   int    // the axis
	Size  int
}

// DimConflict is a dim_param name that the graph inputs bind to different
// sizes in one run: an exporter that gave two independent dims one name
// (e.g. torch.onnx.export's dynamic_axes naming both the decoder and the
// encoder length "S").
type DimConflict struct {
	Param string
	// Bindings are every input axis declared with Param, in input order.
	Bindings []DimBinding
}

func (c DimConflict) String() string {
	parts := make([]string, len(c.Bindings))
	for i, b := range c.Bindings {
		parts[i] = fmt.Sprintf("%q dim %d = %d", b.Input, b.Dim, b.Size)
	}
	return fmt.Sprintf("inputs give dim_param %q different sizes: %s", c.Param, strings.Join(parts, ", "))
}

// ValidateInputs is CheckInputs that also returns the dim_param conflicts
// it let through, one per dim_param name, in input order. A conflict is an
// error with Options.StrictDims; otherwise the run goes ahead, as ONNX
// Runtime's does. It runs right: the symbolic types of compile time took
// the sizes for one, but a plan is inferred afresh from the concrete input
// shapes (see buildPlan), so every shape in it is the real one.
func (p *Program) ValidateInputs(inputs map[string]*ir.Tensor) ([]DimConflict, error) {
	g := p.Model.Graph
	// Made on first use: most runs of most models bind a dim_param or two,
	// and conflict on none.
	var bindings map[string][]DimBinding // dim_param → every axis declared with it
	var params []string                  // dim_params in order of first binding
	var conflicting map[string]bool
	for _, vi := range g.Inputs {
		t, ok := inputs[vi.Name]
		if !ok || t == nil {
			return nil, fmt.Errorf("missing input %q (%v)", vi.Name, vi.Type)
		}
		if err := t.Check(); err != nil {
			return nil, fmt.Errorf("input %q: %w", vi.Name, err)
		}
		if t.DType != vi.Type.DType {
			return nil, fmt.Errorf("input %q has element type %v, the model expects %v", vi.Name, t.DType, vi.Type.DType)
		}
		if !vi.Type.RankKnown {
			continue
		}
		if len(t.Shape) != len(vi.Type.Shape) {
			return nil, fmt.Errorf("input %q has shape [%s], the model expects rank %d %v", vi.Name, ir.ShapeString(t.Shape), len(vi.Type.Shape), vi.Type.Shape)
		}
		for i, d := range vi.Type.Shape {
			got := t.Shape[i]
			switch {
			case d.Param != "":
				prev := bindings[d.Param]
				if len(prev) == 0 {
					params = append(params, d.Param)
				} else if first := prev[0]; first.Size != got {
					if p.opts.StrictDims {
						return nil, fmt.Errorf("input %q dim %d (%s) is %d, but %s dim %d set %s=%d (refused: strict dims)", vi.Name, i, d.Param, got, first.Input, first.Dim, d.Param, first.Size)
					}
					if conflicting == nil {
						conflicting = map[string]bool{}
					}
					conflicting[d.Param] = true
				}
				if bindings == nil {
					bindings = make(map[string][]DimBinding, 2)
				}
				bindings[d.Param] = append(prev, DimBinding{vi.Name, i, got})
			case d.Value >= 0 && int64(got) != d.Value:
				return nil, fmt.Errorf("input %q has shape [%s], the model expects %v (dim %d must be %d)", vi.Name, ir.ShapeString(t.Shape), vi.Type.Shape, i, d.Value)
			}
		}
	}
	// Every declared input is present (above), so there are others only
	// when there are more inputs than declared ones.
	var extra []string
	if len(inputs) > len(g.Inputs) {
		declared := make(map[string]bool, len(g.Inputs))
		for _, vi := range g.Inputs {
			declared[vi.Name] = true
		}
		for name := range inputs {
			if !declared[name] {
				extra = append(extra, name)
			}
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		var names []string
		for _, vi := range g.Inputs {
			names = append(names, vi.Name)
		}
		return nil, fmt.Errorf("unexpected input %q: the model's inputs are %s", extra[0], strings.Join(names, ", "))
	}
	var conflicts []DimConflict
	for _, param := range params {
		if conflicting[param] {
			conflicts = append(conflicts, DimConflict{Param: param, Bindings: bindings[param]})
		}
	}
	return conflicts, nil
}

// planKey identifies a set of concrete input shapes, and the values of the
// inputs whose values decide shapes (budget.go); keyed lists those.
func (p *Program) planKey(inputs map[string]*ir.Tensor) (key string, keyed map[string]bool) {
	var b strings.Builder
	for _, vi := range p.Model.Graph.Inputs {
		b.WriteString(ir.ShapeString(inputs[vi.Name].Shape))
		b.WriteByte(';')
	}
	vk, keyed := p.valueKey(inputs)
	return b.String() + vk, keyed
}

// Plan returns the concrete types of every tensor for the given inputs'
// shapes (building and caching the plan). It is what `inspect --shapes`
// and backends use to see shapes before running.
func (p *Program) Plan(inputs map[string]*ir.Tensor) (map[string]ops.Value, error) {
	pl, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	p.donePlan(pl)
	return pl.types, nil
}

// Steps returns the nodes the plan for the given inputs' shapes executes,
// in order: what is left after folding, with each fused region as its
// synthetic node (see Fusions).
func (p *Program) Steps(inputs map[string]*ir.Tensor) ([]*ir.Node, error) {
	pl, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	defer p.donePlan(pl)
	out := make([]*ir.Node, len(pl.steps))
	for i := range pl.steps {
		out[i] = pl.steps[i].node
	}
	return out, nil
}

// planFor returns the plan for the inputs, from the cache or built, checked
// against the memory budget (budget.go). The caller gives it back with
// donePlan. Of the weights held by reference (Options.ReferencedWeights)
// it reads back only those whose values the build computes with (folding,
// fusion matchers; weights.go): a plan that is only looked at (Plan,
// Steps, Fusions) leaves the others in their file. A caller that runs the
// plan reads its weights back first (restorePlanWeights; Run does).
func (p *Program) planFor(inputs map[string]*ir.Tensor) (*plan, error) {
	if _, err := p.ValidateInputs(inputs); err != nil {
		return nil, err
	}
	key, keyed := p.planKey(inputs)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("the program is closed")
	}
	if pl := p.plans.get(key); pl != nil {
		pl.refs++
		p.mu.Unlock()
		return pl, nil
	}
	p.mu.Unlock()
	// While weights are held by reference, the build may read some back
	// (valueReader), so it holds weightsMu for writing.
	p.weightsMu.RLock()
	readBack := len(p.referenced) > 0
	p.weightsMu.RUnlock()
	if readBack {
		p.weightsMu.Lock()
	} else {
		p.weightsMu.RLock()
	}
	pl, err := p.buildPlan(inputs, keyed, &valueReader{p: p, readBack: readBack})
	if readBack {
		p.weightsMu.Unlock()
	} else {
		p.weightsMu.RUnlock()
	}
	if err != nil {
		return nil, err
	}
	if err := p.settleWeights(pl); err != nil {
		pl.release(p.opts.Budget)
		return nil, err
	}
	pl.key = key
	pl.cost = pl.folded + planOverhead(pl)
	var missed []MissedAttention
	defer func() { p.logMisses(missed) }() // runs after the Unlock below
	p.mu.Lock()
	defer p.mu.Unlock()
	if other := p.plans.get(key); other != nil {
		// Built twice concurrently: keep the cached one.
		pl.release(p.opts.Budget)
		other.refs++
		return other, nil
	}
	if err := p.admit(pl); err != nil {
		pl.release(p.opts.Budget)
		return nil, err
	}
	pl.refs++
	p.plans.add(pl, p.opts.Budget)
	missed = p.newMisses(pl)
	return pl, nil
}

// donePlan gives back a plan planFor returned: an evicted (or never
// cached) plan's constants go back to the budget with its last user.
func (p *Program) donePlan(pl *plan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl.refs--
	if pl.refs == 0 && !pl.cached {
		pl.release(p.opts.Budget)
	}
}

// buildPlan infers concrete types for the inputs' shapes (and the values
// of the keyed inputs), folds every node computable ahead of time, assigns
// slots and computes last uses. Folding and the fusion matchers read the
// constants' data through values. Folded constants are reserved from the
// budget into the plan's folded bytes. The compile-time constants seed the
// types, but inference runs again over every node from the concrete input
// shapes and replaces each node output's value, so only the initializers
// carry over: nothing in a plan rests on the symbolic shapes (and their
// dim_param names) of compile time.
func (p *Program) buildPlan(inputs map[string]*ir.Tensor, keyed map[string]bool, values *valueReader) (*plan, error) {
	types := make(map[string]ops.Value, len(p.Types))
	for name, v := range p.Types {
		if v.Const != nil {
			types[name] = v
		}
	}
	for _, vi := range p.Model.Graph.Inputs {
		t := inputs[vi.Name]
		v := ops.Value{Type: ops.Known(t.DType, t.Shape)}
		if keyed[vi.Name] {
			v.Const = t.Clone() // the plan outlives the caller's tensor
		}
		types[vi.Name] = v
	}
	pl := &plan{inputs: map[string]int{}, consts: map[int]*ir.Tensor{}, types: types, released: map[string]bool{}}
	reserve := func(n int64) bool {
		if !p.opts.Budget.Reserve(n) {
			return false
		}
		pl.folded += n
		return true
	}
	// A folded intermediate that only folded nodes read (T5's bucket
	// chain of [S, S] steps) goes as soon as the last of them has folded,
	// not when the plan is built: the fold's peak is then a few such
	// tensors, not the whole chain (releaseUnread drops the rest).
	isOutput := map[string]bool{}
	for _, o := range p.Model.Graph.Outputs {
		isOutput[o.Name] = true
	}
	drop := func(name string) {
		if !isOutput[name] && inputs[name] == nil && p.dropFolded(pl, name) {
			pl.released[name] = true
		}
	}
	if err := p.infer(types, reserve, values, false, drop); err != nil {
		pl.release(p.opts.Budget)
		return nil, err
	}
	slots := map[string]int{}
	slotOf := func(name string) int {
		if s, ok := slots[name]; ok {
			return s
		}
		s := pl.nslots
		pl.nslots++
		slots[name] = s
		return s
	}
	for _, vi := range p.Model.Graph.Inputs {
		pl.inputs[vi.Name] = slotOf(vi.Name)
	}
	lastUse := map[int]int{} // slot → step index of last read
	for _, n := range p.Order {
		if pl.folds(n) {
			continue
		}
		st := step{index: p.Index[n], node: n, schema: p.Schemas[n], ctx: ops.Context{Opset: p.Opsets[n], Threads: p.opts.Threads}}
		for _, name := range n.Inputs {
			if name == "" {
				st.args = append(st.args, -1)
				continue
			}
			s := slotOf(name)
			if v := types[name]; v.Const != nil {
				pl.consts[s] = v.Const
			}
			st.args = append(st.args, s)
			lastUse[s] = len(pl.steps)
		}
		for _, name := range n.Outputs {
			if name == "" {
				st.outs = append(st.outs, -1)
				st.want = append(st.want, ir.TypeInfo{})
				continue
			}
			st.outs = append(st.outs, slotOf(name))
			st.want = append(st.want, types[name].Type)
		}
		pl.steps = append(pl.steps, st)
	}
	// Attention fusion (fuse.go) rewrites the steps; last uses follow.
	if !p.opts.NoFuse {
		pl.values = values
		p.dropBroadcastExpands(pl, types)
		p.dropFullScatters(pl, types)
		p.narrowPaddingTests(pl, types)
		p.gatherTransposed(pl, types)
		p.rewriteAttentionOps(pl, types)
		p.mergeScoreSums(pl, types)
		p.fuseAttention(pl, types)
		p.diagonalBiases(pl, types)
		p.fuseMatMuls(pl, types)
		p.fuseGelus(pl, types)
		p.fuseLayerNorms(pl, types)
		p.fuseRMSNorms(pl, types)
		p.fuseL2Norms(pl, types)
		p.fuseEpilogues(pl, types)
		p.markStripes(pl)
		pl.releaseEvaluated(p.opts.Budget)
		lastUse = stepLastUses(pl.steps)
		fused := make(map[*ir.Node]string, len(pl.fusions))
		for _, f := range pl.fusions {
			fused[f.Node] = f.Describe()
		}
		for i := range pl.steps {
			pl.steps[i].fused = fused[pl.steps[i].node]
		}
		pl.values = nil
		if err := values.failed(); err != nil {
			pl.release(p.opts.Budget)
			return nil, err
		}
	}
	p.releaseUnread(pl)
	// Every tensor a kept step creates must fit Options.MaxTensorBytes
	// (inference left this check to here: see infer).
	for _, st := range pl.steps {
		for k, name := range st.node.Outputs {
			if name == "" || k >= len(st.want) {
				continue
			}
			if err := p.checkSize(st.node, name, st.want[k]); err != nil {
				pl.release(p.opts.Budget)
				return nil, err
			}
		}
	}
	// Kernels may cache work on the model's constants (ops.Context.Memo).
	slotConst := map[int]bool{}
	for name, s := range slots {
		slotConst[s] = p.Types[name].Const != nil && types[name].Const != nil
	}
	for i := range pl.steps {
		st := &pl.steps[i]
		st.ctx.Memo = p.memoize
		st.ctx.Precision = p.opts.Precision
		st.ctx.Constant = make([]bool, len(st.args))
		for k, s := range st.args {
			st.ctx.Constant[k] = s >= 0 && slotConst[s]
		}
		st.dims = make([][]int, len(st.want))
		for k, w := range st.want {
			if dims, ok := w.Shape.Concrete(); w.RankKnown && ok {
				st.dims[k] = dims
			}
		}
		st.sameCast = st.node.OpType == "Cast" && isDefaultDomain(st.node) && len(st.node.Inputs) == 1 && len(st.want) == 1 &&
			st.want[0].DType != ir.Undefined && types[st.node.Inputs[0]].Type.DType == st.want[0].DType
	}
	keep := map[int]bool{}
	outNames := make([]string, 0, len(p.Model.Graph.Outputs))
	for _, out := range p.Model.Graph.Outputs {
		outNames = append(outNames, out.Name)
		s := slotOf(out.Name)
		if v := types[out.Name]; v.Const != nil {
			pl.consts[s] = v.Const
		}
		pl.outputs = append(pl.outputs, s)
		keep[s] = true
	}
	for i := range pl.steps {
		for _, s := range pl.steps[i].outs {
			if keep[s] {
				pl.steps[i].output = true
			}
		}
	}
	for s, k := range lastUse {
		if !keep[s] && pl.consts[s] == nil {
			pl.steps[k].free = append(pl.steps[k].free, s)
		}
	}
	pl.mem = planMemory(pl, lastUse, keep, outNames)
	return pl, nil
}

// folds reports whether the plan folded every output of n (its value held,
// or dropped once every reader had folded too).
func (pl *plan) folds(n *ir.Node) bool {
	for _, o := range n.Outputs {
		if o != "" && pl.types[o].Const == nil && !pl.released[o] {
			return false
		}
	}
	return true
}

// Run executes the program on named inputs and returns the graph outputs by
// name. The inputs are validated first; the plan for their shapes is built
// once and cached; intermediates are released after their last use. The
// inputs are never written. Without ro.ReuseOutputs the outputs are the
// caller's own (an output folded to a constant is a copy).
func (p *Program) Run(ctx context.Context, inputs map[string]*ir.Tensor, ro RunOptions) (map[string]*ir.Tensor, error) {
	pl, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	if err := p.restorePlanWeights(pl); err != nil { // the steps compute with them
		p.donePlan(pl)
		return nil, err
	}
	p.weightsMu.RLock() // no weight is released or restored mid-run
	defer p.weightsMu.RUnlock()
	defer p.donePlan(pl)
	vals := make([]*ir.Tensor, pl.nslots)
	for name, s := range pl.inputs {
		vals[s] = inputs[name]
	}
	for s, t := range pl.consts {
		vals[s] = t
	}
	ar := p.arenas.get()
	defer p.arenas.put(ar)
	ar.layout(pl.mem.sizes)
	if ar.scratchFn == nil { // an arena made outside arenaPool.get
		ar.scratchFn, ar.allocFn = ar.scratchFloats, ar.alloc
	}
	scratch, alloc := ar.scratchFn, ar.allocFn
	fresh := p.freshAlloc
	args := make([]*ir.Tensor, 0, 8)
	var kctx ops.Context // one per run: a kernel's context escapes
	var resBuf []*ir.Tensor
	for i := range pl.steps {
		st := &pl.steps[i]
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("run cancelled before %s: %w", st.describe(), err)
		}
		var start time.Time
		if profiling && ro.Profile != nil {
			start = time.Now()
		}
		if ro.OnNode != nil {
			ro.OnNode(st.index, st.node, st.fused)
		}
		args = args[:0]
		for _, s := range st.args {
			if s < 0 {
				args = append(args, nil)
			} else {
				args = append(args, vals[s])
			}
		}
		var res []*ir.Tensor
		var err error
		ar.startStep(i)
		kctx = st.ctx
		kctx.Scratch = scratch
		if !st.output || ro.ReuseOutputs {
			kctx.Alloc = alloc
		} else {
			kctx.Alloc = fresh
		}
		switch {
		case st.view, st.outputView && ro.ReuseOutputs:
			res, err = viewResult(st, args)
		case st.bufs != nil:
			res, err = runInto(st, &kctx, args, &pl.mem, ar, ro.ReuseOutputs, resBuf, ro.OutputInto)
			resBuf = res
		default:
			res, err = runKernel(st.schema, &kctx, st.node, args)
		}
		if err != nil {
			return nil, st.wrapErr(err)
		}
		for k, s := range st.outs {
			if s < 0 {
				continue
			}
			if err := checkResult(st.node, k, res[k], st.want[k].DType, st.dims[k]); err != nil {
				return nil, st.wrapErr(err)
			}
			vals[s] = res[k]
		}
		for _, s := range st.free {
			vals[s] = nil
		}
		if profiling && ro.Profile != nil {
			*ro.Profile = append(*ro.Profile, StepTime{Node: st.node, Start: start, Duration: time.Since(start)})
		}
	}
	out := make(map[string]*ir.Tensor, len(pl.outputs))
	for i, s := range pl.outputs {
		t := vals[s]
		if !ro.ReuseOutputs && pl.kept(s) {
			// The caller owns what Run returns: never the program's own
			// constants, nor the caller's inputs under another name.
			t = t.Clone()
		}
		out[p.Model.Graph.Outputs[i].Name] = t
	}
	return out, nil
}

// kept reports whether slot s holds a tensor that outlives a run: a
// constant of the plan, or a graph input.
func (pl *plan) kept(s int) bool {
	if _, ok := pl.consts[s]; ok {
		return true
	}
	for _, in := range pl.inputs {
		if in == s {
			return true
		}
	}
	return false
}

// checkResult verifies a kernel's output against the plan's inferred type
// (dims nil: its shape is not fully known), so that an inference/kernel
// disagreement is an error, not silent garbage.
func checkResult(n *ir.Node, k int, t *ir.Tensor, dt ir.DType, dims []int) error {
	if t == nil {
		return n.Errorf("internal error: kernel returned no tensor for output %d", k)
	}
	if dt != ir.Undefined && t.DType != dt {
		return n.Errorf("internal error: output %d is %v, inference said %v", k, t.DType, dt)
	}
	if dims != nil && !slices.Equal(dims, t.Shape) {
		return n.Errorf("internal error: output %d has shape [%s], inference said [%s]", k, ir.ShapeString(t.Shape), ir.ShapeString(dims))
	}
	return nil
}

// releaseMinBytes is the least a folded constant must hold for
// releaseUnread to drop it (the shape vectors folded from symbolic values
// were never reserved).
const releaseMinBytes = 64 << 10

// releaseUnread drops the constants folded for the plan that none of its
// steps reads and no graph output is, and gives their bytes back to the
// budget (unless Options.KeepFolded): the intermediates of a folded chain
// (T5's position buckets before the Gather, a causal mask's Trilu before
// its Cast), and what a fusion no longer reads (a ScatterND's index
// columns once it runs as an Identity). They stayed in the plan's types,
// and so in the plan's cost: T5's plan at S=1024 held 158 MiB for the
// 16 MiB its steps read, more than the plan cache holds, so it was built
// again on every run.
func (p *Program) releaseUnread(pl *plan) {
	if p.opts.KeepFolded {
		return
	}
	read, readSlots := map[string]bool{}, map[int]bool{}
	for _, st := range pl.steps {
		for _, in := range st.node.Inputs {
			read[in] = true
		}
		for _, s := range st.args {
			readSlots[s] = true
		}
	}
	for _, o := range p.Model.Graph.Outputs {
		read[o.Name] = true
	}
	for name := range pl.types {
		if !read[name] {
			p.dropFolded(pl, name)
		}
	}
	// pl.consts holds the steps' constant arguments so far (the graph
	// outputs' are set after this).
	for s := range pl.consts {
		if !readSlots[s] {
			delete(pl.consts, s)
		}
	}
}

// dropFolded drops the value of tensor name when the plan folded it (it is
// no constant of the program's own) and it holds at least releaseMinBytes,
// and gives its bytes back to the budget (not with Options.KeepFolded); it
// reports whether it did.
func (p *Program) dropFolded(pl *plan, name string) bool {
	v := pl.types[name]
	c := v.Const
	if c == nil || p.opts.KeepFolded || c == p.Types[name].Const {
		return false
	}
	n := ir.NumElements(c.Shape) * int64(max(c.DType.Size(), 1)) // as fold reserved it
	if n < releaseMinBytes {
		return false
	}
	v.Const = nil
	pl.types[name] = v
	p.opts.Budget.Release(n)
	pl.folded -= n
	return true
}
