package graph

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Weights held once. A FusedMatMul step packs its constant B operand for
// the micro-kernel (ops.PackFusedMatMulB), and from then on no run reads
// B's float32 data. With Options.Weights set, a plan's build packs those
// weights (not the first run) and hands the float32 data of every weight
// whose only readers are packed FusedMatMul B operands to the releaser:
// the heap copy becomes garbage, a mapped weight's pages are dropped. A
// weight any plan reads otherwise (a graph output, a node of another op,
// Shape or folding, the unfused path, a view the GEMM gathers) is pinned:
// restored if it was released, never released again. Releasing and
// restoring happen with no run in flight (weightsMu).

// WeightRestorer reads the float32 data of a released weight
// (ir.Tensor.Released) back from its file (onnx.WeightStore).
type WeightRestorer interface {
	// Restore makes a released t's data readable again.
	Restore(t *ir.Tensor) error
}

// WeightReleaser releases and restores the float32 data of a model's
// external weights (onnx.WeightStore).
type WeightReleaser interface {
	WeightRestorer
	// Release drops t's data (ir.Tensor.Released, or its pages) and
	// returns how many bytes of memory that gave back.
	Release(t *ir.Tensor) (int64, error)
}

// packableWeightOps are the ops a weight may feed and still be released:
// those the FusedMatMul rewrite absorbs, whose inference reads shapes only.
var packableWeightOps = map[string]bool{"MatMul": true, "Gemm": true, "Transpose": true, ops.FusedMatMulOp: true}

// settleWeights packs the plan's FusedMatMul weights and releases or
// restores weights as the comment above says.
func (p *Program) settleWeights(pl *plan) error {
	if p.opts.Weights == nil {
		return nil
	}
	p.weightsMu.Lock()
	defer p.weightsMu.Unlock()
	if p.weightUsers == nil {
		p.weightUsers = p.findWeightCandidates()
	}
	uses := map[*ir.Tensor][]*step{} // the FusedMatMul steps reading t as B
	plain := map[*ir.Tensor]bool{}
	for i := range pl.steps {
		st := &pl.steps[i]
		for k, s := range st.args {
			t := pl.consts[s]
			if s < 0 || t == nil || !p.weightUsers[t] {
				continue
			}
			if k == 1 && st.node.Domain == ops.DomainAttnrun && st.node.OpType == ops.FusedMatMulOp {
				uses[t] = append(uses[t], st)
			} else {
				plain[t] = true
			}
		}
	}
	for _, s := range pl.outputs {
		if t := pl.consts[s]; t != nil && p.weightUsers[t] {
			plain[t] = true
		}
	}
	for t := range plain {
		if err := p.pinWeight(t); err != nil {
			return err
		}
	}
	for t, steps := range uses {
		if p.pinned[t] {
			continue
		}
		ok := true
		for _, st := range steps {
			packed, err := p.packWeight(st, t)
			if err != nil {
				return err
			}
			ok = ok && packed
		}
		if !ok {
			if err := p.pinWeight(t); err != nil {
				return err
			}
			continue
		}
		if t.Released() {
			continue
		}
		n, err := p.opts.Weights.Release(t)
		if err != nil {
			return fmt.Errorf("releasing a packed weight: %w", err)
		}
		p.releasedBytes += n
		p.opts.Budget.Release(n)
		p.reserved -= n
	}
	return nil
}

// packWeight packs t for the FusedMatMul step st. A released t's packed
// forms are in the memo already, unless this step reads it with another
// layout: then it is restored, and packed from its data.
func (p *Program) packWeight(st *step, t *ir.Tensor) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = kernelPanic(st.schema, st.node, r)
		}
	}()
	ok, err = ops.PackFusedMatMulB(&st.ctx, st.node, t)
	if errors.Is(err, ops.ErrReleasedNotPacked) {
		if err := p.restoreWeight(t); err != nil {
			return false, st.node.Errorf("%w", err)
		}
		ok, err = ops.PackFusedMatMulB(&st.ctx, st.node, t)
	}
	if err != nil {
		return false, nodeError(st.node, err)
	}
	return ok, nil
}

// pinWeight marks t as read by something other than a packed FusedMatMul
// B, restoring it if it was released.
func (p *Program) pinWeight(t *ir.Tensor) error {
	if p.pinned == nil {
		p.pinned = map[*ir.Tensor]bool{}
	}
	p.pinned[t] = true
	return p.restoreWeight(t)
}

// restoreWeight makes a released t readable again, reserving its bytes.
func (p *Program) restoreWeight(t *ir.Tensor) error {
	if !t.Released() {
		return nil
	}
	n, err := p.readBack(t, p.opts.Weights)
	p.releasedBytes -= n
	return err
}

// readBack restores a released t with r, reserving its bytes from the
// budget; it returns how many it reserved.
func (p *Program) readBack(t *ir.Tensor, r WeightRestorer) (int64, error) {
	n := int64(ir.NumElements(t.Shape)) * int64(t.DType.Size())
	if !p.opts.Budget.Reserve(n) {
		return 0, p.opts.Budget.Exceeded("a released weight read again", n, p.opts.Budget.Left())
	}
	if err := r.Restore(t); err != nil {
		p.opts.Budget.Release(n)
		return 0, err
	}
	p.reserved += n
	return n, nil
}

// Weights held by reference (Options.ReferencedWeights) are read back one
// at a time, where the host needs their values: Const; a plan's build
// (folding a node on them, a fusion matcher reading a mask, a scale or a
// bias: valueReader); and Run, for the weights its plan's steps read. A
// plan that is only looked at (Plan, Steps, Fusions: inspect, the DOT
// view) leaves every other weight in its file, so looking inside a model
// costs no more memory than its largest value planning reads. Once read
// back, a weight stays.

// restoreReferenced reads back the initializer name if it was released
// before Compile (Options.ReferencedWeights).
func (p *Program) restoreReferenced(name string) error {
	p.weightsMu.RLock()
	_, held := p.referenced[name]
	p.weightsMu.RUnlock()
	if !held {
		return nil
	}
	p.weightsMu.Lock()
	defer p.weightsMu.Unlock()
	return p.readReferenced(name)
}

// readReferenced reads back the initializer name if it is held by
// reference; the caller holds weightsMu for writing.
func (p *Program) readReferenced(name string) error {
	t, ok := p.referenced[name]
	if !ok {
		return nil // read back already, or never held by reference
	}
	if p.opts.ReferencedWeights == nil {
		return fmt.Errorf("initializer %q is held by reference (its data is not in memory) and the program has no way to read it (graph Options.ReferencedWeights)", name)
	}
	if _, err := p.readBack(t, p.opts.ReferencedWeights); err != nil {
		return err // onnx.WeightStore's errors name the weight and its file
	}
	delete(p.referenced, name)
	return nil
}

// restorePlanWeights reads back the initializers held by reference that
// pl's steps read or that are its outputs: a plan that runs on the host
// computes with them.
func (p *Program) restorePlanWeights(pl *plan) error {
	p.weightsMu.RLock()
	left := len(p.referenced)
	p.weightsMu.RUnlock()
	if left == 0 {
		return nil
	}
	reads := make(map[*ir.Tensor]bool, len(pl.consts)) // outputs' constants are in pl.consts too
	for _, c := range pl.consts {
		reads[c] = true
	}
	p.weightsMu.Lock()
	defer p.weightsMu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(p.referenced)) {
		if reads[p.referenced[name]] {
			if err := p.readReferenced(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// valueReader gives a plan's build the data of the constants it computes
// with (folding, fusion matchers). Held by reference, a constant is read
// back only when the build may (readBack: it holds weightsMu for writing);
// one the program holds packed (Options.Weights), or held by reference in
// a build that may not read it back (Compile's inference), has no value
// to read: the caller treats it as an unknown value, never as data. The
// first read-back that failed is kept in err, and fails the build.
type valueReader struct {
	p        *Program
	readBack bool
	err      error
}

// value returns constant c, the value of tensor name, with its data in
// memory; nil when c is nil or its data cannot be read. A nil reader
// reads back nothing.
func (r *valueReader) value(name string, c *ir.Tensor) *ir.Tensor {
	if !c.Released() {
		return c
	}
	if r == nil || !r.readBack || r.err != nil || r.p.referenced[name] != c {
		return nil
	}
	if err := r.p.readReferenced(name); err != nil {
		r.err = err
		return nil
	}
	return c
}

// failed returns the first read-back that failed (nil for a nil reader).
func (r *valueReader) failed() error {
	if r == nil {
		return nil
	}
	return r.err
}

// Const returns the constant value of tensor name that the program knows
// at compile time (an initializer, or a constant folded from them), nil
// when it has none; an initializer held by reference is read back first
// (Options.ReferencedWeights).
func (p *Program) Const(name string) (*ir.Tensor, error) {
	c := p.Types[name].Const
	p.weightsMu.RLock() // a plan's build may be reading it back
	released := c.Released()
	p.weightsMu.RUnlock()
	if !released {
		return c, nil
	}
	if err := p.restoreReferenced(name); err != nil {
		return nil, err
	}
	if err := func() error {
		p.weightsMu.Lock()
		defer p.weightsMu.Unlock()
		if !c.Released() {
			return nil
		}
		return p.pinWeight(c) // released by the program itself: held packed
	}(); err != nil {
		return nil, err
	}
	return c, nil
}

// findWeightCandidates returns the initializers that may be released: float32
// external weights, not graph outputs, that only nodes of
// packableWeightOps read.
func (p *Program) findWeightCandidates() map[*ir.Tensor]bool {
	g := p.Model.Graph
	out := map[*ir.Tensor]bool{}
	for _, t := range g.Initializers {
		if t.DType == ir.Float && t.External != nil {
			out[t] = true
		}
	}
	byName := func(name string) *ir.Tensor {
		if t, ok := g.Initializers[name]; ok && out[t] {
			return t
		}
		return nil
	}
	for _, o := range g.Outputs {
		if t := byName(o.Name); t != nil {
			delete(out, t)
		}
	}
	for _, n := range p.Order {
		for _, in := range n.Inputs {
			if t := byName(in); t != nil && !packableWeightOps[n.OpType] {
				delete(out, t)
			}
		}
	}
	return out
}

// ReleasedWeightBytes returns how many bytes of weights' float32 data the
// program released (Options.Weights) and holds only packed.
func (p *Program) ReleasedWeightBytes() int64 {
	p.weightsMu.RLock()
	defer p.weightsMu.RUnlock()
	return p.releasedBytes
}
