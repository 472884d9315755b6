// Command attnrun runs ONNX attention models exported from PyTorch, checks
// them against reference outputs, and inspects them. Compute happens in
// backend processes: the built-in CPU backend is this same binary
// re-executed; other backends are attnrun-backend-* plugins.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/budget"
	"github.com/attnrun/attnrun/runtime/graph"
)

// usageError marks errors in how attnrun was called (exit status 2).
type usageError struct{ error }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// globalFlags are shared by every command that opens a model.
type globalFlags struct {
	backend        string
	pluginDir      string
	noFallback     bool
	threads        int
	maxTensorBytes int64
	maxMemory      string
	maxMemoryBytes int64 // --max-memory, parsed before any command runs
	noFuse         bool
	precision      string
	strictDims     bool
	pluginLock     string
	timeout        time.Duration
	// live holds the sessions open now, for closing them when a signal
	// forces attnrun to exit.
	live liveSessions
	// signals is the process-wide signal handling; a command that handles
	// some signals itself (serve: SIGTERM drains, SIGHUP reloads) takes
	// them over with handOver.
	signals *signalWatch
}

func main() {
	// Re-executed as the CPU backend, this binary serves from package
	// cpu's init and never gets here.
	os.Exit(run(os.Args[1:]))
}

// run executes the CLI and returns the exit status: 0 success, 1 failure,
// 2 usage error, 128+n after signal n (130 for Ctrl-C).
func run(args []string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := &globalFlags{}
	sig := onSignal(cancel, g)
	defer sig.stop()
	g.signals = sig
	root := newRootCmd(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if s := sig.caught(); s != nil {
		fmt.Fprintln(os.Stderr, "attnrun: "+interrupted(s))
		return signalStatus(s)
	}
	if err == nil {
		return 0
	}
	msg, usage := describe(err)
	fmt.Fprintln(os.Stderr, "attnrun: "+msg)
	if usage {
		return 2
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// describe renders err as the one line attnrun prints, and reports whether
// it is a usage error (exit status 2). Cobra's "unknown command" error is
// not typed and spans several lines (with "Did you mean this?"
// suggestions); it is folded into one line and counted as a usage error.
func describe(err error) (string, bool) {
	msg := cliError(err).Error() // flags, not library option names
	var ue usageError
	usage := errors.As(err, &ue)
	if strings.HasPrefix(msg, "unknown command ") {
		usage = true
		first, rest, _ := strings.Cut(msg, "\n")
		if _, sugg, ok := strings.Cut(rest, "Did you mean this?"); ok {
			if s := strings.Fields(sugg); len(s) > 0 {
				first += "; did you mean " + strings.Join(s, " or ") + "?"
			}
		}
		msg = first + " (see attnrun --help)"
	}
	// Every error is one line on stderr.
	if strings.ContainsAny(msg, "\r\n") {
		var parts []string
		for _, l := range strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }) {
			if l = strings.TrimSpace(l); l != "" {
				parts = append(parts, l)
			}
		}
		msg = strings.Join(parts, "; ")
	}
	// And a short one: long lists are elided with their count.
	return ir.Elide(msg), usage
}

// exitError carries a specific exit status (conform failures).
type exitError struct {
	error
	code int
}

func newRootCmd(g *globalFlags) *cobra.Command {
	root := &cobra.Command{
		Use:           "attnrun",
		Short:         "Run ONNX attention models exported from PyTorch, on pluggable backends",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := g.checkPluginDir(); err != nil {
			return err
		}
		return g.parseMaxMemory()
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.backend, "backend", "cpu", "backend to run on (list them with: attnrun backends)")
	pf.StringVar(&g.pluginDir, "plugin-dir", "", "directory of attnrun-backend-* plugins (default $ATTNRUN_PLUGIN_DIR)")
	pf.BoolVar(&g.noFallback, "no-fallback", false, "fail instead of falling back to the cpu backend for nodes the chosen backend does not take")
	pf.IntVar(&g.threads, "threads", 0, "compute threads in the backend (default: number of CPUs)")
	pf.Int64Var(&g.maxTensorBytes, "max-tensor-bytes", graph.DefaultMaxTensorBytes, "largest tensor (in bytes) attnrun will load or create")
	mem, from := budget.Machine()
	pf.StringVar(&g.maxMemory, "max-memory", "", fmt.Sprintf("total memory budget of the session, e.g. 8GiB or 512MiB, or none; a run that cannot fit is refused before it allocates (default: half the machine's memory, cgroup limit or ulimit -v, whichever is smallest: %s of %s %s here)", budget.Format(mem/2), budget.Format(mem), from))
	pf.BoolVar(&g.noFuse, "no-fuse", false, "turn off attention fusion (run the exported graph node by node)")
	pf.StringVar(&g.precision, "precision", "fp32", "arithmetic of float32 matrix products: fp32, or bf16 (bfloat16 operands, fp32 accumulation; needs AVX512_BF16)")
	pf.BoolVar(&g.strictDims, "strict-dims", false, "refuse inputs that give one dim_param name two sizes (by default they run, with a warning, as in ONNX Runtime)")
	pf.StringVar(&g.pluginLock, "plugin-lock", "", "lock file pinning each plugin's SHA-256 (default: attnrun-plugins.lock in the plugin directory, if present)")
	pf.DurationVar(&g.timeout, "timeout", defaultRunTimeout, "bound on each model run, e.g. 30s or 10m (0: none)")
	root.AddCommand(newRunCmd(g), newConformCmd(g), newInspectCmd(g), newBackendsCmd(g), newBenchCmd(g), newOpsCmd(g), newProfileCmd(g))
	setVersion(root)
	root.AddCommand(newServeCmd(g))
	for _, c := range root.Commands() {
		c.Args = wrapArgs(c.Args)
	}
	return root
}

// wrapArgs turns positional-argument errors into usage errors.
func wrapArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	if check == nil {
		return nil
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{fmt.Errorf("%s: %w (see attnrun %s --help)", cmd.Name(), err, cmd.Name())}
		}
		return nil
	}
}

// defaultRunTimeout is --timeout's default: a bound on each run that no
// model of the size attnrun targets comes near on a CPU, so that a run that
// hangs anyway ends with an error.
const defaultRunTimeout = 10 * time.Minute

// Signals. SIGINT (Ctrl-C), SIGTERM and SIGHUP cancel the command's
// context: a run in flight returns at once, the command's sessions close
// (backends are killed within Session.Close's bound, go-plugin's socket
// directories were removed when connected) and attnrun exits with 128+n.
// If unwinding takes longer than forceExitAfter (a model still loading), or a
// second signal comes, attnrun closes the open sessions and exits anyway:
// within a second of the signal in every case.
const forceExitAfter = 700 * time.Millisecond

// signals are the signals attnrun handles.
var signals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// signalWatch is the signal handling of one attnrun invocation.
type signalWatch struct {
	ch   chan os.Signal
	mu   sync.Mutex
	got  os.Signal
	done chan struct{}
}

// onSignal installs the signal handling: cancel is called on the first
// signal; g's live sessions are closed if attnrun must exit by force.
func onSignal(cancel context.CancelFunc, g *globalFlags) *signalWatch {
	w := &signalWatch{ch: make(chan os.Signal, 2), done: make(chan struct{})}
	signal.Notify(w.ch, signals...)
	go func() {
		var s os.Signal
		select {
		case s = <-w.ch:
		case <-w.done:
			return
		}
		w.mu.Lock()
		w.got = s
		w.mu.Unlock()
		cancel()
		t := time.NewTimer(forceExitAfter)
		select {
		case <-w.done:
			return
		case <-w.ch:
		case <-t.C:
		}
		g.live.closeAll(150 * time.Millisecond)
		fmt.Fprintln(os.Stderr, "attnrun: "+interrupted(s))
		os.Exit(signalStatus(s))
	}()
	return w
}

// handOver stops the watch from handling sigs: the command that calls it
// handles them itself (and must call signal.Notify for them first, so that
// none is lost or left to Go's default action in between). The others stay
// watched.
func (w *signalWatch) handOver(sigs ...os.Signal) {
	var keep []os.Signal
	for _, s := range signals {
		if !slices.Contains(sigs, s) {
			keep = append(keep, s)
		}
	}
	signal.Stop(w.ch)
	if len(keep) > 0 {
		signal.Notify(w.ch, keep...)
	}
}

// caught is the signal received, nil if none.
func (w *signalWatch) caught() os.Signal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got
}

// stop uninstalls the handling (the command has returned).
func (w *signalWatch) stop() {
	signal.Stop(w.ch)
	close(w.done)
}

// signalStatus is the exit status after signal s: 128 + its number.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// interrupted is the line printed after signal s, e.g. "interrupted
// (SIGINT)".
func interrupted(s os.Signal) string {
	names := map[os.Signal]string{os.Interrupt: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP"}
	return "interrupted (" + names[s] + ")"
}

// liveSessions are the sessions the command has open.
type liveSessions struct {
	mu   sync.Mutex
	open map[closer]struct{}
}

type closer interface{ Close() error }

func (l *liveSessions) add(c closer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[closer]struct{}{}
	}
	l.open[c] = struct{}{}
}

// close closes c and forgets it.
func (l *liveSessions) close(c closer) error {
	l.mu.Lock()
	delete(l.open, c)
	l.mu.Unlock()
	return c.Close()
}

// closeAll closes every live session concurrently, waiting at most limit.
func (l *liveSessions) closeAll(limit time.Duration) {
	l.mu.Lock()
	done := make(chan struct{}, len(l.open))
	for c := range l.open {
		go func() {
			c.Close()
			done <- struct{}{}
		}()
	}
	n := len(l.open)
	l.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	for ; n > 0; n-- {
		select {
		case <-done:
		case <-t.C:
			return
		}
	}
}
