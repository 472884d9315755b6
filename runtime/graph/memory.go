package graph

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/attnrun/attnrun/internal/hugepages"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/budget"
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
// run. A reshape-like step (or a chain of them) producing a graph output
// from a float32 tensor that a RunInto step computes and nothing else
// reads (GPT-2's Gemm → Reshape at the end of attention) is a view: the
// producer writes straight into the output's buffer of its own
// (outputViews). With
// ReuseOutputs one reshaping a graph input is a view of that input. Any
// other reshape-like step producing a graph output copies.
//
// Kernels without RunInto, and tensors of other types (bool masks, int64
// indices), allocate through ops.Context.Alloc, which the arena backs with
// one tensor per step and call, reused (zeroed) run after run: a causal
// model's mask chain no longer faults in megabytes of fresh memory per run.
//
// Buffers and scratch chunks of 2 MiB or more lie in transparent huge pages
// where the kernel gives them (hugepages.Floats): the products that read
// and write them miss the TLB less.

// memPlan is the arena layout of a plan.
type memPlan struct {
	sizes []int // float32 elements of each arena buffer
}

// arenaAge is how many runs an arena keeps a buffer, scratch chunk or
// allocation that no run used: a loop over one shape reuses everything,
// while a sweep over shapes drops what the old shapes needed.
const arenaAge = 4

// maxIdleArenas bounds the arenas a Program keeps between runs (one per
// concurrent run is made; the others are dropped when they come back).
const maxIdleArenas = 1

// arenaPool holds a Program's idle arenas. Arenas are shared by every plan
// of the Program: a run takes one and gives it back, so memory is reused
// across input shapes and bounded by the largest run, not by the number of
// cached plans.
type arenaPool struct {
	mu     sync.Mutex
	idle   []*arena
	closed bool
	budget *budget.Budget
}

// get returns an arena for one run.
func (ap *arenaPool) get() *arena {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if n := len(ap.idle); n > 0 {
		a := ap.idle[n-1]
		ap.idle = ap.idle[:n-1]
		a.run++
		return a
	}
	a := &arena{budget: ap.budget, run: 1}
	a.scratchFn, a.allocFn = a.scratchFloats, a.alloc
	return a
}

// collectAfter is how much memory an arena may let go of before it runs
// the garbage collector: a sweep over growing shapes regrows buffers, and
// left to the collector's pacing the dropped ones would double the heap
// before their memory is reused. regrowHeadroom: a regrown buffer gets
// 1/regrowHeadroom more than it needs.
const (
	collectAfter   = 16 << 20
	regrowHeadroom = 8
)

// drop records that the arena let go of n bytes (no longer referenced), and
// collects once enough has been dropped, so that the next allocations reuse
// that memory instead of growing the heap.
func (a *arena) drop(n int64) {
	a.dropped += n
	if a.dropped >= collectAfter {
		a.dropped = 0
		runtime.GC()
	}
}

// put takes an arena back after a run, dropping what it has not used for
// arenaAge runs; beyond maxIdleArenas, or once the Program is closed, the
// whole arena is dropped.
func (ap *arenaPool) put(a *arena) {
	a.trim()
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if ap.closed || len(ap.idle) >= maxIdleArenas {
		a.releaseAll()
		return
	}
	ap.idle = append(ap.idle, a)
}

// idleBytes is the memory the idle arenas hold (a run reuses it).
func (ap *arenaPool) idleBytes() int64 {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	var n int64
	for _, a := range ap.idle {
		n += a.bytes
	}
	return n
}

// releaseIdle drops the idle arenas and returns the bytes they held.
func (ap *arenaPool) releaseIdle() int64 {
	ap.mu.Lock()
	idle := ap.idle
	ap.idle = nil
	ap.mu.Unlock()
	var n int64
	for _, a := range idle {
		n += a.bytes
		a.releaseAll()
	}
	return n
}

// arena is one run's memory: the planned buffers, the scratch chunks that
// back ops.Context.Scratch, and the tensors that back ops.Context.Alloc.
// Everything it holds is reserved from the budget (nil: no budget); an
// allocation the budget refuses panics with a memoryError, which the step
// running the kernel turns into its error.
type arena struct {
	budget *budget.Budget
	bytes  int64 // reserved from budget
	run    int   // the run this arena serves (1, 2, ...)

	// dropped counts the bytes of memory the arena let go of (buffers
	// regrown, chunks and allocations trimmed) since the last collection.
	dropped int64
	// slot maps the running plan's buffers to bufs (layout); laidOut is
	// the plan sizes it was made for.
	slot    []int
	laidOut []int

	bufs     [][]float32
	bufRun   []int       // the last run that used each buffer
	chunks   [][]float32 // scratch, kept across steps and runs
	chunkRun []int
	ci       int // chunk serving the current step's next request
	off      int // elements of chunks[ci] handed out this step
	// allocs[i] holds the tensors step i allocated through Alloc in the
	// last run, in call order; step and nalloc locate the next call.
	allocs       [][]*ir.Tensor
	allocRun     []int
	step, nalloc int
	// scratchFn and allocFn are scratchFloats and alloc as funcs for
	// ops.Context, made once per arena rather than once per run.
	scratchFn func(int) []float32
	allocFn   func(ir.DType, []int) *ir.Tensor
}

// memoryError is the panic value of an arena allocation the budget
// refuses; runKernel and runInto recover it as the step's error.
type memoryError struct{ err error }

// reserve takes n bytes from the budget for the arena.
func (a *arena) reserve(n int64) bool {
	if !a.budget.Reserve(n) {
		return false
	}
	a.bytes += n
	return true
}

// release gives n of the arena's bytes back to the budget.
func (a *arena) release(n int64) {
	a.budget.Release(n)
	a.bytes -= n
}

// mustReserve is reserve for allocations that cannot return an error
// (ops.Context.Scratch and Alloc): it panics with a memoryError.
func (a *arena) mustReserve(n int64, what string) {
	if !a.reserve(n) {
		panic(memoryError{a.budget.Exceeded(what, n, a.budget.Left())})
	}
}

// layout maps a plan's buffers (their sizes, in float32s) onto the arena's
// slices for a run: each, largest first, gets the smallest free slice that
// holds it, else the largest free one (regrown), else a new one. Plans of
// other shapes thus reuse the same slices whatever their buffer numbering,
// and the arena stays near what its largest plan needs. A run of the same
// plan as the last keeps the last mapping.
func (a *arena) layout(sizes []int) {
	if len(sizes) == len(a.laidOut) && (len(sizes) == 0 || &sizes[0] == &a.laidOut[0]) {
		return
	}
	a.laidOut = sizes
	a.slot = make([]int, len(sizes))
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return sizes[order[i]] > sizes[order[j]] })
	taken := make([]bool, len(a.bufs))
	for _, b := range order {
		best := -1
		for k, buf := range a.bufs {
			if taken[k] {
				continue
			}
			c, bc := cap(buf), 0
			if best >= 0 {
				bc = cap(a.bufs[best])
			}
			switch {
			case best < 0:
				best = k
			case c >= sizes[b] && (bc < sizes[b] || c < bc):
				best = k // the smallest that holds it
			case bc < sizes[b] && c > bc:
				best = k // none holds it yet: the largest
			}
		}
		if best < 0 {
			best = len(a.bufs)
			a.bufs, a.bufRun = append(a.bufs, nil), append(a.bufRun, 0)
			taken = append(taken, false)
		}
		taken[best] = true
		a.slot[b] = best
	}
}

// buffer returns the plan's arena buffer b (see layout), n elements long,
// making it hold size elements (the plan's size for b) first if it is
// smaller.
func (a *arena) buffer(b, size, n int) ([]float32, error) {
	if b >= len(a.slot) {
		return nil, fmt.Errorf("internal error: arena buffer %d of %d laid out", b, len(a.slot))
	}
	b = a.slot[b]
	a.bufRun[b] = a.run
	if have := cap(a.bufs[b]); have < size {
		if have > 0 {
			// Regrowing (shapes change between runs): with headroom, so
			// that a sweep over growing shapes regrows rarely.
			size = max(size, have+have/regrowHeadroom)
		}
		if !a.reserve(4 * int64(size-have)) {
			return nil, a.budget.Exceeded(fmt.Sprintf("an arena buffer of %d float32s", size), 4*int64(size-have), a.budget.Left())
		}
		a.bufs[b] = nil
		a.drop(4 * int64(have))
		a.bufs[b] = hugepages.Floats(size)
	}
	return a.bufs[b][:n], nil
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
		a.allocs, a.allocRun = append(a.allocs, nil), append(a.allocRun, 0)
	}
	a.allocRun[a.step] = a.run
	list := a.allocs[a.step]
	n := ir.NumElements(shape)
	if k < len(list) {
		if t := list[k]; t.DType == dt && int64(t.Len()) == n {
			ir.ClearData(t.Data)
			return &ir.Tensor{DType: dt, Shape: append([]int{}, shape...), Data: t.Data}
		}
	}
	if n >= 0 && dt.Known() {
		a.mustReserve(n*int64(max(dt.Size(), 1)), fmt.Sprintf("a %v[%s] tensor", dt, ir.ShapeString(shape)))
	}
	if k < len(list) {
		a.release(list[k].Bytes())
		old := list[k].Bytes()
		list[k] = nil
		a.drop(old)
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
	start, fresh := a.ci, a.off == 0
	for ; a.ci < len(a.chunks); a.ci, a.off = a.ci+1, 0 {
		if c := a.chunks[a.ci]; a.off+n <= len(c) {
			s := c[a.off : a.off+n : a.off+n]
			a.off += n
			a.chunkRun[a.ci] = a.run
			return s
		}
	}
	// No chunk can serve it. Regrow the largest chunk this run has not
	// used (what the shapes of earlier runs needed), if one is past
	// every piece this step has handed out; else add a chunk.
	re := -1
	for i := start; i < len(a.chunks); i++ {
		if (i > start || fresh) && a.chunkRun[i] != a.run && (re < 0 || len(a.chunks[i]) > len(a.chunks[re])) {
			re = i
		}
	}
	size := n
	if re >= 0 {
		old := len(a.chunks[re])
		size = max(n, old+old/regrowHeadroom)
		a.mustReserve(4*int64(size-old), fmt.Sprintf("%d float32s of working memory", n))
		a.chunks[re] = nil
		a.drop(4 * int64(old))
		a.chunks[re], a.chunkRun[re] = hugepages.Floats(size), a.run
		a.ci, a.off = re, n
		return a.chunks[re][:n:n]
	}
	a.mustReserve(4*int64(size), fmt.Sprintf("%d float32s of working memory", n))
	a.chunks, a.chunkRun = append(a.chunks, hugepages.Floats(size)), append(a.chunkRun, a.run)
	a.ci, a.off = len(a.chunks)-1, n
	return a.chunks[a.ci][:n:n]
}

// trim drops the buffers, scratch chunks and allocations no run has used
// for arenaAge runs.
func (a *arena) trim() {
	old := a.run - arenaAge
	for b := range a.bufs {
		if a.bufs[b] != nil && a.bufRun[b] <= old {
			a.release(4 * int64(cap(a.bufs[b])))
			dropped := 4 * int64(cap(a.bufs[b]))
			a.bufs[b] = nil
			a.drop(dropped)
		}
	}
	kept, keptRun := a.chunks[:0], a.chunkRun[:0]
	for i, c := range a.chunks {
		if a.chunkRun[i] <= old {
			a.release(4 * int64(len(c)))
			a.drop(4 * int64(len(c)))
			continue
		}
		kept, keptRun = append(kept, c), append(keptRun, a.chunkRun[i])
	}
	clear(a.chunks[len(kept):])
	a.chunks, a.chunkRun = kept, keptRun
	for i, list := range a.allocs {
		if list != nil && a.allocRun[i] <= old {
			for _, t := range list {
				a.release(t.Bytes())
			}
			a.allocs[i] = nil
		}
	}
}

// releaseAll drops everything the arena holds.
func (a *arena) releaseAll() {
	a.budget.Release(a.bytes)
	a.bytes = 0
	a.bufs, a.bufRun, a.chunks, a.chunkRun, a.allocs, a.allocRun = nil, nil, nil, nil, nil, nil
	a.slot, a.laidOut = nil, nil
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
// reading them; keep holds the graph outputs' slots, outNames the graph
// outputs' names (in pl.outputs' order).
func planMemory(pl *plan, lastUse map[int]int, keep map[int]bool, outNames []string) memPlan {
	var mem memPlan
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
	viewed := outputViews(pl, keep, graphInput)
	for i := range pl.steps {
		st := &pl.steps[i]
		if viewable(st, nil) && keep[st.outs[0]] && graphInput[st.args[0]] {
			// A graph output reshaping a graph input: with ReuseOutputs
			// the caller copies it before the inputs change, so it can
			// share the input's data (no arena buffer is involved).
			st.outputView = true
			continue
		}
		if viewable(st, keep) || viewable(st, nil) && viewed[st.args[0]] {
			// A view of an intermediate's buffer; of the output buffer
			// its producer was given when the view is a graph output.
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
			output := keep[s] || viewed[s] // memory Run returns
			b := -1
			if k == 0 && !output {
				b = inPlaceBuffer(st, i, n, bufOf, bufs)
			}
			if b < 0 {
				b = len(bufs)
				bufs = append(bufs, &logical{size: n, def: i, last: i, phys: -1, output: output})
				st.fresh[k] = output
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
	nameOutputs(pl, viewed, outNames)
	return mem
}

// nameOutputs sets step.outName for the fresh outputs of the steps that
// run into buffers: the graph output each is, or that a view step makes of
// it (viewed, see outputViews).
func nameOutputs(pl *plan, viewed map[int]bool, outNames []string) {
	name := make(map[int]string, len(pl.outputs)) // slot → graph output
	for i, s := range pl.outputs {
		if _, dup := name[s]; !dup {
			name[s] = outNames[i]
		}
	}
	for i := len(pl.steps) - 1; i >= 0; i-- { // back along chains of views
		if st := &pl.steps[i]; st.view && viewed[st.args[0]] {
			if n, ok := name[st.outs[0]]; ok {
				name[st.args[0]] = n
			}
		}
	}
	for i := range pl.steps {
		st := &pl.steps[i]
		if st.fresh == nil {
			continue
		}
		st.outName = make([]string, len(st.outs))
		for k, s := range st.outs {
			if s >= 0 && st.fresh[k] {
				st.outName[k] = name[s]
			}
		}
	}
}

// outputViews returns the slots of the tensors that a reshape-like step
// (or a chain of them) turns into a graph output and that are better
// computed in that output's place: float32, computed by a RunInto step of
// the plan, and read by that step alone (neither graph output, graph input
// nor constant), with the chain's intermediate tensors. Their
// producer gets a buffer of a graph output's (new memory per run unless
// RunOptions.ReuseOutputs) and the reshape-like step runs as a view of it,
// so that the output is neither copied nor zeroed. Any other tensor keeps
// its arena buffer, which a graph output must never share.
func outputViews(pl *plan, keep, graphInput map[int]bool) map[int]bool {
	var viewed map[int]bool
	var producer map[int]*step // slot → the step computing it
	var readers map[int]int    // slot → inputs reading it, over all steps
	for i := range pl.steps {
		st := &pl.steps[i]
		if !viewable(st, nil) || !keep[st.outs[0]] {
			continue
		}
		if producer == nil {
			producer, readers = map[int]*step{}, map[int]int{}
			for j := range pl.steps {
				for _, s := range pl.steps[j].args {
					readers[s]++
				}
				for _, s := range pl.steps[j].outs {
					producer[s] = &pl.steps[j]
				}
			}
		}
		// Walk back through a chain of reshape-like steps (each the only
		// reader of the one before) to the step that computes the data.
		var chain []int
		s := st.args[0]
		src := producer[s]
		for src != nil && viewable(src, keep) && len(chain) < len(pl.steps) && sole(s, keep, graphInput, pl, readers) {
			chain = append(chain, s)
			s = src.args[0]
			src = producer[s]
		}
		if src == nil || !sole(s, keep, graphInput, pl, readers) || !intoable(src, keep) {
			continue // computed elsewhere than in a buffer
		}
		k := slices.Index(src.outs, s)
		if w := st.want[0]; w.DType != ir.Float || elements(w) != elements(src.want[k]) {
			continue // not a pure reshape: the kernel decides (viewResult)
		}
		if viewed == nil {
			viewed = map[int]bool{}
		}
		viewed[s] = true
		for _, c := range chain {
			viewed[c] = true
		}
	}
	return viewed
}

// sole reports whether slot s is an intermediate tensor read by one step
// input alone: neither graph output, graph input nor constant.
func sole(s int, keep, graphInput map[int]bool, pl *plan, readers map[int]int) bool {
	return !keep[s] && !graphInput[s] && pl.consts[s] == nil && readers[s] == 1
}

// inPlaceBuffer returns the buffer of an input step i may overwrite with
// its output 0 (n elements): one the schema allows, planned, of the same
// dtype and size, dead after this step, and not a graph output's (with
// RunOptions.ReuseOutputs that buffer is what Run returns). -1 when there
// is none.
func inPlaceBuffer(st *step, i, n int, bufOf map[int]int, bufs []*logical) int {
	for _, k := range st.schema.InPlace {
		if k >= len(st.args) || st.args[k] < 0 {
			continue
		}
		b, ok := bufOf[st.args[k]]
		if !ok || bufs[b].output || bufs[b].size != n || bufs[b].last != i {
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

// viewable reports whether a step can run as a view of its first input:
// a reshape, or a Cast to the input's own type.
func viewable(st *step, keep map[int]bool) bool {
	n := st.node
	if !reshapeLike(n) && !st.sameCast || len(st.outs) != 1 || st.outs[0] < 0 || keep[st.outs[0]] || len(st.args) == 0 || st.args[0] < 0 {
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
// into the memory into gives for it, else new memory unless reuse is set),
// turning a panic into an error naming the node.
//
// res is the caller's buffer for the results (reused across steps: the
// caller keeps the tensors, not the slice); it grows when too short.
func runInto(st *step, ctx *ops.Context, args []*ir.Tensor, mem *memPlan, a *arena, reuse bool, res []*ir.Tensor, into func(string, []int) []float32) (_ []*ir.Tensor, err error) {
	if cap(res) < len(st.outs) {
		res = make([]*ir.Tensor, len(st.outs))
	}
	res = res[:len(st.outs)]
	clear(res)
	for k, b := range st.bufs {
		if b < 0 {
			continue
		}
		dims := st.dims[k]
		n := ops.ShapeElems(dims)
		var data []float32
		if into != nil && st.fresh[k] && st.outName[k] != "" {
			if data = into(st.outName[k], dims); data != nil && len(data) != n {
				return nil, st.node.Errorf("output %d: internal error: %d elements given for output %q of shape [%s]", k, len(data), st.outName[k], ir.ShapeString(dims))
			}
		}
		switch {
		case data != nil: // the caller's memory (RunOptions.OutputInto)
		case st.fresh[k] && !reuse:
			data = make([]float32, n)
		default:
			if data, err = a.buffer(b, mem.sizes[b], n); err != nil {
				return nil, st.node.Errorf("output %d: %w", k, err)
			}
		}
		res[k] = &ir.Tensor{DType: ir.Float, Shape: append([]int{}, dims...), Data: data}
	}
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, kernelPanic(st.schema, st.node, r)
		}
	}()
	if err := st.schema.RunInto(ctx, st.node, args, res); err != nil {
		return nil, nodeError(st.node, err)
	}
	return res, nil
}
