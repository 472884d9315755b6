// Package session is attnrun's host: it loads a model, starts backend
// processes, asks each which nodes it takes, partitions the graph into
// maximal runs of consecutive nodes on one backend, compiles every partition
// in its backend once, and runs the partitions in order, passing the
// boundary tensors between them.
//
// Backends run in separate processes (package plugins). If one dies during a
// Run, the error names the backend, its pid and the node it was running; the
// host stays up, and the next Run starts a fresh backend process and
// recompiles its partitions.
package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
	"gorgonia.org/tensor"
)

// CPU is the name of the built-in backend, the fallback for every node the
// preferred backend refuses.
const CPU = "cpu"

// ServeBackendEnv is the environment variable that makes the attnrun binary
// serve the CPU backend (see backends/cpu.ServeIfRequested).
const ServeBackendEnv = "ATTNRUN_SERVE_BACKEND"

// Options configure a Session.
type Options struct {
	// Backend is the preferred backend's name (default "cpu").
	Backend string
	// PluginDir is where attnrun-backend-* executables live ("" means
	// $ATTNRUN_PLUGIN_DIR).
	PluginDir string
	// NoFallback makes a node the preferred backend refuses an error instead
	// of running it on the CPU backend.
	NoFallback bool
	// Threads is the number of compute threads per backend (0: the
	// backend's default).
	Threads int
	// MaxTensorBytes bounds any one tensor (0: the default, 4 GiB).
	MaxTensorBytes int64
	// NoFuse turns off attention fusion in every backend.
	NoFuse bool
	// Precision is the arithmetic of float32 matrix products in every
	// backend: "" or "fp32", or "bf16" (operands rounded to bfloat16, fp32
	// accumulation; see ops.Precision). Open fails where a backend cannot
	// honour it (the CPU backend needs AVX512_BF16 for bf16).
	Precision string
	// NoSharedMemory makes tensors travel as bytes inside the gRPC messages
	// instead of through the memory region shared with each backend
	// process (see package plugins); for measurement and diagnosis.
	NoSharedMemory bool
	// Logf receives fallback and lifecycle lines (default: stderr).
	Logf func(format string, args ...any)
	// SelfExe is the executable re-executed as the CPU backend (default
	// os.Executable()); it must call cpu.ServeIfRequested first thing.
	SelfExe string
}

func (o *Options) defaults() error {
	if o.Backend == "" {
		o.Backend = CPU
	}
	if o.PluginDir == "" {
		o.PluginDir = os.Getenv(plugins.PluginDirEnv)
	}
	if o.Logf == nil {
		o.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "attnrun: "+format+"\n", args...)
		}
	}
	if o.SelfExe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding the attnrun executable for the cpu backend: %w", err)
		}
		o.SelfExe = exe
	}
	return nil
}

// logWriter routes go-plugin's log lines to Logf.
type logWriter struct{ logf func(string, ...any) }

func (w logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if l != "" {
			w.logf("%s", l)
		}
	}
	return len(p), nil
}

// launchSpec says how to start the named backend.
func launchSpec(name string, opts *Options) (plugins.LaunchSpec, error) {
	spec := plugins.LaunchSpec{Name: name, Logger: plugins.NewLogger(logWriter{opts.Logf})}
	if opts.NoSharedMemory {
		spec.SharedBytes = -1
	}
	if name == CPU {
		cmd := exec.Command(opts.SelfExe)
		cmd.Env = []string{ServeBackendEnv + "=" + CPU}
		spec.Cmd = cmd
		return spec, nil
	}
	if opts.PluginDir == "" {
		return spec, fmt.Errorf("unknown backend %q: available backends: %s (no plugin directory is set: --plugin-dir or %s)", name, availableBackends(""), plugins.PluginDirEnv)
	}
	path := filepath.Join(opts.PluginDir, plugins.ExecutablePrefix+name)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return spec, fmt.Errorf("unknown backend %q: available backends: %s (no %s)", name, availableBackends(opts.PluginDir), path)
	}
	if err != nil {
		return spec, fmt.Errorf("backend %q: %w", name, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return spec, fmt.Errorf("backend %q: %s is not an executable file", name, path)
	}
	cmd := exec.Command(path)
	cmd.Env = []string{ServeBackendEnv + "="} // an attnrun-backend-* is a backend by itself
	spec.Cmd = cmd
	return spec, nil
}

// availableBackends lists the backends attnrun could start, for errors about
// an unknown backend name: cpu, then every attnrun-backend-* executable in
// the plugin directory.
func availableBackends(pluginDir string) string {
	names := []string{CPU}
	cands, _ := plugins.Discover(pluginDir) // a bad plugin dir lists just cpu
	for _, c := range cands {
		if c.Reason == "" {
			names = append(names, c.Name)
		}
	}
	return strings.Join(names, ", ")
}

// BackendInfo describes a backend for `attnrun backends` and Session.Backends.
type BackendInfo struct {
	Name    string
	Version string
	Pid     int
	// Path is the executable ("" for the built-in cpu backend's self exe).
	Path    string
	Details map[string]string
	Ops     []plugins.OpSupport
	// Available is false when the backend could not be started, is not a
	// backend, or reports that it cannot compute here (no GPU); Reason says
	// why.
	Available bool
	Reason    string
}

// UnavailableError reports a backend that started but cannot compute on
// this machine (plugins.Info.UnavailableReason), e.g. a GPU backend without
// a driver or device.
type UnavailableError struct {
	Backend string
	Reason  string
}

// Error reads `backend "gpu" is unavailable: libcuda.so.1 not found: ...`.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("backend %q is unavailable: %s", e.Backend, e.Reason)
}

// backendState is one backend process the session uses.
type backendState struct {
	name  string
	path  string
	spec  func() (plugins.LaunchSpec, error)
	proc  *plugins.Process
	info  *plugins.Info
	parts []*partition
}

// partition is a maximal run of consecutive nodes (in schedule order)
// assigned to one backend.
type partition struct {
	index   int
	backend *backendState
	model   *ir.Model
	nodes   []*ir.Node
	inputs  []string // values it reads from the run's environment
	outputs []string // values it writes into it
	id      plugins.PartitionID
}

// Session is a loaded model bound to running backends. Run may be called
// from several goroutines; runs are serialized.
type Session struct {
	opts     Options
	model    *ir.Model
	prog     *graph.Program
	assign   map[*ir.Node]string
	backends []*backendState // preferred first
	parts    []*partition
	// lastUse[name] is the index of the last partition reading name; values
	// that are not graph outputs are dropped from the environment after it.
	lastUse  map[string]int
	graphOut map[string]bool
	// declared input types, for reading uint16 Dense inputs as float16.
	inputTypes map[string]ir.DType

	mu     sync.Mutex
	closed bool
}

// Open loads the model at modelPath, validates it, starts the backends,
// assigns nodes, partitions and compiles. Each node the preferred backend
// refuses is logged (node, op, reason) and runs on the CPU backend, or is an
// error with Options.NoFallback.
func Open(ctx context.Context, modelPath string, opts Options) (*Session, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	m, err := onnx.Load(modelPath, onnx.Options{MaxTensorBytes: opts.MaxTensorBytes})
	if err != nil {
		return nil, err
	}
	return openModel(ctx, m, opts)
}

// OpenModel is Open for a model already in memory.
func OpenModel(ctx context.Context, m *ir.Model, opts Options) (*Session, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return openModel(ctx, m, opts)
}

func openModel(ctx context.Context, m *ir.Model, opts Options) (*Session, error) {
	prog, err := graph.Compile(m, graph.Options{Threads: opts.Threads, MaxTensorBytes: opts.MaxTensorBytes, NoFuse: opts.NoFuse})
	if err != nil {
		return nil, err
	}
	s := &Session{opts: opts, model: m, prog: prog, assign: map[*ir.Node]string{}, inputTypes: map[string]ir.DType{}}
	for _, vi := range m.Graph.Inputs {
		s.inputTypes[vi.Name] = vi.Type.DType
	}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// start launches the backends, assigns the nodes, partitions and compiles.
func (s *Session) start(ctx context.Context) error {
	pref, err := s.startBackend(ctx, s.opts.Backend)
	if err != nil {
		return err
	}
	if err := s.assignNodes(ctx, pref); err != nil {
		return err
	}
	s.partition()
	for _, p := range s.parts {
		if p.id, err = p.backend.proc.Compile(ctx, p.model, s.compileOptions()); err != nil {
			return fmt.Errorf("compiling partition %d on backend %q: %w", p.index, p.backend.name, err)
		}
	}
	return nil
}

func (s *Session) compileOptions() plugins.CompileOptions {
	return plugins.CompileOptions{Threads: s.opts.Threads, MaxTensorBytes: s.opts.MaxTensorBytes, NoFuse: s.opts.NoFuse, Precision: s.opts.Precision}
}

// startBackend launches the named backend and adds it to the session.
func (s *Session) startBackend(ctx context.Context, name string) (*backendState, error) {
	opts := &s.opts
	b := &backendState{name: name, spec: func() (plugins.LaunchSpec, error) { return launchSpec(name, opts) }}
	spec, err := b.spec()
	if err != nil {
		return nil, err
	}
	if name != CPU {
		b.path = spec.Cmd.Path
	}
	if err := b.launch(ctx, spec); err != nil {
		return nil, err
	}
	s.backends = append(s.backends, b)
	return b, nil
}

// launch starts the process and reads its Info.
func (b *backendState) launch(ctx context.Context, spec plugins.LaunchSpec) error {
	proc, err := plugins.Launch(ctx, spec)
	if err != nil {
		return err
	}
	info, err := proc.Info(ctx)
	if err != nil {
		proc.Kill()
		return fmt.Errorf("backend %q: info: %w", b.name, err)
	}
	if info.ProtocolVersion != plugins.ProtocolVersion {
		proc.Kill()
		return fmt.Errorf("backend %q speaks protocol %d, attnrun speaks %d", b.name, info.ProtocolVersion, plugins.ProtocolVersion)
	}
	if info.UnavailableReason != "" {
		// A backend that cannot compute here is an error, never a silent
		// fallback: the user asked for it by name.
		proc.Kill()
		return &UnavailableError{Backend: b.name, Reason: info.UnavailableReason}
	}
	b.proc, b.info = proc, info
	return nil
}

// backend returns the session's backend of that name, starting it if needed.
func (s *Session) backend(ctx context.Context, name string) (*backendState, error) {
	for _, b := range s.backends {
		if b.name == name {
			return b, nil
		}
	}
	return s.startBackend(ctx, name)
}

// queries describes the scheduled nodes for Capability.
func (s *Session) queries() []plugins.NodeQuery {
	qs := make([]plugins.NodeQuery, len(s.prog.Order))
	for i, n := range s.prog.Order {
		q := plugins.NodeQuery{Name: n.Label(), OpType: n.OpType, Domain: n.Domain, Opset: int64(s.prog.Opsets[n])}
		q.InputDTypes = make([]ir.DType, len(n.Inputs))
		for k, in := range n.Inputs {
			if in != "" {
				q.InputDTypes[k] = s.prog.Types[in].Type.DType
			}
		}
		qs[i] = q
	}
	return qs
}

// assignNodes asks the preferred backend about every node and sends the
// ones it refuses to the CPU backend.
func (s *Session) assignNodes(ctx context.Context, pref *backendState) error {
	if len(s.prog.Order) == 0 {
		return nil
	}
	verdicts, err := pref.proc.Capability(ctx, s.queries())
	if err != nil {
		return fmt.Errorf("backend %q: capability: %w", pref.name, err)
	}
	for i, n := range s.prog.Order {
		v := verdicts[i]
		if v.Accepted {
			s.assign[n] = pref.name
			continue
		}
		reason := v.Reason
		if reason == "" {
			reason = "no reason given"
		}
		switch {
		case pref.name == CPU:
			return n.Errorf("backend %q does not take this node: %s", CPU, reason)
		case s.opts.NoFallback:
			return n.Errorf("backend %q does not take this node (%s) and fallback to %q is disabled", pref.name, reason, CPU)
		}
		s.opts.Logf("node %q (%s) falls back from backend %q to %q: %s", n.Label(), n.QualifiedOp(), pref.name, CPU, reason)
		s.assign[n] = CPU
	}
	needCPU := false
	for _, n := range s.prog.Order {
		needCPU = needCPU || (s.assign[n] == CPU && pref.name != CPU)
	}
	if !needCPU {
		return nil
	}
	cpu, err := s.backend(ctx, CPU)
	if err != nil {
		return err
	}
	verdicts, err = cpu.proc.Capability(ctx, s.queries())
	if err != nil {
		return fmt.Errorf("backend %q: capability: %w", CPU, err)
	}
	for i, n := range s.prog.Order {
		if s.assign[n] == CPU && !verdicts[i].Accepted {
			return n.Errorf("no backend takes this node: %q: %s", CPU, verdicts[i].Reason)
		}
	}
	return nil
}

// partition splits the schedule into maximal runs on one backend and builds
// each run's model.
func (s *Session) partition() {
	g := s.model.Graph
	order := s.prog.Order
	byName := map[string]*backendState{}
	for _, b := range s.backends {
		byName[b.name] = b
	}
	var runs [][]*ir.Node
	for i, n := range order {
		if i == 0 || s.assign[n] != s.assign[order[i-1]] {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], n)
	}
	graphOut := map[string]bool{}
	for _, o := range g.Outputs {
		graphOut[o.Name] = true
	}
	s.graphOut = graphOut
	s.lastUse = map[string]int{}
	for i, nodes := range runs {
		for _, n := range nodes {
			for _, in := range n.Inputs {
				s.lastUse[in] = i
			}
		}
	}
	for i, nodes := range runs {
		p := &partition{index: i, backend: byName[s.assign[nodes[0]]], nodes: nodes}
		if len(runs) == 1 {
			p.model = s.model
			for _, vi := range g.Inputs {
				p.inputs = append(p.inputs, vi.Name)
			}
			for _, vi := range g.Outputs {
				if s.isNodeOutput(vi.Name) {
					p.outputs = append(p.outputs, vi.Name)
				}
			}
		} else {
			p.model = s.subModel(i, nodes, graphOut)
			for _, vi := range p.model.Graph.Inputs {
				p.inputs = append(p.inputs, vi.Name)
			}
			for _, vi := range p.model.Graph.Outputs {
				p.outputs = append(p.outputs, vi.Name)
			}
		}
		p.backend.parts = append(p.backend.parts, p)
		s.parts = append(s.parts, p)
	}
}

// isNodeOutput reports whether a value is produced by a node (rather than
// being a graph input or initializer passed straight through).
func (s *Session) isNodeOutput(name string) bool {
	for _, n := range s.prog.Order {
		for _, o := range n.Outputs {
			if o == name {
				return true
			}
		}
	}
	return false
}

// subModel builds the model of partition i: its nodes, the initializers they
// read, its boundary inputs (values produced earlier or graph inputs) and
// outputs (values read by later partitions or graph outputs), typed with the
// host's inferred types.
func (s *Session) subModel(i int, nodes []*ir.Node, graphOut map[string]bool) *ir.Model {
	g := s.model.Graph
	produced := map[string]bool{}
	for _, n := range nodes {
		for _, o := range n.Outputs {
			if o != "" {
				produced[o] = true
			}
		}
	}
	sg := &ir.Graph{Name: fmt.Sprintf("%s/partition%d", g.Name, i), Nodes: nodes, Initializers: map[string]*ir.Tensor{}}
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, in := range n.Inputs {
			if in == "" || produced[in] || seen[in] {
				continue
			}
			seen[in] = true
			if t, ok := g.Initializers[in]; ok {
				sg.Initializers[in] = t
				sg.InitializerOrder = append(sg.InitializerOrder, in)
				continue
			}
			sg.Inputs = append(sg.Inputs, &ir.ValueInfo{Name: in, Type: s.typeOf(in)})
		}
	}
	for _, n := range nodes {
		for _, o := range n.Outputs {
			if o == "" {
				continue
			}
			if graphOut[o] || s.lastUse[o] > i {
				sg.Outputs = append(sg.Outputs, &ir.ValueInfo{Name: o, Type: s.typeOf(o)})
			}
		}
	}
	return &ir.Model{
		IRVersion: s.model.IRVersion, ProducerName: s.model.ProducerName, ProducerVersion: s.model.ProducerVersion,
		Domain: s.model.Domain, ModelVersion: s.model.ModelVersion, Opsets: s.model.Opsets, Graph: sg,
	}
}

// typeOf is the host's inferred type of a value.
func (s *Session) typeOf(name string) ir.TypeInfo {
	return s.prog.Types[name].Type
}

// Run validates the inputs against the model's declared inputs, runs every
// partition in order and returns the graph outputs by name. Inputs are not
// modified; outputs are new tensors (a graph input that is also a graph
// output is returned as given). Float16 and bfloat16 tensors travel as
// uint16 Dense values holding the bit patterns (see ir.ToDense).
func (s *Session) Run(ctx context.Context, inputs map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	return s.RunWith(ctx, inputs, RunOptions{})
}

// RunOptions tune one RunWith call.
type RunOptions struct {
	// Into binds graph outputs to caller-owned tensors, like ONNX Runtime's
	// IOBinding: each output named here is written into its tensor, which
	// must be a plain row-major tensor with the output's element type and
	// shape (float16 and bfloat16 as uint16), and the result map holds that
	// tensor. A loop of runs that binds its outputs once allocates no new
	// output memory. Outputs not named get new tensors.
	Into map[string]*tensor.Dense
}

// RunWith is Run with options.
func (s *Session) RunWith(ctx context.Context, inputs map[string]*tensor.Dense, ro RunOptions) (map[string]*tensor.Dense, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("session is closed")
	}
	if err := s.checkInputs(inputs); err != nil {
		return nil, err
	}
	boundTo := make(map[*tensor.Dense]string, len(ro.Into))
	for name, d := range ro.Into {
		if !s.graphOut[name] {
			return nil, fmt.Errorf("output binding: %q is not a graph output", name)
		}
		if d == nil {
			return nil, fmt.Errorf("output binding: %q is bound to no tensor", name)
		}
		if other, dup := boundTo[d]; dup {
			return nil, fmt.Errorf("output binding: %q and %q are bound to the same tensor", min(name, other), max(name, other))
		}
		boundTo[d] = name
	}
	env := make(map[string]*tensor.Dense, len(inputs)+4)
	for k, v := range inputs {
		env[k] = v
	}
	for i, p := range s.parts {
		if err := s.ensureRunning(ctx, p.backend); err != nil {
			return nil, err
		}
		in := make(map[string]*tensor.Dense, len(p.inputs))
		for _, name := range p.inputs {
			in[name] = env[name]
		}
		var into map[string]*tensor.Dense
		for _, name := range p.outputs {
			if d := ro.Into[name]; d != nil {
				if into == nil {
					into = map[string]*tensor.Dense{}
				}
				into[name] = d
			}
		}
		out, err := p.backend.proc.RunInto(ctx, p.id, in, into)
		if err != nil {
			var died *plugins.DiedError
			if errors.As(err, &died) {
				died.PartitionLabel = strconv.Itoa(p.index)
				return nil, died
			}
			return nil, fmt.Errorf("backend %q, partition %d: %w", p.backend.name, p.index, err)
		}
		for _, name := range p.outputs {
			d, ok := out[name]
			if !ok || d == nil {
				return nil, fmt.Errorf("backend %q, partition %d: no output %q", p.backend.name, p.index, name)
			}
			env[name] = d
		}
		if len(s.parts) > 1 {
			for name, last := range s.lastUse {
				if last == i && !s.graphOut[name] {
					delete(env, name)
				}
			}
		}
	}
	res := make(map[string]*tensor.Dense, len(s.model.Graph.Outputs))
	for _, vi := range s.model.Graph.Outputs {
		d, err := s.graphOutput(vi.Name, env, inputs)
		if err != nil {
			return nil, fmt.Errorf("graph output %q: %w", vi.Name, err)
		}
		if dst := ro.Into[vi.Name]; dst != nil && dst != d {
			// Not written by a backend: an input or a constant passed through.
			t, err := ir.FromDenseAs(d, s.typeOf(vi.Name).DType)
			if err == nil {
				err = plugins.BindOutput(dst, t)
			}
			if err != nil {
				return nil, fmt.Errorf("graph output %q: %w", vi.Name, err)
			}
			d = dst
		}
		res[vi.Name] = d
	}
	return res, nil
}

// graphOutput finds a graph output after a run: computed by a partition,
// passed through from the inputs, or an initializer (copied).
func (s *Session) graphOutput(name string, env, inputs map[string]*tensor.Dense) (*tensor.Dense, error) {
	if d, ok := env[name]; ok && d != nil {
		return d, nil
	}
	if d, ok := inputs[name]; ok {
		return d, nil
	}
	t, ok := s.model.Graph.Initializers[name]
	if !ok {
		return nil, errors.New("not produced")
	}
	return ir.ToDense(t.Clone())
}

// checkInputs converts the inputs (no copy) and validates them with the
// program's rules before anything is sent to a backend.
func (s *Session) checkInputs(inputs map[string]*tensor.Dense) error {
	ts := make(map[string]*ir.Tensor, len(inputs))
	for name, d := range inputs {
		if d == nil {
			ts[name] = nil
			continue
		}
		var t *ir.Tensor
		var err error
		if dt := s.inputTypes[name]; (dt == ir.Float16 || dt == ir.BFloat16) && d.Dtype() == tensor.Uint16 {
			t, err = ir.FromDenseAs(d, dt)
		} else {
			t, err = ir.FromDense(d)
		}
		if err != nil {
			return fmt.Errorf("input %q: %w", name, err)
		}
		ts[name] = t
	}
	return s.prog.CheckInputs(ts)
}

// ensureRunning restarts a backend whose process has exited and recompiles
// its partitions.
func (s *Session) ensureRunning(ctx context.Context, b *backendState) error {
	if b.proc != nil && !b.proc.Exited() {
		return nil
	}
	if b.proc != nil {
		why := "exit status 0"
		if e := b.proc.ExitErr(); e != nil {
			why = e.Error()
		}
		s.opts.Logf("backend %q (pid %d) exited (%s); restarting it", b.name, b.proc.Pid(), why)
		b.proc.Kill()
		b.proc = nil
	}
	spec, err := b.spec()
	if err != nil {
		return err
	}
	if err := b.launch(ctx, spec); err != nil {
		return fmt.Errorf("restarting backend %q: %w", b.name, err)
	}
	for _, p := range b.parts {
		id, err := b.proc.Compile(ctx, p.model, s.compileOptions())
		if err != nil {
			b.proc.Kill()
			return fmt.Errorf("restarting backend %q: compiling partition %d: %w", b.name, p.index, err)
		}
		p.id = id
	}
	s.opts.Logf("backend %q restarted (pid %d); %d partition(s) recompiled", b.name, b.proc.Pid(), len(b.parts))
	return nil
}

// Inputs are the model's declared graph inputs.
func (s *Session) Inputs() []*ir.ValueInfo { return s.model.Graph.Inputs }

// Outputs are the model's declared graph outputs.
func (s *Session) Outputs() []*ir.ValueInfo { return s.model.Graph.Outputs }

// Model is the loaded model.
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
		out[i] = Partition{Backend: p.backend.name, Nodes: p.nodes, Inputs: p.inputs, Outputs: p.outputs}
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

// Backends describes the session's running backends, preferred first.
func (s *Session) Backends() []BackendInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []BackendInfo
	for _, b := range s.backends {
		bi := BackendInfo{Name: b.name, Path: b.path, Available: b.proc != nil && !b.proc.Exited()}
		if b.proc != nil {
			bi.Pid = b.proc.Pid()
		}
		if b.info != nil {
			bi.Version, bi.Details, bi.Ops = b.info.Version, b.info.Details, b.info.Ops
		}
		if !bi.Available {
			bi.Reason = "process exited; it restarts on the next run"
		}
		out = append(out, bi)
	}
	return out
}

// Stats asks every running backend for its resource counters (peak RSS),
// keyed by backend name.
func (s *Session) Stats(ctx context.Context) (map[string]*plugins.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*plugins.Stats{}
	for _, b := range s.backends {
		if b.proc == nil || b.proc.Exited() {
			continue
		}
		st, err := b.proc.Stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("backend %q: %w", b.name, err)
		}
		out[b.name] = st
	}
	return out, nil
}

// Close kills the backend processes. It is safe to call more than once.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, b := range s.backends {
		if b.proc != nil {
			b.proc.Kill()
			b.proc = nil
		}
	}
	return nil
}

// ListBackends starts every backend attnrun can find (the built-in cpu
// backend and each attnrun-backend-* in the plugin directory), asks each for
// its Info and stops it. Backends that cannot be started are listed as
// unavailable with the reason.
func ListBackends(ctx context.Context, opts Options) ([]BackendInfo, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	type target struct{ name, path, reason string }
	targets := []target{{name: CPU}}
	cands, err := plugins.Discover(opts.PluginDir)
	if err != nil {
		return nil, err
	}
	for _, c := range cands {
		targets = append(targets, target{c.Name, c.Path, c.Reason})
	}
	out := make([]BackendInfo, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		out[i] = BackendInfo{Name: t.name, Path: t.path, Reason: t.reason}
		if t.reason != "" {
			continue
		}
		wg.Add(1)
		go func(bi *BackendInfo) {
			defer wg.Done()
			spec, err := launchSpec(bi.Name, &opts)
			if err != nil {
				bi.Reason = err.Error()
				return
			}
			proc, err := plugins.Launch(ctx, spec)
			if err != nil {
				bi.Reason = err.Error()
				return
			}
			defer proc.Kill()
			info, err := proc.Info(ctx)
			if err != nil {
				bi.Reason = err.Error()
				return
			}
			bi.Available, bi.Version, bi.Pid, bi.Details, bi.Ops = true, info.Version, info.Pid, info.Details, info.Ops
			switch {
			case info.ProtocolVersion != plugins.ProtocolVersion:
				bi.Available = false
				bi.Reason = fmt.Sprintf("speaks protocol %d, attnrun speaks %d", info.ProtocolVersion, plugins.ProtocolVersion)
			case info.UnavailableReason != "":
				bi.Available = false
				bi.Reason = info.UnavailableReason
			}
		}(&out[i])
	}
	wg.Wait()
	sort.SliceStable(out[1:], func(i, j int) bool { return out[1+i].Name < out[1+j].Name })
	return out, nil
}
