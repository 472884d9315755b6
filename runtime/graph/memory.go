package graph

import (
	"sort"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Memory plan.
//
// Shapes are concrete per plan, so the size of every intermediate is known
// before running. planMemory gives each float32 output of a step whose
// schema has RunInto a buffer of an arena, reusing buffers by liveness: a
// buffer whose tensors are all dead before a step is free for that step's
// outputs (best fit, else the largest free one grows, else a new one); an
// elementwise step may write over an input that dies at it (Schema.InPlace).
// Reshape-like steps (Reshape, Squeeze, Unsqueeze, Flatten, Identity) run
// as views: their output shares the input's data, and keeps the input's
// buffer alive.
//
// The arena of a plan is allocated on its first run and reused by later
// runs (one run at a time; a concurrent run gets a fresh arena). It also
// backs the kernels' ops.Context.Scratch. A float32 graph output computed
// by a RunInto step gets a buffer of its own, used only when the caller
// sets RunOptions.ReuseOutputs; otherwise the step writes a newly
// allocated tensor, so a returned tensor is never overwritten by a later
// run. A reshape-like step producing a graph output copies, except that
// with ReuseOutputs one reshaping a graph input is a view of that input.
//
// Kernels without RunInto, and tensors of other types (bool masks, int64
// indices), allocate through ops.Context.Alloc, which the arena backs with
// one tensor per step and call, reused (zeroed) run after run: a causal
// model's mask chain no longer faults in megabytes of fresh memory per run.

// memPlan is the arena layout of a plan.
type memPlan struct {
	sizes []int // float32 elements of each arena buffer
	pool  chan *arena
}

// arena is one run's memory: the planned buffers, the scratch chunks that
// back ops.Context.Scratch, and the tensors that back ops.Context.Alloc.
type arena struct {
	bufs   [][]float32
	chunks [][]float32 // scratch, kept across steps and runs
	ci     int         // chunk serving the current step's next request
	off    int         // elements of chunks[ci] handed out this step
	// allocs[i] holds the tensors step i allocated through Alloc in the
	// last run, in call order; step and nalloc locate the next call.
	allocs       [][]*ir.Tensor
	step, nalloc int
}

// get returns an arena for one run.
func (m *memPlan) get() *arena {
	select {
	case a := <-m.pool:
		return a
	default:
		return &arena{bufs: make([][]float32, len(m.sizes))}
	}
}

// put returns an arena after a run.
func (m *memPlan) put(a *arena) {
	select {
	case m.pool <- a:
	default:
	}
}

// buffer returns arena buffer b, n elements long, allocating it on first use.
func (m *memPlan) buffer(a *arena, b, n int) []float32 {
	if a.bufs[b] == nil {
		a.bufs[b] = make([]float32, m.sizes[b])
	}
	return a.bufs[b][:n]
}

// startStep makes the whole scratch available to step i.
func (a *arena) startStep(i int) { a.ci, a.off, a.step, a.nalloc = 0, 0, i, 0 }

// alloc is ops.Context.Alloc for the running step: its k-th call returns
// the tensor the same call got in the previous run, zeroed, when type and
// size match, so that steps without RunInto (bool masks, int64 indices)
// reuse their memory too. A step whose outputs are graph outputs the
// caller keeps gets no alloc (see Program.Run).
func (a *arena) alloc(dt ir.DType, shape []int) *ir.Tensor {
	k := a.nalloc
	a.nalloc++
	for len(a.allocs) <= a.step {
		a.allocs = append(a.allocs, nil)
	}
	list := a.allocs[a.step]
	if k < len(list) {
		if t := list[k]; t.DType == dt && int64(t.Len()) == ir.NumElements(shape) {
			ir.ClearData(t.Data)
			return &ir.Tensor{DType: dt, Shape: append([]int{}, shape...), Data: t.Data}
		}
	}
	t := ir.NewTensor(dt, shape)
	if k < len(list) {
		list[k] = t
	} else {
		a.allocs[a.step] = append(list, t)
	}
	return t
}

// scratchFloats is ops.Context.Scratch: disjoint pieces of the scratch
// chunks, first fit in order; a request no chunk can serve adds a chunk.
// A kernel asks for the same sizes run after run, so after the first run
// no step allocates (nor touches fresh memory).
func (a *arena) scratchFloats(n int) []float32 {
	if n < 0 {
		return nil
	}
	for ; a.ci < len(a.chunks); a.ci, a.off = a.ci+1, 0 {
		if c := a.chunks[a.ci]; a.off+n <= len(c) {
			s := c[a.off : a.off+n : a.off+n]
			a.off += n
			return s
		}
	}
	a.chunks = append(a.chunks, make([]float32, n))
	a.ci, a.off = len(a.chunks)-1, n
	return a.chunks[a.ci]
}

// logical is one planned buffer: the tensors sharing it (an output and
// its views, or an in-place chain) and the span of steps it is live.
type logical struct {
	size      int
	def, last int
	phys      int
	output    bool // a graph output's: never shared
}

// planMemory marks view steps and assigns arena buffers to the outputs of
// steps that can run into them. lastUse maps slots to the last step
// reading them; keep holds the graph outputs' slots.
func planMemory(pl *plan, lastUse map[int]int, keep map[int]bool) memPlan {
	mem := memPlan{pool: make(chan *arena, 1)}
	bufOf := map[int]int{} // slot → logical buffer
	var bufs []*logical
	extend := func(b, slot, i int) {
		if l, ok := lastUse[slot]; ok && l > bufs[b].last {
			bufs[b].last = l
		}
		if i > bufs[b].last {
			bufs[b].last = i
		}
	}
	graphInput := make(map[int]bool, len(pl.inputs))
	for _, s := range pl.inputs {
		graphInput[s] = true
	}
	for i := range pl.steps {
		st := &pl.steps[i]
		if viewable(st, nil) && keep[st.outs[0]] && graphInput[st.args[0]] {
			// A graph output reshaping a graph input: with ReuseOutputs
			// the caller copies it before the inputs change, so it can
			// share the input's data (no arena buffer is involved).
			st.outputView = true
			continue
		}
		if viewable(st, keep) {
			st.view = true
			if b, ok := bufOf[st.args[0]]; ok {
				bufOf[st.outs[0]] = b
				extend(b, st.outs[0], i)
			}
			continue
		}
		if !intoable(st, keep) {
			continue
		}
		st.bufs = make([]int, len(st.outs))
		st.fresh = make([]bool, len(st.outs))
		for k, s := range st.outs {
			st.bufs[k] = -1
			if s < 0 {
				continue
			}
			n := elements(st.want[k])
			b := -1
			if k == 0 && !keep[s] {
				b = inPlaceBuffer(st, i, n, bufOf, bufs)
			}
			if b < 0 {
				b = len(bufs)
				bufs = append(bufs, &logical{size: n, def: i, last: i, phys: -1, output: keep[s]})
				st.fresh[k] = keep[s]
			}
			bufOf[s] = b
			extend(b, s, i)
			st.bufs[k] = b
		}
	}
	// Physical buffers by liveness, in step order.
	order := make([]int, len(bufs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return bufs[order[a]].def < bufs[order[b]].def })
	var busyUntil []int // physical buffer → last step of its current tensor
	for _, b := range order {
		l := bufs[b]
		if l.phys >= 0 {
			continue
		}
		if l.output {
			// A graph output's buffer outlives the run: its own.
			l.phys = len(mem.sizes)
			mem.sizes = append(mem.sizes, l.size)
			busyUntil = append(busyUntil, len(pl.steps))
			continue
		}
		best := -1
		for p, until := range busyUntil {
			if until >= l.def {
				continue
			}
			switch {
			case best < 0:
				best = p
			case mem.sizes[p] >= l.size && (mem.sizes[best] < l.size || mem.sizes[p] < mem.sizes[best]):
				best = p // the smallest that fits
			case mem.sizes[best] < l.size && mem.sizes[p] > mem.sizes[best]:
				best = p // none fits yet: the largest grows least
			}
		}
		if best < 0 {
			best = len(mem.sizes)
			mem.sizes = append(mem.sizes, 0)
			busyUntil = append(busyUntil, 0)
		}
		mem.sizes[best] = max(mem.sizes[best], l.size)
		busyUntil[best] = l.last
		l.phys = best
	}
	for i := range pl.steps {
		for k, b := range pl.steps[i].bufs {
			if b >= 0 {
				pl.steps[i].bufs[k] = bufs[b].phys
			}
		}
	}
	return mem
}

// inPlaceBuffer returns the buffer of an input step i may overwrite with
// its output 0 (n elements): one the schema allows, planned, of the same
// dtype and size, and dead after this step. -1 when there is none.
func inPlaceBuffer(st *step, i, n int, bufOf map[int]int, bufs []*logical) int {
	for _, k := range st.schema.InPlace {
		if k >= len(st.args) || st.args[k] < 0 {
			continue
		}
		b, ok := bufOf[st.args[k]]
		if !ok || bufs[b].size != n || bufs[b].last != i {
			continue
		}
		// The same tensor read twice by the step (x + x) is fine; a
		// different input sharing the buffer is not.
		shared := false
		for j, s := range st.args {
			if j != k && s >= 0 && s != st.args[k] {
				if ob, ok := bufOf[s]; ok && ob == b {
					shared = true
				}
			}
		}
		if !shared {
			return b
		}
	}
	return -1
}

// elements is the element count of a concrete type.
func elements(t ir.TypeInfo) int {
	dims, _ := t.Shape.Concrete()
	return ops.ShapeElems(dims)
}

// viewable reports whether a step can run as a view of its first input.
func viewable(st *step, keep map[int]bool) bool {
	n := st.node
	if !reshapeLike(n) || len(st.outs) != 1 || st.outs[0] < 0 || keep[st.outs[0]] || len(st.args) == 0 || st.args[0] < 0 {
		return false
	}
	w := st.want[0]
	_, ok := w.Shape.Concrete()
	return w.RankKnown && ok && w.DType != ir.Undefined
}

// intoable reports whether a step can run into planned buffers: the
// schema has RunInto and every output is a concrete float32 tensor.
func intoable(st *step, keep map[int]bool) bool {
	if st.schema.RunInto == nil {
		return false
	}
	any := false
	for k, s := range st.outs {
		if s < 0 {
			continue
		}
		w := st.want[k]
		if w.DType != ir.Float || !w.RankKnown {
			return false
		}
		if _, ok := w.Shape.Concrete(); !ok {
			return false
		}
		any = true
	}
	return any
}

// viewResult runs a reshape-like step as a view: the output shares the
// input's data under the planned shape.
func viewResult(st *step, args []*ir.Tensor) ([]*ir.Tensor, error) {
	in := args[0]
	if in == nil {
		return nil, st.node.Errorf("input 0 is missing")
	}
	w := st.want[0]
	dims, _ := w.Shape.Concrete()
	if in.DType != w.DType || int64(in.Len()) != ir.NumElements(dims) {
		// Not a pure reshape after all: let the kernel decide.
		return runKernel(st.schema, &st.ctx, st.node, args)
	}
	return []*ir.Tensor{{DType: in.DType, Shape: append([]int{}, dims...), Data: in.Data}}, nil
}

// runInto runs a step with RunInto into its arena buffers (a graph output
// into new memory unless reuse is set), turning a panic into an error
// naming the node.
func runInto(st *step, ctx *ops.Context, args []*ir.Tensor, mem *memPlan, a *arena, reuse bool) (res []*ir.Tensor, err error) {
	res = make([]*ir.Tensor, len(st.outs))
	for k, b := range st.bufs {
		if b < 0 {
			continue
		}
		dims, _ := st.want[k].Shape.Concrete()
		n := ops.ShapeElems(dims)
		var data []float32
		if st.fresh[k] && !reuse {
			data = make([]float32, n)
		} else {
			data = mem.buffer(a, b, n)
		}
		res[k] = &ir.Tensor{DType: ir.Float, Shape: append([]int{}, dims...), Data: data}
	}
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, st.node.Errorf("internal error in the %s kernel: %v", st.schema.Key(), r)
		}
	}()
	if err := st.schema.RunInto(ctx, st.node, args, res); err != nil {
		return nil, nodeError(st.node, err)
	}
	return res, nil
}
