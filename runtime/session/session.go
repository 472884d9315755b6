// Package session is attnrun's host: it loads a model, starts backend
// processes, asks each which nodes it takes, partitions the graph into
// maximal runs of consecutive nodes on one backend, compiles every partition
// in its backend once, and runs the partitions in order, passing the
// boundary tensors between them.
//
// Backends run in separate processes (package plugins). If one dies during a
// Run, the error names the backend, its pid and the node it was running; the
// host stays up and starts a fresh backend process in the background,
// recompiling its partitions, for the next Run. A Run whose context ends
// (or that exceeds Options.RunTimeout) returns at once with an error that
// errors.Is matches to the context's error; a backend that stops answering
// is killed and replaced (see backend.go and package plugins' deadlines).
// With Options.InProcess the CPU backend runs inside the host process
// instead: faster, without that isolation (see the option).
//
// The files: options.go (Options), backend.go (backend processes: launch,
// watch, restart, close), pool.go (each backend's instances),
// partition.go (assigning nodes to backends and cutting partitions), run.go
// (Run), tensors.go (NewTensor: tensors the backends share), list.go
// (ListBackends).
package session

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
)

// CPU is the name of the built-in backend, the fallback for every node the
// preferred backend refuses.
const CPU = "cpu"

// ServeBackendEnv is the environment variable that makes the attnrun binary
// serve the CPU backend (see backends/cpu.ServeIfRequested).
const ServeBackendEnv = "ATTNRUN_SERVE_BACKEND"

// Session is a loaded model bound to running backends. Run may be called
// from several goroutines: each backend instance (Options.Instances) runs
// one partition at a time, Runs in parallel use different instances, and
// no lock is held across a whole Run.
type Session struct {
	opts  Options
	model *ir.Model
	// runModel is model with Options.ExtraOutputs appended to its graph
	// outputs: what the partitions compute.
	runModel *ir.Model
	// cores are the attention cores whose weights runs return
	// (Options.AttentionWeights).
	cores  []graph.AttentionCore
	prog   *graph.Program
	assign map[*ir.Node]string
	pools  []*pool // one per backend, preferred first; fixed once Open returns
	parts  []*partition
	// lastUse[name] is the index of the last partition reading name; values
	// that are not graph outputs are dropped from the environment after it.
	lastUse  map[string]int
	graphOut map[string]bool
	// declared input types, for reading uint16 Dense inputs as float16.
	inputTypes map[string]ir.DType

	// bg ends when the session closes: background restarts use it.
	bg        context.Context
	cancelBG  context.CancelFunc
	wg        sync.WaitGroup
	closed    atomic.Bool
	closeOnce sync.Once
	// warnedDims holds the dim_param names whose conflicting sizes were
	// already logged (one warning per name and session).
	warnedDims sync.Map
	// weights reads back the weights Open loaded by reference (nil when
	// it loaded them all): see Open.
	weights *onnx.WeightStore
}

// Open loads the model at modelPath, validates it, starts the backends,
// assigns nodes, partitions and compiles. Each node the preferred backend
// refuses is logged (node, op, reason) and runs on the CPU backend, or is an
// error with Options.NoFallback.
//
// Backends in other processes read the model's weights from its files
// themselves, so the host does not: float32 weights of 1 MiB or more that
// cannot be memory-mapped (embedded at offsets not aligned for float32,
// as PyTorch writes most) are loaded by reference (onnx.Options.
// ReferenceWeights) and read back only where the host reads their values
// (Program.Const, an initializer that is a graph output, a Program plan's
// folding and fusion matchers, Program.Run): a plan only looked at
// (Program.Fusions, `attnrun inspect`) leaves the others in the file.
// The session keeps the model file open for that, so renaming a new file
// over it (mv) changes nothing; writing into it makes such a read fail with
// an error naming the weight and the file. With Options.InProcess the
// backend shares the host's tensors, and every weight is loaded.
func Open(ctx context.Context, modelPath string, opts Options) (*Session, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	m, err := onnx.Load(modelPath, onnx.Options{MaxTensorBytes: opts.MaxTensorBytes, ReferenceWeights: !opts.InProcess})
	if err != nil {
		return nil, err
	}
	if opts.InProcess {
		return openModel(ctx, m, opts, nil)
	}
	weights, err := onnx.NewWeightStore(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", modelPath, err)
	}
	s, err := openModel(ctx, m, opts, weights)
	if err != nil {
		weights.Close()
	}
	return s, err
}

// OpenModel is Open for a model already in memory.
func OpenModel(ctx context.Context, m *ir.Model, opts Options) (*Session, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return openModel(ctx, m, opts, nil)
}

// openModel opens a session on m; weights, when set, reads back m's
// initializers loaded by reference, and the session closes it.
func openModel(ctx context.Context, m *ir.Model, opts Options, weights *onnx.WeightStore) (*Session, error) {
	gopts := graph.Options{Threads: opts.Threads, MaxTensorBytes: opts.MaxTensorBytes, NoFuse: opts.NoFuse, StrictDims: opts.StrictDims, Budget: opts.budget}
	if weights != nil {
		gopts.ReferencedWeights = weights
	}
	prog, err := graph.Compile(m, gopts)
	if err != nil {
		return nil, err
	}
	s := &Session{opts: opts, model: m, prog: prog, assign: map[*ir.Node]string{}, inputTypes: map[string]ir.DType{}, weights: weights}
	extra, runBase := opts.ExtraOutputs, m
	if opts.AttentionWeights {
		s.cores = prog.AttentionCores()
		// Attention nodes that do not return their weights are asked to.
		if m2 := graph.WithAttentionWeights(m, s.cores); m2 != m {
			if s.prog, err = graph.Compile(m2, gopts); err != nil {
				return nil, fmt.Errorf("asking the Attention nodes for their weights: %w", err)
			}
			runBase, s.cores = m2, s.prog.AttentionCores()
		}
		extra = append(append([]string(nil), extra...), coreOutputs(m, s.prog, s.cores)...)
	}
	if s.runModel, err = withExtraOutputs(runBase, s.prog, extra); err != nil {
		return nil, err
	}
	if !opts.InProcess && !opts.NoSharedMemory && os.Getenv(plugins.NoSharedMemoryEnv) != "1" {
		// One arena for every backend process of the session (NewTensor).
		if s.opts.arena, err = plugins.NewArena(0, opts.budget); err != nil {
			return nil, err
		}
	}
	s.bg, s.cancelBG = context.WithCancel(context.Background())
	for _, vi := range m.Graph.Inputs {
		s.inputTypes[vi.Name] = vi.Type.DType
	}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// start launches the backends' first instances, assigns the nodes,
// partitions and compiles; then it starts the other instances (in
// parallel), each compiling every partition of its backend.
func (s *Session) start(ctx context.Context) error {
	pref, err := s.backend(ctx, s.opts.Backend)
	if err != nil {
		return err
	}
	if err := s.assignNodes(ctx, pref); err != nil {
		return err
	}
	s.partition()
	for _, p := range s.parts {
		first := p.pool.members[0]
		if err := first.compile(ctx, first.cur, p.slot); err != nil {
			return err
		}
	}
	var more []*backend
	for _, pl := range s.pools {
		more = append(more, pl.members[1:]...)
	}
	errs := make([]error, len(more))
	var wg sync.WaitGroup
	for i, b := range more {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.cur, errs[i] = b.start(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil { // Close ends the instances that started
			return fmt.Errorf("starting instance %d of backend %q: %w", more[i].instance, more[i].name, err)
		}
	}
	for _, pl := range s.pools {
		for _, b := range pl.members {
			b.adopt(b.cur)
		}
		pl.release()
	}
	return nil
}

// backend returns the pool of the session's backend of that name, starting
// its first instance if needed (while Open runs).
func (s *Session) backend(ctx context.Context, name string) (*pool, error) {
	for _, pl := range s.pools {
		if pl.name == name {
			return pl, nil
		}
	}
	pl := newPool(name, s.opts.Instances, &s.opts, s.bg, &s.wg)
	first := pl.members[0]
	g, err := first.launch(ctx)
	if err != nil {
		return nil, err
	}
	first.cur = g
	s.pools = append(s.pools, pl)
	return pl, nil
}

// Instances is the number of instances of each backend the session runs
// (Options.Instances): how many Runs can compute at the same time.
func (s *Session) Instances() int { return s.opts.Instances }

// Threads is the number of compute threads each backend instance was asked
// for: Options.Threads, or the share of the cores that Options.Threads 0
// gives each of several instances; 0 leaves it to the backend (the CPU
// backend's default is its GOMAXPROCS).
func (s *Session) Threads() int { return s.opts.Threads }

// Inputs are the model's declared graph inputs.
func (s *Session) Inputs() []*ir.ValueInfo { return s.model.Graph.Inputs }

// Outputs are the model's declared graph outputs.
func (s *Session) Outputs() []*ir.ValueInfo { return s.model.Graph.Outputs }

// Model is the loaded model. Its weights loaded by reference (see Open)
// have no data in memory (ir.Tensor.Released): Program().Const reads one.
func (s *Session) Model() *ir.Model { return s.model }

// Program is the host's compiled program (validation and symbolic types).
func (s *Session) Program() *graph.Program { return s.prog }

// Assignments maps every node to the name of the backend running it.
func (s *Session) Assignments() map[*ir.Node]string {
	out := make(map[*ir.Node]string, len(s.assign))
	for n, b := range s.assign {
		out[n] = b
	}
	return out
}

// Partitions returns, for each partition in run order, its backend's name
// and its nodes.
func (s *Session) Partitions() []Partition {
	out := make([]Partition, len(s.parts))
	for i, p := range s.parts {
		out[i] = Partition{Backend: p.pool.name, Nodes: p.nodes, Inputs: p.inputs, Outputs: p.outputs}
	}
	return out
}

// Partition describes one partition for inspection.
type Partition struct {
	Backend string
	Nodes   []*ir.Node
	// Inputs and Outputs are the values crossing its boundary.
	Inputs, Outputs []string
}

// Backends describes the session's backends, preferred first, each
// instance in turn (BackendInfo.Instance). A backend being restarted is
// listed as unavailable, with the reason.
func (s *Session) Backends() []BackendInfo {
	var out []BackendInfo
	for _, pl := range s.pools {
		for _, b := range pl.members {
			out = append(out, b.describe())
		}
	}
	return out
}

// Stats asks every running backend instance for its resource counters (peak
// RSS), keyed by backend name for the first instance and "name#i" for
// instance i > 0.
func (s *Session) Stats(ctx context.Context) (map[string]*plugins.Stats, error) {
	out := map[string]*plugins.Stats{}
	for _, pl := range s.pools {
		for _, b := range pl.members {
			g := b.current()
			if g == nil {
				continue
			}
			key := b.name
			if b.instance > 0 {
				key = fmt.Sprintf("%s#%d", b.name, b.instance)
			}
			st, err := g.p.Stats(ctx)
			if err != nil {
				return nil, fmt.Errorf("backend %q: %w", key, err)
			}
			out[key] = st
		}
	}
	return out, nil
}

// Close shuts the backend processes down (each gets ShutdownGrace to exit,
// then its process group is killed) and returns within about 1.5 s whatever
// they do. Runs in flight fail. It is safe to call more than once.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cancelBG()
		done := make(chan struct{})
		go func() {
			var wg sync.WaitGroup
			for _, pl := range s.pools {
				for _, b := range pl.members {
					wg.Add(1)
					go func() {
						defer wg.Done()
						b.close()
					}()
				}
			}
			wg.Wait()
			close(done)
		}()
		t := time.NewTimer(closeTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			s.opts.Logf("closing the session: backends still shutting down after %v; continuing in the background", closeTimeout)
		}
		if s.weights != nil {
			s.weights.Close()
		}
		s.opts.arena.Close() // unmapped once the caller frees its last tensor there
	})
	return nil
}
