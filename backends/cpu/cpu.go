// Package cpu is attnrun's CPU backend: a backend process (see package
// plugins) that runs partitions with the reference kernels of package ops
// through runtime/graph.
//
// The backend process is the host program itself, re-executed with
// ATTNRUN_SERVE_BACKEND=cpu: the attnrun binary, or any Go program that
// embeds attnrun (runtime/session imports this package). This package's
// init serves the backend in such a copy and exits, before main runs, so an
// embedding program needs no call of its own, and whatever its main does
// (open sessions, start servers, write files) happens once, in the host
// only: in the backend process, main never runs, and only the packages
// initialized before this one (its dependencies among them) run their inits.
//
// Server is also used inside the host process, without a process of its own
// (session.Options.InProcess, see NewInProcessServer).
package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/budget"
	"github.com/attnrun/attnrun/runtime/graph"
)

// Name is the backend's name.
const Name = "cpu"

// Version is the CPU backend's version, reported by Info.
const Version = "0.1.0"

// ServeEnv names the environment variable that turns the attnrun binary into
// a backend process: ATTNRUN_SERVE_BACKEND=cpu.
const ServeEnv = "ATTNRUN_SERVE_BACKEND"

// FaultEnv names the CPU backend's fault-injection hooks, read once at
// start, for testing the host's crash reporting and partitioning with real
// processes. Its value is a ';'-separated list of:
//
//	exit-before:<OpType>   exit with status 2 just before the first node of that op runs
//	kill-before:<OpType>   send SIGKILL to itself just before that node runs
//	stop-before:<OpType>   send SIGSTOP to itself just before that node runs
//	stop-in:<Call>         send SIGSTOP to itself when the host calls Info,
//	                       Capability or Compile (a backend that handshakes,
//	                       then never answers)
//	refuse:<OpType>[,...]  answer Capability with "refused" for those op types
//	leak:<bytes>           keep that many bytes, written, for every Run (a
//	                       leak, which tools/soak's memory checks must catch)
//
// Nothing else in attnrun sets or reads it.
const FaultEnv = "ATTNRUN_CPU_FAULT"

// faults are the parsed FaultEnv hooks.
type faults struct {
	exitBefore, killBefore, stopBefore, stopIn string
	refuse                                     map[string]bool
	leak                                       int // bytes kept a Run
}

func parseFaults(v string) (faults, error) {
	f := faults{refuse: map[string]bool{}}
	for _, item := range strings.Split(v, ";") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		kind, arg, ok := strings.Cut(item, ":")
		if !ok || arg == "" {
			return f, fmt.Errorf("%s: %q is not kind:argument", FaultEnv, item)
		}
		switch kind {
		case "exit-before":
			f.exitBefore = arg
		case "kill-before":
			f.killBefore = arg
		case "stop-before":
			f.stopBefore = arg
		case "stop-in":
			f.stopIn = arg
		case "refuse":
			for _, op := range strings.Split(arg, ",") {
				f.refuse[op] = true
			}
		case "leak":
			n, err := strconv.Atoi(arg)
			if err != nil || n <= 0 {
				return f, fmt.Errorf("%s: leak:%s is not a positive byte count", FaultEnv, arg)
			}
			f.leak = n
		default:
			return f, fmt.Errorf("%s: unknown hook %q (want exit-before, kill-before, stop-before, stop-in, refuse or leak)", FaultEnv, kind)
		}
	}
	return f, nil
}

// init makes every program that links this package a CPU backend when it is
// started as one (see the package doc): a host re-executes itself, and the
// copy serves here, before main, instead of running main again (which, in a
// program that opens a session, would start another copy, and so on).
func init() { ServeIfRequested() }

// ServeIfRequested serves the CPU backend and exits the process when
// ATTNRUN_SERVE_BACKEND=cpu; otherwise it returns at once. This package's
// init calls it before main, so programs need not (a call from main, as
// older programs make, is harmless: it returns at once).
func ServeIfRequested() {
	if os.Getenv(ServeEnv) != Name {
		return
	}
	s, err := NewServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "attnrun cpu backend: %v\n", err)
		os.Exit(1)
	}
	plugins.Serve(s)
	os.Exit(0)
}

// Server implements plugins.Server on the CPU.
type Server struct {
	status *plugins.StatusWriter
	faults faults
	// onNode is set only when a fault hook needs to see every node.
	onNode func(n *ir.Node)

	// bf16 says whether the CPU multiplies bf16 natively (AVX512_BF16);
	// precision bf16 is refused where it does not.
	bf16 bool
	// inProcess is set for a backend running inside the host
	// (NewInProcessServer): it leaves the process-wide settings that are
	// the host's alone (Go's soft memory limit) as they are.
	inProcess bool
	// logf receives the programs' notes (graph.Options.Logf: attention
	// left unfused): a warning line on stderr, which the host's go-plugin
	// client logs, or, in process, the host's own logger.
	logf func(format string, args ...any)

	mu    sync.Mutex
	next  plugins.PartitionID
	parts map[plugins.PartitionID]*partition
	runs  atomic.Uint64
	// budget is the process's memory budget, shared by every partition
	// (the host sends the session's limit with each Compile).
	budget *budget.Budget
	// idle releases the partitions' run memory once no run has come for
	// plugins.IdleRelease.
	idle *time.Timer
	// gcPercent is the collector's percentage tuneGC last set (0: none).
	gcPercent atomic.Int64
	// leaked holds what the leak fault hook keeps (under mu).
	leaked [][]byte
}

// partition is one compiled partition.
type partition struct {
	mu   sync.Mutex // graph.Program runs one call at a time here
	prog *graph.Program
	// weights releases the float32 data of weights the program holds
	// packed (a partition decoded here, not shared with a host); nil in
	// CompileModel's.
	weights *onnx.WeightStore
}

var (
	_ plugins.Server        = (*Server)(nil)
	_ plugins.ModelCompiler = (*Server)(nil)
)

// NewServer makes a CPU backend, mapping the host's status page when one was
// passed (see plugins.StatusWriterFromEnv).
func NewServer() (*Server, error) {
	st, err := plugins.StatusWriterFromEnv()
	if err != nil {
		return nil, err
	}
	f, err := parseFaults(os.Getenv(FaultEnv))
	if err != nil {
		return nil, err
	}
	s := &Server{status: st, faults: f, bf16: blas.BF16Fast(), parts: map[plugins.PartitionID]*partition{}, budget: budget.New(budget.DefaultLimit()),
		logf: plugins.BackendLogf()}
	if f.exitBefore != "" || f.killBefore != "" || f.stopBefore != "" {
		s.onNode = func(n *ir.Node) {
			switch n.OpType {
			case f.exitBefore:
				os.Exit(2)
			case f.killBefore:
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // wait for the signal
			case f.stopBefore:
				stopSelf()
			}
		}
	}
	return s, nil
}

// NewInProcessServer makes a CPU backend that runs inside the host process
// (session.Options.InProcess, through plugins.InProcess): it records the
// node it runs in status (nil: nowhere) and has no fault hooks (FaultEnv is
// read by backend processes only: a hook that kills or stops the backend
// would kill or stop the host).
//
// Like a backend process, it keeps its partitions within a memory budget of
// its own (the session's limit, sent with each Compile: it counts the
// weights it shares with the host, as a backend process counts its copy)
// and refuses precision bf16 without AVX512_BF16; unlike one, it leaves
// Go's soft memory limit (debug.SetMemoryLimit) to the host program. Its
// programs' warnings (attention left unfused) go to logf, prefixed
// "warning: " as a backend process's reach the host (nil: nowhere).
func NewInProcessServer(status *plugins.StatusWriter, logf func(format string, args ...any)) *Server {
	if logf != nil { // as a backend process's warnings reach the host (plugins.TidyLogLine)
		hostLogf := logf
		logf = func(format string, args ...any) { hostLogf("warning: "+format, args...) }
	}
	return &Server{status: status, faults: faults{refuse: map[string]bool{}}, bf16: blas.BF16Fast(), inProcess: true,
		parts: map[plugins.PartitionID]*partition{}, budget: budget.New(budget.DefaultLimit()), logf: logf}
}

// stopIn stops the process (SIGSTOP) in the call named by the stop-in fault
// hook.
func (s *Server) stopIn(call string) {
	if s.faults.stopIn == call {
		stopSelf()
	}
}

// stopSelf stops the process (SIGSTOP). The stop reaches the other threads
// a moment after kill returns, so the caller waits a little: it must not
// answer the host before the process is stopped.
func stopSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	time.Sleep(100 * time.Millisecond)
}

// Info describes the backend: every op schema registered in package ops.
func (s *Server) Info(context.Context) (*plugins.Info, error) {
	s.stopIn("Info")
	info := &plugins.Info{
		Name:    Name,
		Version: Version,
		Pid:     os.Getpid(),
		Details: map[string]string{
			"blas":          blas.Name(),
			"go":            runtime.Version(),
			"gomaxprocs":    strconv.Itoa(runtime.GOMAXPROCS(0)),
			"blas_threads":  strconv.Itoa(blas.Threads()),
			"spin":          ops.SpinTime().String(),
			"max_rss_bytes": strconv.FormatInt(plugins.ProcessMaxRSS(), 10),
			"bf16":          strconv.FormatBool(s.bf16),
			"kernels":       ops.KernelSet(),
		},
		ProtocolVersion: plugins.ProtocolVersion,
	}
	for _, sc := range ops.Schemas() {
		op := plugins.OpSupport{Domain: sc.Domain, OpType: sc.OpType, Since: sc.Since, Until: sc.Until}
		if sc.TypeInput >= 0 {
			op.DTypes = append([]ir.DType(nil), sc.DTypes...)
		}
		info.Ops = append(info.Ops, op)
	}
	return info, nil
}

// Capability accepts a node whose op has a schema at the node's opset and
// whose kernel takes the element type at the schema's type input.
func (s *Server) Capability(_ context.Context, nodes []plugins.NodeQuery) ([]plugins.Verdict, error) {
	s.stopIn("Capability")
	out := make([]plugins.Verdict, len(nodes))
	for i, q := range nodes {
		if s.faults.refuse[q.OpType] {
			out[i] = plugins.Verdict{Reason: "refused by " + FaultEnv}
			continue
		}
		out[i] = verdict(q)
	}
	return out, nil
}

func verdict(q plugins.NodeQuery) plugins.Verdict {
	sc, err := ops.Lookup(q.Domain, q.OpType, int(q.Opset))
	if err != nil {
		return plugins.Verdict{Reason: err.Error()}
	}
	if sc.TypeInput >= 0 && sc.TypeInput < len(q.InputDTypes) {
		if dt := q.InputDTypes[sc.TypeInput]; dt != ir.Undefined && !sc.TakesDType(dt) {
			return plugins.Verdict{Reason: fmt.Sprintf("%s does not take %v at input %d", sc.Key(), dt, sc.TypeInput)}
		}
	}
	return plugins.Verdict{Accepted: true}
}

// Compile decodes a partition (weights in external data are read from
// opts.ModelDir) and compiles it with CompileModel.
func (s *Server) Compile(ctx context.Context, model []byte, opts plugins.CompileOptions) (plugins.PartitionID, []plugins.NodeRef, error) {
	s.stopIn("Compile")
	prec, err := s.precision(opts)
	if err != nil {
		return 0, nil, err
	}
	m, err := onnx.Decode(model, onnx.Options{MaxTensorBytes: opts.MaxTensorBytes, BaseDir: opts.ModelDir})
	if err != nil {
		return 0, nil, fmt.Errorf("cpu backend: decoding partition: %w", err)
	}
	// The partition's weights are this process's own: those every plan
	// reads packed are released once packed (graph.Options.Weights).
	weights, err := onnx.NewWeightStore(m)
	if err != nil {
		return 0, nil, fmt.Errorf("cpu backend: %w", err)
	}
	id, nodes, err := s.compile(m, opts, prec, weights)
	if err != nil {
		weights.Close()
	}
	return id, nodes, err
}

// CompileModel compiles a partition given as a decoded model
// (plugins.ModelCompiler: an in-process backend skips the encoding) with
// runtime/graph, within the session's memory budget and at its precision.
// The program keeps m and reads its initializers in place: they must not
// change while the partition is compiled.
func (s *Server) CompileModel(_ context.Context, m *ir.Model, opts plugins.CompileOptions) (plugins.PartitionID, []plugins.NodeRef, error) {
	prec, err := s.precision(opts)
	if err != nil {
		return 0, nil, err
	}
	return s.compile(m, opts, prec, nil)
}

// precision reads the precision a Compile asks for, refusing bf16 where the
// CPU has no AVX512_BF16.
func (s *Server) precision(opts plugins.CompileOptions) (ops.Precision, error) {
	prec, err := ops.ParsePrecision(opts.Precision)
	if err != nil {
		return prec, fmt.Errorf("cpu backend: %w", err)
	}
	if prec == ops.PrecisionBF16 && !s.bf16 {
		return prec, errors.New("cpu backend: precision bf16 needs a CPU with AVX512_BF16 (bfloat16 dot products); this one has none, use fp32")
	}
	return prec, nil
}

// compile compiles decoded partition m at precision prec, within the
// session's memory budget (opts.MaxMemoryBytes). With weights, the program
// releases what it holds packed (graph.Options.Weights).
func (s *Server) compile(m *ir.Model, opts plugins.CompileOptions, prec ops.Precision, weights *onnx.WeightStore) (plugins.PartitionID, []plugins.NodeRef, error) {
	s.setBudget(opts.MaxMemoryBytes)
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	} else {
		// GEMM's thread count is process wide (ops/blas): the last
		// Compile that sets one wins, which is what a host asking every
		// partition for the same count wants.
		blas.SetThreads(threads)
	}
	gopts := graph.Options{Threads: threads, MaxTensorBytes: opts.MaxTensorBytes, NoFuse: opts.NoFuse, Budget: s.budget, Precision: prec, Logf: s.logf}
	if weights != nil {
		gopts.Weights = weights
	}
	prog, err := graph.Compile(m, gopts)
	if err != nil {
		return 0, nil, fmt.Errorf("cpu backend: %w", err)
	}
	nodes := plugins.NodeRefs(prog.Order)
	s.mu.Lock()
	id := s.next
	s.next++
	s.parts[id] = &partition{prog: prog, weights: weights}
	s.mu.Unlock()
	s.tuneGC()
	return id, nodes, nil
}

// Run executes a partition, recording each node in the status page.
func (s *Server) Run(ctx context.Context, id plugins.PartitionID, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	s.mu.Lock()
	p := s.parts[id]
	s.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("cpu backend: no partition %d", id)
	}
	s.runs.Add(1)
	if n := s.faults.leak; n > 0 {
		b := make([]byte, n)
		for i := 0; i < n; i += 4096 {
			b[i] = 1 // resident
		}
		s.mu.Lock()
		s.leaked = append(s.leaked, b)
		s.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ro := graph.RunOptions{OnNode: func(i int, n *ir.Node, fused string) {
		if fused != "" {
			s.status.RunningStep(id, i, fused)
		} else {
			s.status.Running(id, i)
		}
		if s.onNode != nil {
			s.onNode(n)
		}
	}, ReuseOutputs: plugins.OutputsCopied(ctx), OutputInto: plugins.OutputInto(ctx)}
	prof := plugins.ProfileFrom(ctx)
	var steps []graph.StepTime
	if prof != nil {
		ro.Profile = &steps
	}
	out, err := p.prog.Run(ctx, inputs, ro)
	s.status.Idle(id)
	s.tuneGC() // the first runs pack weights: the model's share grows
	for _, st := range steps {
		prof.Steps = append(prof.Steps, plugins.StepTiming{Name: st.Node.Label(), OpType: st.Node.OpType, Domain: st.Node.Domain, Span: plugins.Span{Start: st.Start, Duration: st.Duration}})
	}
	if err != nil || !ro.ReuseOutputs {
		s.idleLater() // else once the outputs are copied: OutputsReleased
	}
	return out, err
}

// OutputsReleased is called by the protocol layer once it has copied a
// Run's outputs away (plugins.OutputsCopied): the run's memory is idle from
// then on.
func (s *Server) OutputsReleased() { s.idleLater() }

// setBudget applies the session's memory budget (see
// plugins.CompileOptions.MaxMemoryBytes) to the process, and, in a backend
// process, makes it Go's soft memory limit too, so that the collector works
// harder as the heap nears it (in process, that limit is the host's).
func (s *Server) setBudget(limit int64) {
	switch {
	case limit == 0:
		limit = budget.DefaultLimit()
	case limit < 0:
		limit = 0 // none
	}
	s.budget.SetLimit(limit)
	if s.inProcess {
		return
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	} else {
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

// idleLater arranges for releaseIdle to run once no run has come for
// plugins.IdleRelease.
func (s *Server) idleLater() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		s.idle = time.AfterFunc(plugins.IdleRelease(), s.releaseIdle)
		return
	}
	s.idle.Reset(plugins.IdleRelease())
}

// releaseIdle drops the memory the partitions keep for their next run
// (arenas: planned buffers, scratch) and hands the freed heap back to the
// system, so that one large request does not leave the process large.
func (s *Server) releaseIdle() {
	s.mu.Lock()
	progs := make([]*graph.Program, 0, len(s.parts))
	for _, p := range s.parts {
		progs = append(progs, p.prog)
	}
	s.mu.Unlock()
	var freed int64
	for _, p := range progs {
		freed += p.ReleaseIdle()
	}
	if freed > 0 {
		plugins.FreeOSMemory()
	}
}

// Release drops a compiled partition.
func (s *Server) Release(_ context.Context, id plugins.PartitionID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.parts[id]
	if !ok {
		return fmt.Errorf("cpu backend: no partition %d", id)
	}
	delete(s.parts, id)
	p.prog.Close() // its memory goes back to the budget
	if p.weights != nil {
		p.weights.Close()
	}
	return nil
}

// Stats reports the process's peak RSS and counters.
func (s *Server) Stats(context.Context) (*plugins.Stats, error) {
	s.mu.Lock()
	n := len(s.parts)
	s.mu.Unlock()
	return &plugins.Stats{MaxRSSBytes: plugins.ProcessMaxRSS(), Partitions: n, Runs: s.runs.Load()}, nil
}
