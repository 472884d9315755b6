package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
	"gorgonia.org/tensor"
)

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
	// Profile, when set, receives the timings of this run: the host's,
	// and each partition's inside its backend, per plan step where the
	// backend times its steps (the cpu and gpu backends do).
	Profile *Profile
	// RetryOf marks this Run as the retry of a Run that failed because a
	// backend instance died (its *plugins.DiedError; inference is
	// idempotent, so a server may retry once). Where the session runs more
	// than one instance of that backend (Options.Instances), this Run
	// avoids the instance that died: it takes another one as soon as one
	// is free, and the dead one only once its replacement is ready. The
	// replacement starts at once instead of on the next Run that needs it.
	// With one instance, the retry waits for the replacement, as any Run
	// would.
	RetryOf *plugins.DiedError
}

// errRunTimeout is the cause of a context ended by Options.RunTimeout.
var errRunTimeout = errors.New("run timeout")

// RunWith is Run with options.
func (s *Session) RunWith(ctx context.Context, inputs map[string]*tensor.Dense, ro RunOptions) (map[string]*tensor.Dense, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.opts.RunTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.opts.RunTimeout, errRunTimeout)
		defer cancel()
	}
	res, err := s.runWith(ctx, inputs, ro)
	if err != nil {
		return nil, s.runError(ctx, err)
	}
	return res, nil
}

// runError adds to a failed Run's error what ended it: the session closing,
// or the run timeout.
func (s *Session) runError(ctx context.Context, err error) error {
	switch {
	case s.closed.Load() && !errors.Is(err, errClosed):
		return fmt.Errorf("%w: %w", errClosed, err)
	case ctx.Err() != nil && context.Cause(ctx) == errRunTimeout:
		return fmt.Errorf("run timed out after %v (Options.RunTimeout): %w", s.opts.RunTimeout, err)
	}
	return err
}

func (s *Session) runWith(ctx context.Context, inputs map[string]*tensor.Dense, ro RunOptions) (map[string]*tensor.Dense, error) {
	conflicts, err := s.checkInputs(inputs)
	if err != nil {
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
	var prof *RunProfile
	if ro.Profile != nil {
		prof = &RunProfile{Span: plugins.Span{Start: time.Now()}}
	}
	for i, p := range s.parts {
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
		rctx := ctx
		var pp *PartitionProfile
		if prof != nil {
			pp = &PartitionProfile{Index: i, Backend: p.pool.name}
			rctx = plugins.WithProfile(ctx, &pp.RunProfile)
		}
		out, err := s.runPartition(rctx, p, in, into, ro.RetryOf)
		if err != nil {
			var remote *plugins.RemoteError
			if len(conflicts) > 0 && errors.As(err, &remote) {
				// A node refused what the conflicting sizes made of it.
				return nil, &DimConflictError{Conflicts: conflicts, Err: err}
			}
			return nil, err
		}
		if pp != nil {
			prof.Partitions = append(prof.Partitions, *pp)
		}
		for _, name := range p.outputs {
			d, ok := out[name]
			if !ok || d == nil {
				return nil, fmt.Errorf("backend %q, partition %d: no output %q", p.pool.name, p.index, name)
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
	res := make(map[string]*tensor.Dense, len(s.runModel.Graph.Outputs))
	for _, vi := range s.runModel.Graph.Outputs {
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
	if prof != nil {
		prof.Duration = time.Since(prof.Start)
		ro.Profile.Runs = append(ro.Profile.Runs, *prof)
	}
	return res, nil
}

// runPartition runs one partition on a free instance of its backend (its
// current process). Errors that name a backend partition id get the host's
// partition number instead.
func (s *Session) runPartition(ctx context.Context, p *partition, in, into map[string]*tensor.Dense, retryOf *plugins.DiedError) (map[string]*tensor.Dense, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("backend %q: run interrupted before partition %d: %w", p.pool.name, p.index, err)
	}
	var avoid *backend
	if retryOf != nil && retryOf.Backend == p.pool.name && retryOf.Instance >= 0 && retryOf.Instance < len(p.pool.members) {
		avoid = p.pool.members[retryOf.Instance]
	}
	b, err := p.pool.getAvoiding(ctx, avoid)
	if err != nil {
		return nil, err
	}
	defer p.pool.put(b)
	g, err := b.acquire(ctx)
	if err != nil {
		return nil, err
	}
	out, err := g.p.RunInto(ctx, g.ids[p.slot], in, into)
	if err == nil {
		return out, nil
	}
	label := func(id plugins.PartitionID) string {
		if slot := g.slotOf(id); slot >= 0 {
			return strconv.Itoa(p.pool.parts[slot].index)
		}
		return strconv.Itoa(p.index)
	}
	var died *plugins.DiedError
	var intr *plugins.InterruptedError
	switch {
	case errors.As(err, &died):
		died.PartitionLabel = label(died.Partition)
		died.Instance = b.instance
		return nil, died
	case errors.As(err, &intr):
		intr.PartitionLabel = label(intr.Partition)
		return nil, intr
	}
	return nil, fmt.Errorf("backend %q, partition %d: %w", b.name, p.index, err)
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
	if _, ok := s.model.Graph.Initializers[name]; !ok {
		return nil, errors.New("not produced")
	}
	t, err := s.prog.Const(name) // read back if held by reference
	if err != nil {
		return nil, err
	}
	return ir.ToDense(t.Clone())
}

// checkInputs converts the inputs (no copy) and validates them with the
// program's rules before anything is sent to a backend.
func (s *Session) checkInputs(inputs map[string]*tensor.Dense) ([]graph.DimConflict, error) {
	ts := make(map[string]*ir.Tensor, len(inputs))
	for name, d := range inputs {
		if d == nil {
			ts[name] = nil
			continue
		}
		t, err := ir.FromDenseDeclared(d, s.inputTypes[name])
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", name, err)
		}
		ts[name] = t
	}
	conflicts, err := s.prog.ValidateInputs(ts)
	for _, c := range conflicts {
		if _, seen := s.warnedDims.LoadOrStore(c.Param, true); !seen {
			s.opts.Logf("warning: %s; running with each input's own size, as ONNX Runtime does (Options.StrictDims refuses)", c)
		}
	}
	return conflicts, err
}

// DimConflictError is a Run that failed in a node after its inputs gave one
// dim_param name different sizes (which a Run lets through unless
// Options.StrictDims): the node's error, with the conflict that most likely
// caused it. Servers treat it as the caller's error, not the model's.
type DimConflictError struct {
	Conflicts []graph.DimConflict
	Err       error
}

// Error reads `node "/Reshape_1" (Reshape): cannot reshape [1, 4] to [...]
// (inputs give dim_param "seq" different sizes: "x" dim 1 = 3, "mask" dim 1
// = 4; Options.StrictDims refuses such inputs before running)`.
func (e *DimConflictError) Error() string {
	parts := make([]string, len(e.Conflicts))
	for i, c := range e.Conflicts {
		parts[i] = c.String()
	}
	return fmt.Sprintf("%v (%s; Options.StrictDims refuses such inputs before running)", e.Err, strings.Join(parts, "; "))
}

// Unwrap returns the node's error.
func (e *DimConflictError) Unwrap() error { return e.Err }

// ensureRunning restarts a backend whose process has exited and recompiles
