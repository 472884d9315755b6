package graph

import (
	"container/list"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/budget"
)

// Memory budget.
//
// Every allocation of a Program is reserved from Options.Budget before it
// is made:
//
//   - Compile reserves the initializers and the constants it folds; Close
//     gives them back.
//   - A plan reserves the constants folded for its shapes while it is built;
//     the plan cache holds plans up to Options.PlanCacheBytes and evicts the
//     least recently used, giving their constants back.
//   - Before a plan first runs, what its runs allocate (arena buffers, the
//     outputs of steps without one, fresh graph outputs) is known from its
//     concrete shapes. A plan that cannot fit in what the budget has left
//     (plus what the idle arenas hold, which the run reuses) is refused
//     before anything is allocated, naming the node at which it stops
//     fitting and the bytes.
//   - During a run the arena reserves each buffer, scratch chunk and Alloc
//     tensor as it makes it (kernel working memory is only known then); a
//     refusal fails the step with the same kind of error.
//
// Shapes that depend on values, not only on shapes (ConstantOfShape of a
// shape read from an input), are unknown when planning by shapes, so such a
// plan's size would only show while it runs. Graph inputs whose values
// decide shapes (small integer inputs upstream of a value-dependent shape,
// findValueInputs) are therefore part of the plan key: their values become
// constants of the plan, every shape is concrete, and the check above sees
// the whole run.

// DefaultPlanCacheBytes bounds the plan cache when Options.PlanCacheBytes
// is 0.
const DefaultPlanCacheBytes int64 = 64 << 20

// maxValueElements bounds the value inputs whose values key plans.
const maxValueElements = 64

// reserveInitializers reserves the model's initializers from the budget.
func (p *Program) reserveInitializers() error {
	var n int64
	for _, t := range p.Model.Graph.Initializers {
		n += tensorBytes(t)
	}
	if !p.opts.Budget.Reserve(n) {
		return p.opts.Budget.Exceeded(fmt.Sprintf("holding the model's %d initializers", len(p.Model.Graph.Initializers)), n, p.opts.Budget.Left())
	}
	p.reserved += n
	return nil
}

// reserveConst reserves a constant folded at compile time.
func (p *Program) reserveConst(n int64) bool {
	if !p.opts.Budget.Reserve(n) {
		return false
	}
	p.reserved += n
	return true
}

// tensorBytes is a tensor's size, strings counted by their bytes.
func tensorBytes(t *ir.Tensor) int64 {
	n := t.Bytes()
	if s, ok := t.Data.([]string); ok {
		for _, v := range s {
			n += int64(len(v))
		}
	}
	return n
}

// Close gives everything the program reserved back to the budget: its
// initializers and constants, its cached plans and idle arenas. Runs in
// flight give their arenas back when they end. The program must not be
// run after Close.
func (p *Program) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.plans.clear(p.opts.Budget)
	p.mu.Unlock()
	p.arenas.mu.Lock()
	p.arenas.closed = true
	p.arenas.mu.Unlock()
	p.arenas.releaseIdle()
	p.opts.Budget.Release(p.reserved + p.memoBytes.Swap(0))
	p.reserved = 0
}

// ReleaseIdle drops the memory idle runs keep for the next run (arena
// buffers, scratch, allocations) and returns how many bytes it held. A
// backend calls it when no run has come for a while, so that one large
// request does not pin its memory; the next run allocates again.
func (p *Program) ReleaseIdle() int64 {
	return p.arenas.releaseIdle()
}

// findValueInputs lists the small integer graph inputs whose values decide
// shapes: those upstream of a tensor whose symbolic type has an unknown
// rank or a dim that is neither a number nor a symbol (computed from
// values).
func (p *Program) findValueInputs() []string {
	producer := map[string]*ir.Node{}
	for _, n := range p.Order {
		for _, o := range n.Outputs {
			producer[o] = n
		}
	}
	isInput := map[string]*ir.ValueInfo{}
	for _, vi := range p.Model.Graph.Inputs {
		isInput[vi.Name] = vi
	}
	var todo []string
	for _, n := range p.Order {
		for _, o := range n.Outputs {
			if o != "" && valueDependent(p.Types[o].Type) {
				todo = append(todo, n.Inputs...)
				break
			}
		}
	}
	seen := map[string]bool{}
	var out []string
	for len(todo) > 0 {
		name := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if vi := isInput[name]; vi != nil {
			if dt := vi.Type.DType; dt == ir.Int64 || dt == ir.Int32 {
				out = append(out, name)
			}
			continue
		}
		if n := producer[name]; n != nil {
			todo = append(todo, n.Inputs...)
		}
	}
	slices.Sort(out)
	return out
}

// valueDependent reports whether a symbolic type has an unknown rank or an
// unknown dim that is not a named symbol.
func valueDependent(t ir.TypeInfo) bool {
	if t.DType == ir.Undefined {
		return false
	}
	if !t.RankKnown {
		return true
	}
	for _, d := range t.Shape {
		if !d.Known() && d.Param == "" {
			return true
		}
	}
	return false
}

// valueKey is the part of a plan key holding the value inputs' values,
// and the inputs whose values the plan may fold (small enough to key by).
func (p *Program) valueKey(inputs map[string]*ir.Tensor) (string, map[string]bool) {
	if len(p.valueInputs) == 0 {
		return "", nil
	}
	var b strings.Builder
	keyed := map[string]bool{}
	for _, name := range p.valueInputs {
		t := inputs[name]
		vals, err := t.AsInt64s()
		if err != nil || len(vals) > maxValueElements {
			b.WriteString("*;")
			continue
		}
		keyed[name] = true
		for _, v := range vals {
			b.WriteString(strconv.FormatInt(v, 10))
			b.WriteByte(',')
		}
		b.WriteByte(';')
	}
	return b.String(), keyed
}

// planCache holds plans by key, least recently used last, within a byte
// bound (and maxCachedPlans).
type planCache struct {
	limit int64
	bytes int64
	lru   *list.List // of *plan, most recent first
	byKey map[string]*list.Element
}

func newPlanCache(limit int64) planCache {
	if limit <= 0 {
		limit = DefaultPlanCacheBytes
	}
	return planCache{limit: limit, lru: list.New(), byKey: map[string]*list.Element{}}
}

// get returns the plan cached under key, marking it recently used.
func (c *planCache) get(key string) *plan {
	e := c.byKey[key]
	if e == nil {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*plan)
}

// add caches pl, evicting least recently used plans beyond the bounds (a
// plan larger than the whole bound is not cached).
func (c *planCache) add(pl *plan, b *budget.Budget) {
	if pl.cost > c.limit {
		return
	}
	pl.cached = true
	c.byKey[pl.key] = c.lru.PushFront(pl)
	c.bytes += pl.cost
	for c.bytes > c.limit || c.lru.Len() > maxCachedPlans {
		c.evict(c.lru.Back().Value.(*plan), b)
	}
}

// evictFor evicts least recently used plans other than keep until need
// bytes are left in the budget, and reports whether they are.
func (c *planCache) evictFor(need int64, keep *plan, b *budget.Budget) bool {
	for e := c.lru.Back(); e != nil && b.Left() < need; {
		prev := e.Prev()
		if pl := e.Value.(*plan); pl != keep {
			c.evict(pl, b)
		}
		e = prev
	}
	return b.Left() >= need
}

// evict drops pl from the cache; its constants go back to the budget once
// no run uses it.
func (c *planCache) evict(pl *plan, b *budget.Budget) {
	e := c.byKey[pl.key]
	if e == nil {
		return
	}
	c.lru.Remove(e)
	delete(c.byKey, pl.key)
	c.bytes -= pl.cost
	pl.cached = false
	if pl.refs == 0 {
		pl.release(b)
	}
}

// clear evicts every plan.
func (c *planCache) clear(b *budget.Budget) {
	for c.lru.Len() > 0 {
		c.evict(c.lru.Back().Value.(*plan), b)
	}
}

// release gives the plan's folded constants back to the budget (once).
func (pl *plan) release(b *budget.Budget) {
	b.Release(pl.folded)
	pl.folded = 0
}

// planOverhead estimates a plan's bookkeeping (steps, types, slots) for the
// cache's byte bound.
func planOverhead(pl *plan) int64 {
	return int64(256*len(pl.steps) + 128*len(pl.types) + 64*pl.nslots)
}

// typeBytes is the size of a concrete tensor type (0 when not concrete).
func typeBytes(t ir.TypeInfo) int64 {
	dims, ok := t.Shape.Concrete()
	if !t.RankKnown || !ok {
		return 0
	}
	n := ir.NumElements(dims)
	if n < 0 {
		return 0
	}
	return n * int64(max(t.DType.Size(), 1))
}

// needs returns, for each step of the plan, the bytes its runs allocate up
// to and including that step: arena buffers when first used, and the
// outputs of steps that allocate (kernels without RunInto, tensors other
// than float32, graph outputs). Views allocate nothing.
func (pl *plan) needs() []int64 {
	upTo := make([]int64, len(pl.steps))
	seen := make([]bool, len(pl.mem.sizes))
	var total int64
	for i := range pl.steps {
		st := &pl.steps[i]
		switch {
		case st.view || st.outputView:
		case st.bufs != nil:
			for _, b := range st.bufs {
				if b >= 0 && !seen[b] {
					seen[b] = true
					total += 4 * int64(pl.mem.sizes[b])
				}
			}
		default:
			for k, s := range st.outs {
				if s >= 0 {
					total += typeBytes(st.want[k])
				}
			}
		}
		upTo[i] = total
	}
	return upTo
}

// admit checks, before the plan first runs, that its runs fit in the
// budget: what the budget has left plus what the idle arenas hold (the run
// reuses it), after evicting other cached plans if needed. The error names
// the step at which the plan stops fitting, its largest output and bytes.
// The caller holds p.mu.
func (p *Program) admit(pl *plan) error {
	b := p.opts.Budget
	if b.Limit() <= 0 || len(pl.steps) == 0 {
		return nil
	}
	upTo := pl.needs()
	total := upTo[len(upTo)-1]
	idle := p.arenas.idleBytes()
	if total <= b.Left()+idle || p.plans.evictFor(total-idle, pl, b) {
		return nil
	}
	avail := b.Left() + idle
	i := 0
	for i < len(upTo)-1 && upTo[i] <= avail {
		i++
	}
	st := &pl.steps[i]
	before := int64(0)
	if i > 0 {
		before = upTo[i-1]
	}
	var outs []string
	for k, s := range st.outs {
		if s >= 0 && k < len(st.node.Outputs) && typeBytes(st.want[k]) > 0 {
			w := st.want[k]
			dims, _ := w.Shape.Concrete()
			outs = append(outs, fmt.Sprintf("%q %v[%s]", st.node.Outputs[k], w.DType, ir.ShapeString(dims)))
		}
	}
	what := "its outputs"
	if len(outs) == 1 {
		what = "output " + outs[0]
	}
	left := max(avail-before, 0)
	err := budget.Errorf("%s: %s needs %s; %s has %s left after the %s the steps before it need (the plan needs %s in all)",
		st.describe(), what, budget.FormatExact(upTo[i]-before), b.Describe(), budget.Format(left), budget.Format(before), budget.Format(total))
	return err
}

// freshAlloc is ops.Context.Alloc for the steps writing graph outputs the
// caller keeps: new memory, which leaves the program with the result, so
// it is checked against what the budget has left but not reserved.
func (p *Program) freshAlloc(dt ir.DType, shape []int) *ir.Tensor {
	n := ir.NumElements(shape)
	if b := p.opts.Budget; n >= 0 && dt.Known() && b.Limit() > 0 {
		if need := n * int64(max(dt.Size(), 1)); need > b.Left() {
			panic(memoryError{b.Exceeded(fmt.Sprintf("output %v[%s]", dt, ir.ShapeString(shape)), need, b.Left())})
		}
	}
	return ir.NewTensor(dt, shape)
}
