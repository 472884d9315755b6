// Package runner runs one model on N backend instances for the server.
//
// Runner is the seam between the server and the library: today Pool opens N
// sessions of the model (each with its own backend processes) and hands
// them to runs through a free list; when session.Options gains a number of
// instances per session (issue 10), a Runner over one such session replaces
// Pool in a few lines.
package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/session"
)

// Runner runs one model on a set of backend instances.
type Runner interface {
	// Instances is how many runs can proceed at once.
	Instances() int
	// Run runs the model once, waiting for a free instance. A run whose
	// backend died is retried once (inference is idempotent) on the first
	// free instance — the dead one restarts its backend when it runs
	// next; if the retry fails too, the error is a *BackendError.
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
	// Instances is the number of sessions (≥ 1).
	Instances int
	// Session configures each session (backend, threads, limits, logging).
	Session session.Options
	// OnBackendDied is called (from the failing run's goroutine) each time a
	// run finds its backend dead; that instance restarts its backend on its
	// next run.
	OnBackendDied func(err *plugins.DiedError)
}

// Pool is a Runner over N sessions of one model.
type Pool struct {
	opts    Options
	all     []*session.Session
	free    chan *session.Session
	outputs []*ir.ValueInfo
	closed  atomic.Bool
}

var _ Runner = (*Pool)(nil)

// Open loads the model at path into opts.Instances sessions, started in
// parallel.
func Open(ctx context.Context, path string, opts Options) (*Pool, error) {
	if opts.Instances < 1 {
		return nil, fmt.Errorf("instances must be ≥ 1, not %d", opts.Instances)
	}
	p := &Pool{opts: opts, all: make([]*session.Session, opts.Instances), free: make(chan *session.Session, opts.Instances)}
	errs := make([]error, opts.Instances)
	var wg sync.WaitGroup
	for i := range p.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.all[i], errs[i] = session.Open(ctx, path, opts.Session)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			p.Close()
			return nil, err
		}
	}
	for _, s := range p.all {
		p.free <- s
	}
	p.outputs = p.all[0].Outputs()
	return p, nil
}

// Session is one of the pool's sessions (for metadata: inputs, outputs,
// the compiled program).
func (p *Pool) Session() *session.Session { return p.all[0] }

// Instances is the number of sessions.
func (p *Pool) Instances() int { return len(p.all) }

// Run runs the model on a free session, retrying once when its backend
// died.
func (p *Pool) Run(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	dense := make(map[string]*tensor.Dense, len(in))
	for name, t := range in {
		d, err := ir.ToDense(t)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", name, err)
		}
		dense[name] = d
	}
	out, err := p.runOnce(ctx, dense)
	var died *plugins.DiedError
	if !errors.As(err, &died) {
		return out, err
	}
	out, retryErr := p.runOnce(ctx, dense)
	if retryErr != nil {
		return nil, &BackendError{First: err, Retry: retryErr}
	}
	return out, nil
}

// runOnce runs on the first free session.
func (p *Pool) runOnce(ctx context.Context, in map[string]*tensor.Dense) (map[string]*ir.Tensor, error) {
	var s *session.Session
	select {
	case s = <-p.free:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out, err := s.Run(ctx, in)
	p.free <- s
	var died *plugins.DiedError
	if errors.As(err, &died) && p.opts.OnBackendDied != nil {
		p.opts.OnBackendDied(died)
	}
	if err != nil {
		return nil, err
	}
	res := make(map[string]*ir.Tensor, len(out))
	for _, vi := range p.outputs {
		d, ok := out[vi.Name]
		if !ok {
			return nil, fmt.Errorf("output %q missing from the backend's reply", vi.Name)
		}
		t, err := ir.FromDenseAs(d, vi.Type.DType)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", vi.Name, err)
		}
		res[vi.Name] = t
	}
	return res, nil
}

// Close closes every session (killing its backend processes).
func (p *Pool) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	for _, s := range p.all {
		if s != nil {
			s.Close()
		}
	}
	return nil
}

// Pids lists the process ids of every instance's running backends (for
// tests and the fault script).
func (p *Pool) Pids() []int {
	var pids []int
	for _, s := range p.all {
		for _, b := range s.Backends() {
			if b.Pid > 0 && b.Available {
				pids = append(pids, b.Pid)
			}
		}
	}
	return pids
}
