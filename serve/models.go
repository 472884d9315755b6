package serve

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
	"github.com/attnrun/attnrun/serve/batch"
	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/repo"
	"github.com/attnrun/attnrun/serve/runner"
)

// loaded is one model version being served.
type loaded struct {
	name, version string
	fingerprint   string
	runner        runner.Runner
	sched         *batch.Scheduler
	prog          *graph.Program
	inputs        []*ir.ValueInfo
	outputs       []*ir.ValueInfo
	// batching is the dynamic batching in force (MaxBatchSize ≤ 1: off).
	batching repo.Batching
	// users counts the requests holding this version (see Server.lookup).
	users sync.WaitGroup
}

// modelSettings are a model's effective settings: its config over the
// server's defaults.
type modelSettings struct {
	instances, threads, maxQueue int
	backend                      string
	workerSpin                   *time.Duration // session.Options.WorkerSpin
	policy                       repo.VersionPolicy
	batching                     repo.Batching
	batchingConfigured           bool // the model's config asked for batching
}

func (s *Server) settings(m *repo.Model) modelSettings {
	c := m.Config
	st := modelSettings{
		instances: s.opts.Instances, threads: s.opts.Session.Threads, maxQueue: s.opts.MaxQueue,
		backend: s.opts.Session.Backend, workerSpin: s.opts.Session.WorkerSpin, policy: s.opts.VersionPolicy,
		batching: repo.Batching{MaxBatchSize: s.opts.MaxBatch, MaxQueueDelay: repo.Duration(s.opts.MaxQueueDelay)},
	}
	if c.Instances > 0 {
		st.instances = c.Instances
	}
	if c.Threads > 0 {
		st.threads = c.Threads
	}
	if st.threads == 0 {
		st.threads = defaultThreads(st.instances)
	}
	if c.MaxQueue > 0 {
		st.maxQueue = c.MaxQueue
	}
	if c.WorkerSpin != nil {
		d := time.Duration(*c.WorkerSpin)
		st.workerSpin = &d
	}
	if c.Backend != "" {
		st.backend = c.Backend
	}
	if c.VersionPolicy != nil {
		st.policy = *c.VersionPolicy
	}
	if c.DynamicBatching != nil {
		st.batching, st.batchingConfigured = *c.DynamicBatching, true
	}
	return st
}

// Load loads a model, or reloads it when it is loaded: the versions its
// policy selects are opened (with force, all of them afresh; without,
// only those whose files changed), then swapped in at once, and the
// versions they replace are retired after their requests finish. A
// request is never dropped by a reload. If a version fails to open,
// nothing changes and the error says why.
func (s *Server) Load(ctx context.Context, name string, force bool) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	m, err := s.readModel(name)
	if err != nil {
		s.setReason(name, err)
		return err
	}
	st := s.settings(m)
	selected, err := m.Select(st.policy)
	if err != nil {
		err = oip.Errorf(oip.InvalidArgument, "%v", err)
		s.setReason(name, err)
		return err
	}
	s.mu.RLock()
	var current map[string]*loaded
	if e := s.models[name]; e != nil {
		current = e.versions
	}
	s.mu.RUnlock()

	next := map[string]*loaded{}
	var opened []*loaded
	for _, v := range selected {
		if old := current[v.String()]; old != nil && !force && old.fingerprint == v.Fingerprint {
			next[v.String()] = old
			continue
		}
		start := time.Now()
		l, err := s.open(ctx, name, v, st)
		if err != nil {
			for _, o := range opened {
				s.retire(o)
			}
			err = oip.Errorf(oip.InvalidArgument, "loading model %q version %s: %v", name, v, err)
			s.setReason(name, err)
			return err
		}
		s.log.Info("model version loaded", "model", name, "version", l.version, "path", v.Path,
			"instances", l.runner.Instances(), "threads", st.threads, "backend", st.backend,
			"max_batch_size", l.batching.MaxBatchSize, "max_queue_delay", time.Duration(l.batching.MaxQueueDelay).String(),
			"seconds", time.Since(start).Seconds())
		opened = append(opened, l)
		next[v.String()] = l
	}
	s.swap(name, next, "")
	for v, old := range current {
		if next[v] != old {
			s.retire(old)
		}
	}
	return nil
}

// loadRequested is Load for the repository API (HTTP and gRPC), which
// reloads afresh; a failure is logged, as Rescan logs its own, so that the
// operator sees it and not only the client that asked.
func (s *Server) loadRequested(ctx context.Context, name, protocol string) error {
	err := s.Load(ctx, name, true)
	if err != nil {
		s.log.Error("load request failed; the versions loaded before keep serving", "model", name, "protocol", protocol, "error", err.Error())
	}
	return err
}

// Unload stops serving a model. Requests in progress finish first.
func (s *Server) Unload(name string) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.mu.RLock()
	e := s.models[name]
	s.mu.RUnlock()
	if e == nil {
		if _, err := s.readModel(name); err != nil {
			return err
		}
		return nil // known, not loaded
	}
	old := e.versions
	s.swap(name, nil, "unloaded")
	for _, l := range old {
		s.retire(l)
	}
	s.log.Info("model unloaded", "model", name)
	return nil
}

// Rescan brings the server in line with its repository (SIGHUP): new
// models are loaded, models whose directories are gone are unloaded, and
// loaded models are reloaded where their files or config changed. Errors
// are logged per model and returned joined.
func (s *Server) Rescan(ctx context.Context) error {
	names, err := s.modelNames()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if err := s.Load(ctx, name, false); err != nil {
			s.log.Error("reload failed; the versions loaded before keep serving", "model", name, "error", err.Error())
			errs = append(errs, err)
		}
	}
	s.mu.RLock()
	var gone []string
	for name, e := range s.models {
		if len(e.order) > 0 && !slices.Contains(names, name) {
			gone = append(gone, name)
		}
	}
	s.mu.RUnlock()
	for _, name := range gone {
		s.Unload(name)
	}
	return joinErrors(errs)
}

func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%d models failed to load; the first: %w", len(errs), errs[0])
}

// swap installs a model's new set of versions.
func (s *Server) swap(name string, versions map[string]*loaded, reason string) {
	order := make([]string, 0, len(versions))
	for v := range versions {
		order = append(order, v)
	}
	slices.SortFunc(order, func(a, b string) int {
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		return int(x - y)
	})
	state := "READY"
	if len(order) == 0 {
		state = "UNAVAILABLE"
	}
	s.mu.Lock()
	s.models[name] = &modelEntry{name: name, versions: versions, order: order, state: state, reason: reason}
	s.mu.Unlock()
}

// setReason records why a model's last load failed.
func (s *Server) setReason(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.models[name]
	if e == nil {
		e = &modelEntry{name: name, state: "UNAVAILABLE"}
		s.models[name] = e
	}
	e.reason = err.Error()
}

// retire waits (in the background) for a replaced version's requests to
// finish, then stops its scheduler and backends.
func (s *Server) retire(l *loaded) {
	s.retiring.Add(1)
	go func() {
		defer s.retiring.Done()
		l.users.Wait()
		l.sched.Close()
		l.runner.Close()
		s.metrics.forget(l.name, l.version)
		s.log.Info("model version retired", "model", l.name, "version", l.version)
	}()
}

// open starts one version: its instances, its scheduler and its batching.
func (s *Server) open(ctx context.Context, name string, v repo.Version, st modelSettings) (*loaded, error) {
	version := v.String()
	log := s.log.With("model", name, "version", version)
	so := s.opts.Session
	so.Backend, so.Threads, so.WorkerSpin = st.backend, st.threads, st.workerSpin
	so.Logf = func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }
	// Every replacement counts, found by a run or not (a backend killed
	// while idle is replaced by the next run that picks its instance).
	so.OnBackendRestart = func(backend string, instance, pid int) {
		s.metrics.restarts.WithLabelValues(name, version, backend).Inc()
	}
	pool, err := runner.Open(ctx, v.Path, runner.Options{
		Instances: st.instances,
		Session:   so,
		OnBackendDied: func(err *plugins.DiedError) {
			log.Warn("backend died during a run; retrying the run, and the instance restarts its backend", "backend", err.Backend, "pid", err.Pid, "error", err.Error())
		},
	})
	if err != nil {
		return nil, err
	}
	sess := pool.Session()
	l := &loaded{name: name, version: version, fingerprint: v.Fingerprint, runner: pool,
		prog: sess.Program(), inputs: sess.Inputs(), outputs: sess.Outputs()}
	if err := checkServable(l); err != nil {
		pool.Close()
		return nil, err
	}
	if st.batching.MaxBatchSize > 1 {
		dim, why := batchDim(l.inputs, l.outputs)
		switch {
		case why != "" && st.batchingConfigured:
			pool.Close()
			return nil, fmt.Errorf("config.yaml asks for dynamic batching, but %s", why)
		case why != "":
			log.Info("dynamic batching off for this model", "reason", why)
		case !st.batchingConfigured && dim != s.opts.BatchDim:
			log.Info("dynamic batching off for this model", "reason", fmt.Sprintf("its leading dim is %q, not the batch dim %q (--batch-dim); enable it in the model's config.yaml if dim 0 is a batch", dim, s.opts.BatchDim))
		default:
			l.batching = st.batching
		}
	}
	l.sched = batch.New(batch.Config{
		Slots: pool.Instances(), MaxBatch: l.batching.MaxBatchSize, MaxDelay: time.Duration(l.batching.MaxQueueDelay), MaxQueue: st.maxQueue,
		OnRun: func(requests, rows int, compute time.Duration, err error) {
			s.metrics.batch.WithLabelValues(name, version).Observe(float64(requests))
			s.metrics.compute.WithLabelValues(name, version).Observe(compute.Seconds())
		},
	}, pool.Run)
	return l, nil
}

// checkServable refuses models the protocol cannot carry (string tensors).
func checkServable(l *loaded) error {
	for _, vi := range append(slices.Clone(l.inputs), l.outputs...) {
		if oip.Datatype(vi.Type.DType) == "" {
			return fmt.Errorf("tensor %q is %v, which the protocol cannot carry", vi.Name, vi.Type.DType)
		}
	}
	return nil
}

// batchDim returns the symbolic dim every input and output leads with, or
// why the model cannot be batched along dim 0.
func batchDim(inputs, outputs []*ir.ValueInfo) (dim, why string) {
	for _, vi := range append(slices.Clone(inputs), outputs...) {
		t := vi.Type
		if !t.RankKnown || len(t.Shape) == 0 {
			return "", fmt.Sprintf("%q has no leading dim", vi.Name)
		}
		d := t.Shape[0].Param
		if d == "" {
			return "", fmt.Sprintf("%q has a fixed leading dim (%v)", vi.Name, t.Shape)
		}
		if dim == "" {
			dim = d
		}
		if d != dim {
			return "", fmt.Sprintf("%q leads with %q, not %q like the others", vi.Name, d, dim)
		}
	}
	for _, vi := range inputs {
		for i, d := range vi.Type.Shape[1:] {
			if d.Param == dim {
				return "", fmt.Sprintf("input %q uses %q again at dim %d", vi.Name, dim, i+1)
			}
		}
	}
	return dim, ""
}
