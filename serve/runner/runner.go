// Package runner runs one model on N backend instances for the server:
// one session (package runtime/session) with Options.Instances, whose Runs
// from several goroutines compute in parallel on different instances, and
// a retry on another instance when a run's backend died.
package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/session"
)

// Runner runs one model on a set of backend instances.
type Runner interface {
	// Instances is how many runs can proceed at once.
	Instances() int
	// Run runs the model once, waiting for a free instance (as long as ctx
	// allows; ctx ending stops the run and frees its instance). A run whose
	// backend died is retried once (inference is idempotent) on another
	// instance where there is one (session.RunOptions.RetryOf); if the
	// retry fails too, the error is a *BackendError.
	Run(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error)
	// Close stops every instance's backends. Runs must have finished.
	Close() error
}

// BackendError reports a run that failed because its backend process died,
// on the first try and on the retry.
type BackendError struct {
	First, Retry error
}

func (e *BackendError) Error() string {
	return fmt.Sprintf("%v; the retry failed too: %v", e.First, e.Retry)
}

// Unwrap returns both failures.
func (e *BackendError) Unwrap() []error { return []error{e.First, e.Retry} }

// Options configure a Pool.
type Options struct {
	// Instances is the number of backend instances (≥ 1); it overrides
	// Session.Instances.
	Instances int
	// Session configures the session (backend, threads per instance,
	// limits, logging).
	Session session.Options
	// OnBackendDied is called (from the failing run's goroutine) each time a
	// run finds its backend dead; the session starts the instance's
	// replacement.
	OnBackendDied func(err *plugins.DiedError)
}

// Pool is a Runner over one session of the model with Options.Instances
// backend instances.
type Pool struct {
	opts Options
	s    *session.Session
}

var _ Runner = (*Pool)(nil)

// Open loads the model at path into a session with opts.Instances
// instances of its backends (started in parallel by the session).
func Open(ctx context.Context, path string, opts Options) (*Pool, error) {
	if opts.Instances < 1 {
		return nil, fmt.Errorf("instances must be ≥ 1, not %d", opts.Instances)
	}
	so := opts.Session
	so.Instances = opts.Instances
	s, err := session.Open(ctx, path, so)
	if err != nil {
		return nil, err
	}
	return &Pool{opts: opts, s: s}, nil
}

// Session is the pool's session (for metadata: inputs, outputs, the
// compiled program).
func (p *Pool) Session() *session.Session { return p.s }

// Instances is the number of backend instances.
func (p *Pool) Instances() int { return p.s.Instances() }

// Run runs the model, retrying once on another instance when its backend
// died.
func (p *Pool) Run(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	out, err := p.s.RunIR(ctx, in, session.RunOptions{})
	died := p.died(err)
	if died == nil {
		return out, err
	}
	out, retryErr := p.s.RunIR(ctx, in, session.RunOptions{RetryOf: died})
	if retryErr != nil {
		p.died(retryErr)
		return nil, &BackendError{First: err, Retry: retryErr}
	}
	return out, nil
}

// died returns err's *plugins.DiedError, if any, telling OnBackendDied.
func (p *Pool) died(err error) *plugins.DiedError {
	var died *plugins.DiedError
	if !errors.As(err, &died) {
		return nil
	}
	if p.opts.OnBackendDied != nil {
		p.opts.OnBackendDied(died)
	}
	return died
}

// Close closes the session (killing its backend processes).
func (p *Pool) Close() error { return p.s.Close() }

// Pids lists the process ids of every instance's running backends (for
// tests and the fault script).
func (p *Pool) Pids() []int {
	var pids []int
	for _, b := range p.s.Backends() {
		if b.Pid > 0 && b.Available {
			pids = append(pids, b.Pid)
		}
	}
	return pids
}
