package session

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/budget"
)

// Options configure a Session.
type Options struct {
	// Backend is the preferred backend's name (default "cpu").
	Backend string
	// PluginDir is where attnrun-backend-* executables live ("" means
	// $ATTNRUN_PLUGIN_DIR).
	PluginDir string
	// PluginLock names a lock file pinning the plugins' SHA-256 (see
	// plugins.LockFileName for the format); "" uses the plugin directory's
	// attnrun-plugins.lock when there is one. With a lock file in effect, a
	// plugin it does not pin is refused.
	PluginLock string
	// NoFallback makes a node the preferred backend refuses an error instead
	// of running it on the CPU backend.
	NoFallback bool
	// Threads is the number of compute threads of each backend instance
	// (see Instances). 0 is the backend's default: for the CPU backend, as
	// many as the machine has cores (GOMAXPROCS) with one instance, and
	// with n instances cores/n each (at least 1), so that the instances
	// together use every core without oversubscribing it. A session thus
	// computes on up to Instances × Threads threads. A CPU backend process
	// given a thread count also runs with that GOMAXPROCS (one Go processor
	// per compute thread), so that idle processors of one instance do not
	// take time from another's.
	Threads int
	// Instances is the number of instances of each backend the session
	// runs (0 means 1): each instance is a backend process of its own (or,
	// with InProcess, an in-process CPU backend) with every partition of
	// its backend compiled in it once, at Open. One instance computes one
	// Run at a time; Runs called from several goroutines compute in
	// parallel on different instances, and a Run that finds all of them
	// busy waits for one (as long as its context allows). Each instance
	// holds its own copy of the compiled partitions and their weights
	// (in-process instances share the weights, not the packed forms), so
	// memory grows with Instances. For throughput, use Instances × Threads
	// ≈ cores (e.g. 2 instances × 1 thread on 2 cores); for the latency of
	// one Run, one instance with all the threads.
	Instances int
	// MaxTensorBytes bounds any one tensor (0: the default, 4 GiB).
	MaxTensorBytes int64
	// MaxMemoryBytes is the session's memory budget (package
	// runtime/budget): the host and each backend process keep what they
	// allocate for the model within it (weights, constants, plans, run
	// memory, the shared tensor region), and a run that cannot fit is
	// refused before it allocates. 0: budget.DefaultLimit (half of the
	// machine's memory, cgroup limit or ulimit -v, the smallest);
	// negative: no budget.
	MaxMemoryBytes int64
	// NoFuse turns off attention fusion in every backend.
	NoFuse bool
	// Precision is the arithmetic of float32 matrix products in every
	// backend: "" or "fp32", or "bf16" (operands rounded to bfloat16, fp32
	// accumulation; see ops.Precision). Open fails where a backend cannot
	// honour it (the CPU backend needs AVX512_BF16 for bf16).
	Precision string
	// StrictDims refuses a run whose inputs give one dim_param name two
	// sizes. Without it the run goes ahead, as in ONNX Runtime, and the
	// session logs one warning per dim_param name (see
	// graph.Program.ValidateInputs).
	StrictDims bool
	// InProcess runs the CPU backend inside this process instead of in a
	// process of its own (the default): no process to start, no gRPC, no
	// shared memory region, so the lowest latency per Run (inputs reach
	// the kernels as the caller's own memory, outputs come back without a
	// copy) and the fastest Open. The price is isolation: a crash in a
	// kernel (a panic in a worker goroutine, a fatal error, running out of
	// memory) takes the host down with it, where a backend process would
	// only fail the Run and be replaced; a cancelled or timed-out Run
	// returns when the node it is running finishes, not at once (Go cannot
	// stop a running kernel, and there is no watchdog); and the backend
	// shares the host's memory, threads and process-wide settings (the
	// GEMM thread count, see Threads). A panic in the Run's own goroutine
	// is still recovered: that Run fails naming the node, and the next one
	// gets a fresh backend. Partitioning, fallback logging, the limits,
	// cancellation between nodes, Precision, ExtraOutputs and attention
	// weights, and profiles with per-step times (RunOptions.Profile: the
	// backend's pid is then this process's) work as with a backend process;
	// the in-process backend keeps its memory within MaxMemoryBytes as a
	// backend process does (it counts the weights it shares with the host),
	// but leaves Go's soft memory limit (debug.SetMemoryLimit), which a
	// backend process sets to the budget, to this program. Other backends
	// (plugins) always run in processes of their own.
	InProcess bool
	// WorkerSpin, when set, is how long the compute workers of each
	// backend process poll for their next parallel region (or run) before
	// parking, passed to it as ops.SpinEnv; nil leaves the backend's own
	// default (the host's ATTNRUN_SPIN if set, else 2ms, ops.SpinTime).
	// Shorter gives the cores back to other processes between runs (a
	// server and its clients on the same machine: see the README's serve
	// measurements), longer keeps a steady stream of runs from waiting for
	// parked vCPUs to wake. Not with InProcess: those workers are this
	// process's, set by ATTNRUN_SPIN before it starts.
	WorkerSpin *time.Duration
	// NoSharedMemory makes tensors travel as bytes inside the gRPC messages
	// instead of through the memory region shared with each backend
	// process (see package plugins); for measurement and diagnosis.
	NoSharedMemory bool
	// RunTimeout bounds each Run (0: no bound beyond the caller's context).
	// A run past it returns an error wrapping context.DeadlineExceeded.
	RunTimeout time.Duration
	// Logf receives fallback and lifecycle lines, and a warning for each
	// attention core a plan runs unfused (default: stderr).
	Logf func(format string, args ...any)
	// OnBackendRestart, when set, is called each time the session has
	// replaced a backend process that ended (killed, crashed, or killed by
	// the host for not answering) with a new one that compiled every
	// partition: the backend's name, its instance and the new pid. It is
	// called from the session's background goroutine, with no lock held;
	// a restart that failed is not one (its error goes to Logf and to the
	// next Run).
	OnBackendRestart func(backend string, instance, pid int)
	// SelfExe is the executable re-executed as the CPU backend (default
	// os.Executable(): this program). Any Go program that imports this
	// package serves the CPU backend when so re-executed: package
	// backends/cpu's init does it before main runs (see its doc), so an
	// embedding program needs no call of its own, and its main never runs
	// in the backend process.
	SelfExe string
	// ExtraOutputs names intermediate values of the graph that every Run
	// also returns, as if they were graph outputs (e.g. each attention
	// core's weights, graph.AttentionCore.Weights, for heat maps). A chain
	// whose intermediate is exposed this way is fused only when the fused
	// kernel can write that intermediate too.
	ExtraOutputs []string
	// AttentionWeights makes every Run also return the weights of each
	// attention core (Session.AttentionCores) and its mask, where the mask
	// is computed inside the graph, as extra outputs.
	AttentionWeights bool

	// budget is the host's side of MaxMemoryBytes (set by defaults).
	budget *budget.Budget
	// arena is the session's tensor arena (NewTensor), passed to every
	// backend process; nil in process or without shared memory.
	arena *plugins.Arena
}

func (o *Options) defaults() error {
	if o.Backend == "" {
		o.Backend = CPU
	}
	if o.PluginDir == "" {
		o.PluginDir = os.Getenv(plugins.PluginDirEnv)
	}
	if o.RunTimeout < 0 {
		return fmt.Errorf("run timeout %v is negative (Options.RunTimeout)", o.RunTimeout)
	}
	switch {
	case o.Instances < 0:
		return fmt.Errorf("%d instances is negative (Options.Instances)", o.Instances)
	case o.Instances == 0:
		o.Instances = 1
	}
	if o.Threads < 0 {
		return fmt.Errorf("%d threads is negative (Options.Threads)", o.Threads)
	}
	if o.WorkerSpin != nil {
		switch {
		case *o.WorkerSpin < 0:
			return fmt.Errorf("worker spin %v is negative (Options.WorkerSpin)", *o.WorkerSpin)
		case o.InProcess:
			return fmt.Errorf("Options.WorkerSpin sets backend processes' spin; an in-process backend's workers spin as this process's %s says", ops.SpinEnv)
		}
	}
	if o.Threads == 0 && o.Instances > 1 {
		o.Threads = max(1, runtime.GOMAXPROCS(0)/o.Instances)
	}
	if o.Logf == nil {
		o.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "attnrun: "+format+"\n", args...)
		}
	}
	if o.MaxMemoryBytes == 0 {
		o.MaxMemoryBytes = budget.DefaultLimit()
	}
	if o.budget == nil {
		o.budget = budget.New(max(o.MaxMemoryBytes, 0))
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

// spinEnv is the environment that passes WorkerSpin to a backend process
// (none when it is not set).
func (o *Options) spinEnv() []string {
	if o.WorkerSpin == nil {
		return nil
	}
	return []string{ops.SpinEnv + "=" + o.WorkerSpin.String()}
}

// compileOptions are the options every partition is compiled with.
func (o *Options) compileOptions() plugins.CompileOptions {
	return plugins.CompileOptions{Threads: o.Threads, MaxTensorBytes: o.MaxTensorBytes, NoFuse: o.NoFuse, MaxMemoryBytes: o.MaxMemoryBytes, Precision: o.Precision}
}

// logWriter routes go-plugin's log lines to Logf, a backend's own
// warnings tidied (plugins.TidyLogLine).
type logWriter struct{ logf func(string, ...any) }

func (w logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if l != "" {
			w.logf("%s", plugins.TidyLogLine(l))
		}
	}
	return len(p), nil
}
