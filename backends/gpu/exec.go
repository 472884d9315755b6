package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
)

// device is what partitions need from a GPU. *cudaDevice implements it;
// the tests' reference emulator (emu_test.go) executes the same encoded
// launches and cuBLAS calls on the host.
type device interface {
	// do runs f where device calls may be made (the CUDA context's thread).
	do(f func() error) error
	alloc(bytes int64) (uint64, error)
	free(ptr uint64)
	htod(dst uint64, src []byte) error
	dtoh(dst []byte, src uint64) error
	launch(k *launch, params []uint64) error
	sgemm(c blasCall) error
	sync() error
}

// partition is one compiled partition on the device: its program, its
// weights region (uploaded at Compile), its arena (grown to the largest
// plan that ran) and its plans by input shapes.
type partition struct {
	dev    device
	prog   *graph.Program
	static map[string]bool
	// weights region
	weightOff   map[string]int64
	weightPtr   uint64
	weightBytes int64
	// arena and error word
	arenaPtr uint64
	arenaCap int64
	errPtr   uint64

	// mu serializes runs (the arena is shared by them).
	mu    chan struct{}
	plans map[string]*devPlan
}

// devPlan is a plan with its constants region on the device.
type devPlan struct {
	*plan
	constPtr uint64
}

// newPartition uploads the program's static constants.
func newPartition(dev device, prog *graph.Program) (*partition, error) {
	p := &partition{dev: dev, prog: prog, static: map[string]bool{}, mu: make(chan struct{}, 1), plans: map[string]*devPlan{}}
	names := staticConsts(prog)
	sizes := map[string]int64{}
	for _, n := range names {
		t := prog.Types[n].Const
		if _, err := tensorBytes(t); err != nil {
			return nil, fmt.Errorf("constant %q: %w", n, err)
		}
		sizes[n] = t.Bytes()
		p.static[n] = true
	}
	p.weightOff, p.weightBytes = packRegion(names, sizes)
	err := dev.do(func() error {
		var err error
		if p.errPtr, err = dev.alloc(8); err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		if p.weightPtr, err = dev.alloc(p.weightBytes); err != nil {
			return fmt.Errorf("weights (%d bytes): %w", p.weightBytes, err)
		}
		for _, n := range names {
			b, _ := tensorBytes(prog.Types[n].Const)
			if err := dev.htod(p.weightPtr+uint64(p.weightOff[n]), b); err != nil {
				return fmt.Errorf("uploading %q: %w", n, err)
			}
		}
		return nil
	})
	if err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// release frees the partition's device memory.
func (p *partition) release() {
	p.mu <- struct{}{}
	defer func() { <-p.mu }()
	_ = p.dev.do(func() error {
		p.dev.free(p.weightPtr)
		p.dev.free(p.arenaPtr)
		p.dev.free(p.errPtr)
		for _, dp := range p.plans {
			p.dev.free(dp.constPtr)
		}
		return nil
	})
	p.weightPtr, p.arenaPtr, p.errPtr, p.arenaCap = 0, 0, 0, 0
	p.plans = map[string]*devPlan{}
}

// planFor returns the device plan for the inputs' shapes, building it (and
// uploading its constants) on first use. Call with mu held.
func (p *partition) planFor(inputs map[string]*ir.Tensor) (*devPlan, error) {
	var names []string
	for _, vi := range p.prog.Model.Graph.Inputs {
		names = append(names, vi.Name)
	}
	key := shapeKey(names, inputs)
	if dp := p.plans[key]; dp != nil {
		return dp, p.prog.CheckInputs(inputs)
	}
	pl, err := lowerPlan(p.prog, inputs, p.static)
	if err != nil {
		return nil, err
	}
	dp := &devPlan{plan: pl}
	err = p.dev.do(func() error {
		if len(p.plans) >= maxPlans {
			for k, old := range p.plans {
				p.dev.free(old.constPtr)
				delete(p.plans, k)
			}
		}
		if len(pl.constOrder) == 0 {
			return nil
		}
		var err error
		if dp.constPtr, err = p.dev.alloc(pl.constBytes); err != nil {
			return fmt.Errorf("plan constants (%d bytes): %w", pl.constBytes, err)
		}
		for _, n := range pl.constOrder {
			b, err := tensorBytes(pl.constData[n])
			if err != nil {
				return fmt.Errorf("constant %q: %w", n, err)
			}
			if err := p.dev.htod(dp.constPtr+uint64(pl.constOff[n]), b); err != nil {
				return fmt.Errorf("uploading constant %q: %w", n, err)
			}
		}
		return nil
	})
	if err != nil {
		p.dev.do(func() error { p.dev.free(dp.constPtr); return nil })
		return nil, err
	}
	p.plans[key] = dp
	return dp, nil
}

// addr resolves a value (and a byte offset into it) to a device address.
func (p *partition) addr(dp *devPlan) func(string, int64) (uint64, error) {
	return func(val string, off int64) (uint64, error) {
		if val == errFlagVal {
			return p.errPtr, nil
		}
		r := dp.root(val)
		if o, ok := p.weightOff[r]; ok && p.static[r] {
			return p.weightPtr + uint64(o+off), nil
		}
		if o, ok := dp.constOff[r]; ok {
			return dp.constPtr + uint64(o+off), nil
		}
		if o, ok := dp.bufOff[r]; ok {
			return p.arenaPtr + uint64(o+off), nil
		}
		return 0, fmt.Errorf("value %q has no device buffer", val)
	}
}

// Run executes a partition: it uploads the inputs into the arena, launches
// every call, synchronizes and downloads the outputs.
func (s *Server) Run(ctx context.Context, id plugins.PartitionID, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	if s.dev == nil {
		return nil, s.errUnavailable()
	}
	s.mu.Lock()
	p := s.parts[id]
	s.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("gpu backend: no partition %d", id)
	}
	s.runs.Add(1)
	select {
	case p.mu <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.mu }()
	dp, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*ir.Tensor, len(dp.outputs))
	err = p.dev.do(func() error { return s.runPlan(ctx, id, p, dp, inputs, out) })
	s.status.Idle(id)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runPlan runs on the device thread.
func (s *Server) runPlan(ctx context.Context, id plugins.PartitionID, p *partition, dp *devPlan, inputs, out map[string]*ir.Tensor) error {
	d := p.dev
	if dp.arenaBytes > p.arenaCap {
		d.free(p.arenaPtr)
		p.arenaPtr, p.arenaCap = 0, 0
		ptr, err := d.alloc(dp.arenaBytes)
		if err != nil {
			return fmt.Errorf("gpu backend: arena of %d bytes: %w", dp.arenaBytes, err)
		}
		p.arenaPtr, p.arenaCap = ptr, dp.arenaBytes
	}
	if dp.usesErr {
		if err := d.htod(p.errPtr, make([]byte, 8)); err != nil {
			return err
		}
	}
	addr := p.addr(dp)
	for _, name := range dp.inputs {
		t := inputs[name]
		b, err := tensorBytes(t)
		if err != nil {
			return fmt.Errorf("input %q: %w", name, err)
		}
		a, err := addr(name, 0)
		if err != nil {
			return err
		}
		if err := d.htod(a, b); err != nil {
			return fmt.Errorf("uploading input %q: %w", name, err)
		}
	}
	// A profiled run waits for each kernel to finish, so that its step
	// lasts from its launch to its end.
	prof := plugins.ProfileFrom(ctx)
	for i := range dp.calls {
		c := &dp.calls[i]
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("run cancelled before node %q (%s): %w", c.node.Label(), c.node.QualifiedOp(), err)
		}
		var start time.Time
		if prof != nil {
			start = time.Now()
		}
		s.status.Running(id, c.step)
		if err := s.issue(d, c, addr); err != nil {
			return c.node.Errorf("%w", err)
		}
		if s.syncEach || prof != nil {
			if err := d.sync(); err != nil {
				return c.node.Errorf("%w", err)
			}
		}
		if prof != nil {
			prof.Steps = append(prof.Steps, plugins.StepTiming{Name: c.node.Label(), OpType: c.node.OpType, Domain: c.node.Domain, Span: plugins.Span{Start: start, Duration: time.Since(start)}})
		}
	}
	if err := d.sync(); err != nil {
		last := "none"
		if n := len(dp.calls); n > 0 {
			last = fmt.Sprintf("%q (%s)", dp.calls[n-1].node.Label(), dp.calls[n-1].node.QualifiedOp())
		}
		return fmt.Errorf("gpu backend: %w (kernels run asynchronously; the last node launched was %s; set %s=1 to find the failing node)", err, last, SyncEnv)
	}
	if dp.usesErr {
		var flag [8]byte
		if err := d.dtoh(flag[:], p.errPtr); err != nil {
			return err
		}
		if binary.LittleEndian.Uint64(flag[:]) != 0 {
			return fmt.Errorf("gpu backend: a Gather index was out of range (or a RotaryEmbedding position id)")
		}
	}
	for _, name := range dp.outputs {
		if t, ok := dp.hostOut[name]; ok {
			out[name] = t.Clone()
			continue
		}
		shape, _ := dp.types[name].Type.Shape.Concrete()
		t, b, err := newHostTensor(dp.types[name].Type.DType, shape)
		if err != nil {
			return fmt.Errorf("output %q: %w", name, err)
		}
		a, err := addr(name, 0)
		if err != nil {
			return err
		}
		if err := d.dtoh(b, a); err != nil {
			return fmt.Errorf("downloading output %q: %w", name, err)
		}
		out[name] = t
	}
	return nil
}

// issue launches one call.
func (s *Server) issue(d device, c *call, addr func(string, int64) (uint64, error)) error {
	if c.k != nil {
		params, err := c.k.encode(addr)
		if err != nil {
			return err
		}
		return d.launch(c.k, params)
	}
	g := c.g
	a, err := addr(g.a, g.aOff)
	if err != nil {
		return err
	}
	b, err := addr(g.b, g.bOff)
	if err != nil {
		return err
	}
	cc, err := addr(g.c, g.cOff)
	if err != nil {
		return err
	}
	return d.sgemm(g.columnMajor(a, b, cc))
}
