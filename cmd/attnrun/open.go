package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/budget"
	"github.com/attnrun/attnrun/runtime/session"
)

// sessionOptions maps the global flags to session options.
func (g *globalFlags) sessionOptions() session.Options {
	logf := func(format string, args ...any) {
		fmt.Fprintln(os.Stderr, "attnrun: "+flagNames.Replace(fmt.Sprintf(format, args...)))
	}
	return session.Options{
		Backend:        g.backend,
		PluginDir:      g.pluginDir,
		PluginLock:     g.pluginLock,
		NoFallback:     g.noFallback,
		Threads:        g.threads,
		MaxTensorBytes: g.maxTensorBytes,
		MaxMemoryBytes: g.maxMemoryBytes,
		NoFuse:         g.noFuse,
		Precision:      g.precision,
		StrictDims:     g.strictDims,
		RunTimeout:     g.timeout,
		Logf:           logf,
	}
}

// checkPluginDir refuses a --plugin-dir that is not a directory, whatever
// the backend: with the built-in cpu backend the flag is otherwise never
// read, and a mistyped path would pass in silence.
func (g *globalFlags) checkPluginDir() error {
	if g.pluginDir == "" {
		return nil
	}
	st, err := os.Stat(g.pluginDir)
	switch {
	case err != nil:
		return usageErrorf("--plugin-dir: %v", err)
	case !st.IsDir():
		return usageErrorf("--plugin-dir %s: not a directory", g.pluginDir)
	}
	return nil
}

// parseMaxMemory reads --max-memory into maxMemoryBytes: a byte count,
// none (-1: no budget) or empty (0: the default).
func (g *globalFlags) parseMaxMemory() error {
	switch strings.ToLower(strings.TrimSpace(g.maxMemory)) {
	case "":
		g.maxMemoryBytes = 0
		return nil
	case "none":
		g.maxMemoryBytes = -1
		return nil
	}
	n, err := budget.Parse(g.maxMemory)
	if err != nil {
		return usageErrorf("--max-memory: %v", err)
	}
	g.maxMemoryBytes = n
	return nil
}

// checkPrecision validates --precision.
func (g *globalFlags) checkPrecision() error {
	if _, err := ops.ParsePrecision(g.precision); err != nil {
		return usageErrorf("--precision: %v", err)
	}
	return nil
}

// open starts a session on a model; close it with g.close.
func (g *globalFlags) open(ctx context.Context, path string) (*session.Session, error) {
	return g.openWith(ctx, path, g.sessionOptions())
}

// close closes a session that open or openWith returned.
func (g *globalFlags) close(s *session.Session) error { return g.live.close(s) }

// openWith is open with options derived from the flags.
func (g *globalFlags) openWith(ctx context.Context, path string, opts session.Options) (*session.Session, error) {
	if g.maxTensorBytes <= 0 {
		return nil, usageErrorf("--max-tensor-bytes must be positive")
	}
	if g.threads < 0 {
		return nil, usageErrorf("--threads must be ≥ 0")
	}
	if err := g.checkPrecision(); err != nil {
		return nil, err
	}
	if g.timeout < 0 {
		return nil, usageErrorf("--timeout must be ≥ 0")
	}
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if st.IsDir() {
		hint := ""
		if _, err := os.Stat(filepath.Join(path, "model.onnx")); err == nil {
			hint = fmt.Sprintf(" (did you mean %s?)", filepath.Join(path, "model.onnx"))
		}
		return nil, fmt.Errorf("%s is a directory, not an ONNX model file%s", path, hint)
	}
	s, err := session.Open(ctx, path, opts)
	if err != nil {
		return nil, cliError(err)
	}
	g.live.add(s)
	return s, nil
}

// flagError is an error whose message names the CLI flag instead of the
// library option it maps to; it unwraps to the original error.
type flagError struct {
	msg string
	err error
}

func (e flagError) Error() string { return e.msg }
func (e flagError) Unwrap() error { return e.err }

// flagNames rewrites the library option names in messages to the CLI
// flags that set them.
var flagNames = strings.NewReplacer("Options.MaxTensorBytes", "--max-tensor-bytes", budget.LimitName, "--max-memory", "Options.StrictDims", "--strict-dims", "Options.RunTimeout", "--timeout")

// cliError rewrites library option names in err's message to the flags
// that set them.
func cliError(err error) error {
	msg := err.Error()
	if out := flagNames.Replace(msg); out != msg {
		return flagError{out, err}
	}
	return err
}

// runIR runs a session on ir tensors (the session API takes gorgonia Dense
// values; the conversion shares memory).
func runIR(ctx context.Context, s *session.Session, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	return runIRWith(ctx, s, in, session.RunOptions{})
}

// runIRWith is runIR with run options (session.RunIR with the CLI's flag
// names in errors).
func runIRWith(ctx context.Context, s *session.Session, in map[string]*ir.Tensor, ro session.RunOptions) (map[string]*ir.Tensor, error) {
	out, err := s.RunIR(ctx, in, ro)
	if err != nil {
		return nil, cliError(err)
	}
	return out, nil
}

// sessionRunner adapts a session to conform.Runner.
type sessionRunner struct {
	g *globalFlags
	s *session.Session
}

func (r sessionRunner) InputNames() []string  { return valueNames(r.s.Inputs()) }
func (r sessionRunner) OutputNames() []string { return valueNames(r.s.Outputs()) }
func (r sessionRunner) Close() error          { return r.g.close(r.s) }
func (r sessionRunner) Run(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	return runIR(ctx, r.s, in)
}

func valueNames(vs []*ir.ValueInfo) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}
