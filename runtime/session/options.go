package session

import (
	"fmt"
	"os"
	"strings"
	"time"

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
	// Threads is the number of compute threads per backend (0: the
	// backend's default).
	Threads int
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
	// NoSharedMemory makes tensors travel as bytes inside the gRPC messages
	// instead of through the memory region shared with each backend
	// process (see package plugins); for measurement and diagnosis.
	NoSharedMemory bool
	// RunTimeout bounds each Run (0: no bound beyond the caller's context).
	// A run past it returns an error wrapping context.DeadlineExceeded.
	RunTimeout time.Duration
	// Logf receives fallback and lifecycle lines (default: stderr).
	Logf func(format string, args ...any)
	// SelfExe is the executable re-executed as the CPU backend (default
	// os.Executable()); it must call cpu.ServeIfRequested first thing.
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

// compileOptions are the options every partition is compiled with.
func (o *Options) compileOptions() plugins.CompileOptions {
	return plugins.CompileOptions{Threads: o.Threads, MaxTensorBytes: o.MaxTensorBytes, NoFuse: o.NoFuse, MaxMemoryBytes: o.MaxMemoryBytes, Precision: o.Precision}
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
