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
	"strings"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/backends/cpu"
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
	noFuse         bool
	precision      string
}

func main() {
	// When re-executed as the CPU backend, serve and never return.
	cpu.ServeIfRequested()
	os.Exit(run(os.Args[1:]))
}

// run executes the CLI and returns the exit status: 0 success, 1 failure,
// 2 usage error.
func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
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
	msg := err.Error()
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
	return msg, usage
}

// exitError carries a specific exit status (conform failures).
type exitError struct {
	error
	code int
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "attnrun",
		Short:         "Run ONNX attention models exported from PyTorch, on pluggable backends",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.backend, "backend", "cpu", "backend to run on (list them with: attnrun backends)")
	pf.StringVar(&g.pluginDir, "plugin-dir", "", "directory of attnrun-backend-* plugins (default $ATTNRUN_PLUGIN_DIR)")
	pf.BoolVar(&g.noFallback, "no-fallback", false, "fail instead of falling back to the cpu backend for nodes the chosen backend does not take")
	pf.IntVar(&g.threads, "threads", 0, "compute threads in the backend (default: number of CPUs)")
	pf.Int64Var(&g.maxTensorBytes, "max-tensor-bytes", graph.DefaultMaxTensorBytes, "largest tensor (in bytes) attnrun will load or create")
	pf.BoolVar(&g.noFuse, "no-fuse", false, "turn off attention fusion (run the exported graph node by node)")
	pf.StringVar(&g.precision, "precision", "fp32", "arithmetic of float32 matrix products: fp32, or bf16 (bfloat16 operands, fp32 accumulation; needs AVX512_BF16)")
	root.AddCommand(newRunCmd(g), newConformCmd(g), newInspectCmd(g), newBackendsCmd(g), newBenchCmd(g), newOpsCmd(g))
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
