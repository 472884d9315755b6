package plugins

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"gorgonia.org/tensor"
)

// In-process backends. A Server can also run inside the host process,
// behind the same Backend interface and the same lifecycle methods as a
// Process, so that the host partitions, logs fallbacks, applies its limits
// and reports errors the same way. There is no process, no gRPC and no
// tensor region: inputs reach the kernels as the caller's own memory and
// outputs come back without a copy; when every output is bound, they are
// computed into memory the partition reuses run after run and copied once,
// into the caller's tensors, so that a serving loop allocates nothing. This
// is the lowest latency attnrun offers. The price is isolation:
//
//   - a crash is the host's: a panic in the goroutine of the call is
//     recovered and reported as a *DiedError (and the InProcess ends, so
//     the host starts a fresh one), but a panic in a kernel's worker
//     goroutine, a fatal error or a memory fault kills the host;
//   - a call cannot be abandoned: Go cannot stop a running kernel, so a
//     Run whose context ends returns when its current node finishes (the
//     server checks the context between nodes), and a kernel that never
//     finishes hangs its caller; there is no watchdog to kill it;
//   - the backend shares the host's memory, threads and process-wide
//     settings (the CPU backend's GEMM thread count is process wide).

// ModelCompiler is implemented by a Server that compiles a partition given
// as a decoded model; an InProcess then hands it the host's model as is,
// instead of encoding it for Compile.
type ModelCompiler interface {
	CompileModel(ctx context.Context, m *ir.Model, opts CompileOptions) (PartitionID, []NodeRef, error)
}

// InProcess is a backend Server running inside the host process. It
// implements Backend and the lifecycle methods of Process (Pid is the
// host's); see above for what it trades away. It is safe for concurrent
// use to the extent its Server is (the CPU backend runs one call at a time
// per partition).
type InProcess struct {
	name string
	srv  Server
	// page is a status page in ordinary memory: the server records the node
	// it runs there, the host reads it to name that node in errors.
	page *statusPage

	done    chan struct{} // closed when it ends (Kill, or a panic)
	endOnce sync.Once
	exitErr atomic.Pointer[error] // the panic that ended it; nil after a Kill

	mu    sync.Mutex
	parts map[PartitionID]*partMeta
}

var _ Backend = (*InProcess)(nil)

// NewInProcess runs the Server that newServer returns inside this process,
// as the backend called name. newServer gets the status writer in which the
// Server records the node it runs (StatusWriter.Running), as a backend
// process does in its status page.
func NewInProcess(name string, newServer func(status *StatusWriter) Server) *InProcess {
	page := &statusPage{mem: make([]byte, statusPageSize)}
	copy(page.mem, statusMagic)
	return &InProcess{
		name:  name,
		srv:   newServer(&StatusWriter{page: page}),
		page:  page,
		done:  make(chan struct{}),
		parts: map[PartitionID]*partMeta{},
	}
}

// Name is the backend's name.
func (p *InProcess) Name() string { return p.name }

// Pid is the host's process id: the backend has no process of its own.
func (p *InProcess) Pid() int { return os.Getpid() }

// Done is closed once the backend has ended (Kill, Shutdown, or a panic).
func (p *InProcess) Done() <-chan struct{} { return p.done }

// Exited reports whether the backend has ended.
func (p *InProcess) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr is the panic that ended the backend; nil while it runs or after
// Kill.
func (p *InProcess) ExitErr() error {
	if e := p.exitErr.Load(); e != nil {
		return *e
	}
	return nil
}

// KillReason is always "": the host never kills an in-process backend for
// not answering (it cannot).
func (p *InProcess) KillReason() string { return "" }

// Kill ends the backend: later calls fail, and its compiled partitions are
// released (a call in flight finishes first). It returns at once.
func (p *InProcess) Kill() { p.end(nil) }

// Shutdown is Kill: there is nothing to wait for.
func (p *InProcess) Shutdown(time.Duration) { p.Kill() }

// end ends the backend once; err is the panic that ended it, if any.
func (p *InProcess) end(err error) {
	p.endOnce.Do(func() {
		if err != nil {
			p.exitErr.Store(&err)
		}
		close(p.done)
		p.mu.Lock()
		ids := make([]PartitionID, 0, len(p.parts))
		for id := range p.parts {
			ids = append(ids, id)
		}
		p.parts = map[PartitionID]*partMeta{}
		p.mu.Unlock()
		for _, id := range ids {
			_ = p.srv.Release(context.Background(), id)
		}
	})
}

// errEnded is the error of a call on an ended backend.
func (p *InProcess) errEnded(op string) error {
	if err := p.ExitErr(); err != nil {
		return fmt.Errorf("%s: backend %q (in process) ended after %v", op, p.name, err)
	}
	return fmt.Errorf("%s: backend %q (in process) was shut down", op, p.name)
}

// call runs f, one call into the server, turning a panic in it into a
// *DiedError that names the node that was running, and ending the backend:
// its state may be anything after a panic.
func (p *InProcess) call(op string, f func() error) (err error) {
	if p.Exited() {
		return p.errEnded(op)
	}
	defer func() {
		if r := recover(); r != nil {
			w := p.where()
			perr := fmt.Errorf("panic: %v", r)
			p.end(perr)
			err = &DiedError{Backend: p.name, Pid: p.Pid(), Where: w, ExitErr: perr, InProcess: true}
		}
	}()
	return f()
}

// where reads what the server is running from the status page.
func (p *InProcess) where() Where {
	w, _ := readWhere(p.page, p.meta)
	return w
}

func (p *InProcess) meta(id PartitionID) *partMeta {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parts[id]
}

// Info asks the server to describe itself; Details gets "in_process":
// "true", and Pid is the host's.
func (p *InProcess) Info(ctx context.Context) (*Info, error) {
	var info *Info
	err := p.call("info", func() (err error) {
		info, err = p.srv.Info(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := *info
	out.Details = maps.Clone(info.Details)
	if out.Details == nil {
		out.Details = map[string]string{}
	}
	out.Details["in_process"] = "true"
	out.Pid = os.Getpid()
	return &out, nil
}

// Capability asks which nodes the server takes.
func (p *InProcess) Capability(ctx context.Context, nodes []NodeQuery) ([]Verdict, error) {
	var vs []Verdict
	err := p.call("capability", func() (err error) {
		vs, err = p.srv.Capability(ctx, nodes)
		return err
	})
	if err == nil && len(vs) != len(nodes) {
		err = fmt.Errorf("capability: backend answered %d verdicts for %d nodes", len(vs), len(nodes))
	}
	return vs, err
}

// Compile compiles a partition: with the model as is when the server is a
// ModelCompiler (its initializers are then shared with the caller's model,
// which must not change them), else encoded as a backend process would get
// it.
func (p *InProcess) Compile(ctx context.Context, m *ir.Model, opts CompileOptions) (PartitionID, error) {
	if m == nil || m.Graph == nil {
		return 0, errors.New("compile: partition has no graph")
	}
	var id PartitionID
	var nodes []NodeRef
	err := p.call("compile", func() (err error) {
		if mc, ok := p.srv.(ModelCompiler); ok {
			id, nodes, err = mc.CompileModel(ctx, m, opts)
			return err
		}
		data, err := onnx.Encode(m)
		if err != nil {
			return fmt.Errorf("compile: encoding partition: %w", err)
		}
		id, nodes, err = p.srv.Compile(ctx, data, opts)
		return err
	})
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.parts[id] = newPartMeta(m, nodes)
	p.mu.Unlock()
	return id, nil
}

// Run runs a compiled partition on the caller's tensors (not copied, never
// written). Outputs are fresh tensors the caller owns.
func (p *InProcess) Run(ctx context.Context, id PartitionID, inputs map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	return p.RunInto(ctx, id, inputs, nil)
}

// RunInto is Run writing the outputs named in into into those caller-owned
// tensors (see BindOutput). When ctx ends, it returns an *InterruptedError
// once the node running then has finished.
//
// When every output is bound, a Server that can computes float32 outputs
// straight into the bound tensors (OutputInto; RunProfile.OutputsInPlace
// names them), saving their copy; a bound tensor sharing memory with an
// input or with another bound output is written by copy instead. A Run
// that fails may then have written part of the bound tensors.
//
// A profiled Run (WithProfile) gets the Server's step times and the same
// spans as a backend process's, on the host's pid: WriteInputs and
// ReadOutputs are taking the inputs and handing over (or copying into
// bound tensors) the outputs, Call and Run the Server's Run; nothing is
// decoded or encoded.
func (p *InProcess) RunInto(ctx context.Context, id PartitionID, inputs, into map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	prof := ProfileFrom(ctx)
	var mark time.Time
	if prof != nil {
		mark = time.Now()
		prof.Host.Start, prof.Pid = mark, os.Getpid()
		defer func() { prof.Host = since(prof.Host.Start) }()
	}
	meta := p.meta(id)
	if meta == nil {
		if p.Exited() {
			return nil, p.errEnded("run")
		}
		return nil, fmt.Errorf("run: unknown partition %d", id)
	}
	ts := make(map[string]*ir.Tensor, len(inputs))
	for name, d := range inputs {
		t, err := denseToIR(d, meta.inputs[name])
		if err == nil {
			err = t.Check()
		}
		if err != nil {
			return nil, fmt.Errorf("run: input %q: %w", name, err)
		}
		ts[name] = t
	}
	copied := len(into) > 0 && boundAll(into, meta.outputs)
	var given *boundOutputs
	if copied {
		// The outputs go into the caller's tensors: the server may compute
		// them into memory it reuses, as long as no other Run of the
		// partition starts before they are copied out.
		meta.bound.Lock()
		defer meta.bound.Unlock()
		given = &boundOutputs{into: into, outputs: meta.outputs, inputs: ts}
		ctx = withOutputInto(ctx, given.float32s)
	}
	if prof != nil {
		prof.WriteInputs, mark = since(mark), time.Now()
	}
	// When ctx ends, note the node running at that moment for the error
	// (a context that never ends needs no watcher).
	var at Where
	stop := func() bool { return true }
	var noted chan struct{}
	if ctx.Done() != nil {
		noted = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			at = p.where()
			close(noted)
		})
	}
	var res map[string]*ir.Tensor
	err := p.call("run", func() (err error) {
		res, err = p.srv.Run(ctx, id, ts)
		return err
	})
	if !stop() {
		<-noted
	}
	if prof != nil {
		prof.Call, mark = since(mark), time.Now()
		prof.Run = prof.Call
		defer func() { prof.ReadOutputs = since(mark) }()
	}
	if err != nil {
		var died *DiedError
		if !errors.As(err, &died) && ctx.Err() != nil {
			return nil, &InterruptedError{Backend: p.name, Pid: p.Pid(), Op: "run", Where: at, Err: ctx.Err()}
		}
		return nil, err
	}
	if rel, ok := p.srv.(OutputsReleaser); ok && copied {
		defer rel.OutputsReleased() // once copied out, the run's memory is idle
	}
	detachClobbered(res, into, given)
	out := make(map[string]*tensor.Dense, len(res))
	var inPlace []string
	for name, t := range res {
		if t == nil {
			return nil, fmt.Errorf("run: output %q: no tensor", name)
		}
		if dst := into[name]; dst != nil {
			if given.holds(name, t) {
				if prof != nil {
					inPlace = append(inPlace, name) // computed in dst
				}
				out[name] = dst
				continue
			}
			if err := BindOutput(dst, t); err != nil {
				return nil, fmt.Errorf("run: output %q: %w", name, err)
			}
			out[name] = dst
			continue
		}
		d, err := ir.ToDense(t)
		if err != nil {
			return nil, fmt.Errorf("run: output %q: %w", name, err)
		}
		out[name] = d
	}
	if prof != nil {
		sort.Strings(inPlace)
		prof.OutputsInPlace = inPlace
	}
	return out, nil
}

// detachClobbered clones each result whose memory overlaps the tensor bound
// to another output (a view of an input whose tensor the caller also bound
// an output to: xi = Identity(x) with y bound to x), so that writing the
// bound outputs, in whatever order, cannot change a result not yet written.
// A result computed in its own bound tensor (given) stays: two outputs
// bound to one tensor are the caller's choice, and the last written wins.
func detachClobbered(res map[string]*ir.Tensor, into map[string]*tensor.Dense, given *boundOutputs) {
	for name, t := range res {
		if t == nil || !shmEligible(t) || given.holds(name, t) {
			continue
		}
		mem := bytesOf(t.Data)
		for other, dst := range into {
			if other == name || dst == nil || res[other] == nil {
				continue
			}
			// Writing other over memory that already holds its result
			// (computed there, or both bound to one tensor) changes
			// nothing.
			bound := bytesOf(dst.Data())
			if src := bytesOf(res[other].Data); len(src) > 0 && len(bound) > 0 && &src[0] == &bound[0] {
				continue
			}
			if overlaps(mem, bound) {
				res[name] = t.Clone()
				break
			}
		}
	}
}

// boundOutputs is OutputInto for an in-process Run whose outputs are all
// bound: the bound tensors' memory, where it holds a float32 output of the
// shape asked for and shares no memory with the inputs or with memory
// already given.
type boundOutputs struct {
	into    map[string]*tensor.Dense
	outputs map[string]ir.DType
	inputs  map[string]*ir.Tensor
	given   map[string][]float32
}

func (b *boundOutputs) float32s(name string, dims []int) []float32 {
	dst := b.into[name]
	if dst == nil || b.outputs[name] != ir.Float || b.given[name] != nil {
		return nil
	}
	target, err := bindTarget(dst, ir.Float, dims)
	if err != nil {
		return nil // BindOutput reports it after the run
	}
	data, ok := target.Data.([]float32)
	if !ok || len(data) == 0 {
		return nil
	}
	mem := bytesOf(data)
	for _, in := range b.inputs {
		if overlaps(bytesOf(in.Data), mem) {
			return nil
		}
	}
	for _, g := range b.given {
		if overlaps(bytesOf(g), mem) {
			return nil
		}
	}
	if b.given == nil {
		b.given = map[string][]float32{}
	}
	b.given[name] = data
	return data
}

// holds reports whether the output name, t, was computed in the bound
// tensor's memory that float32s gave for it.
func (b *boundOutputs) holds(name string, t *ir.Tensor) bool {
	if b == nil {
		return false
	}
	g, ok := b.given[name]
	d, isF := t.Data.([]float32)
	return ok && isF && len(d) == len(g) && len(g) > 0 && &d[0] == &g[0]
}

// Release frees a compiled partition.
func (p *InProcess) Release(ctx context.Context, id PartitionID) error {
	err := p.call("release", func() error { return p.srv.Release(ctx, id) })
	if err == nil {
		p.mu.Lock()
		delete(p.parts, id)
		p.mu.Unlock()
	}
	return err
}

// Stats asks the server for its counters (its peak RSS is the host's).
func (p *InProcess) Stats(ctx context.Context) (*Stats, error) {
	var st *Stats
	err := p.call("stats", func() (err error) {
		st, err = p.srv.Stats(ctx)
		return err
	})
	return st, err
}

// boundAll reports whether into binds every one of the outputs.
func boundAll(into map[string]*tensor.Dense, outputs map[string]ir.DType) bool {
	for name := range outputs {
		if into[name] == nil {
			return false
		}
	}
	return true
}
