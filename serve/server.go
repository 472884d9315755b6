// Package serve is attnrun's inference server: the Open Inference Protocol
// (KServe's V2 protocol) over HTTP and gRPC, in front of a model repository
// whose models run on N backend instances each, with dynamic batching,
// Prometheus metrics, limits and a graceful drain. cmd/attnrun's `serve`
// command wires it to flags, listeners and signals.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/attnrun/attnrun/runtime/session"
	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/repo"
)

// Options configure a Server. Per-model config.yaml files override the
// model defaults (backend, instances, threads, queue, batching, versions).
type Options struct {
	// Repository is a model repository directory ("" for none).
	Repository string
	// Models are single-file models, name → path.onnx (--model).
	Models map[string]string
	// Session is the base session configuration (backend, plugin
	// directory, threads, tensor size limit, fusion); Logf is set per
	// model by the server.
	Session session.Options
	// Instances is the default number of backend instances per model
	// version (≥ 1).
	Instances int
	// MaxQueue is the default bound on requests waiting per model version.
	MaxQueue int
	// MaxBatch and MaxQueueDelay are the default dynamic batching settings;
	// they apply to models whose inputs and outputs all lead with the
	// symbolic dim named BatchDim. MaxBatch ≤ 1 turns batching off.
	MaxBatch      int
	MaxQueueDelay time.Duration
	BatchDim      string
	// VersionPolicy is the default version policy (latest by default).
	VersionPolicy repo.VersionPolicy
	// MaxTensorBytes bounds each input tensor of a request (and each
	// tensor a model makes, through the session).
	MaxTensorBytes int64
	// RequestTimeout bounds one inference request (0: none).
	RequestTimeout time.Duration
	// Version is the server version reported in the server metadata.
	Version string
	// Logger receives structured logs (default: slog.Default()).
	Logger *slog.Logger
	// Registerer receives the server's Prometheus metrics (default: a new
	// registry, see Server.Registry).
	Registerer prometheus.Registerer
}

// Extensions are the protocol extensions the server implements, as listed
// in the server metadata.
var Extensions = []string{"binary_tensor_data", "model_repository"}

// Server serves models over the Open Inference Protocol. Its methods are
// safe for concurrent use.
type Server struct {
	opts     Options
	log      *slog.Logger
	metrics  *metrics
	registry *prometheus.Registry

	loadMu sync.Mutex // serializes loads and unloads

	mu     sync.RWMutex
	models map[string]*modelEntry

	admit    admission      // inference requests in progress; draining
	retiring sync.WaitGroup // versions being drained after a reload or unload
}

// modelEntry is one model name: the versions it serves now.
type modelEntry struct {
	name     string
	versions map[string]*loaded // by version string
	order    []string           // loaded versions, increasing
	state    string             // READY or UNAVAILABLE
	reason   string             // why not READY, or the last load error
}

// New makes a server; Start loads its models.
func New(opts Options) (*Server, error) {
	if opts.Repository == "" && len(opts.Models) == 0 {
		return nil, errors.New("no models: give --model-repository DIR or --model NAME=path.onnx")
	}
	if opts.Instances < 1 {
		opts.Instances = 1
	}
	if opts.MaxQueue < 1 {
		opts.MaxQueue = 64
	}
	if opts.BatchDim == "" {
		opts.BatchDim = "batch"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	for name := range opts.Models {
		if err := repo.CheckName(name); err != nil {
			return nil, err
		}
	}
	s := &Server{opts: opts, log: opts.Logger, models: map[string]*modelEntry{}}
	reg := opts.Registerer
	if reg == nil {
		s.registry = prometheus.NewRegistry()
		reg = s.registry
	}
	s.metrics = newMetrics(reg, s)
	return s, nil
}

// Registry is the registry the server's metrics are in (nil when
// Options.Registerer was given).
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Start loads every model of the repository and every --model. Any
// failure is an error: a server starts with all its models or not at all.
func (s *Server) Start(ctx context.Context) error {
	names, err := s.modelNames()
	if err != nil {
		return err
	}
	if len(names) == 0 {
		// Legal (models can be added and loaded later), but far more often a
		// wrong directory: say so rather than serve nothing in silence.
		s.log.Warn("no models to serve: the model repository has no model directories (<repository>/<model>/<version>/model.onnx); add some and send SIGHUP or POST v2/repository/models/<model>/load", "repository", s.opts.Repository)
	}
	for _, name := range names {
		if err := s.Load(ctx, name, false); err != nil {
			return err
		}
	}
	return nil
}

// modelNames lists the models the server knows: the repository's
// directories and the --model names.
func (s *Server) modelNames() ([]string, error) {
	var names []string
	if s.opts.Repository != "" {
		var err error
		if names, err = repo.Names(s.opts.Repository); err != nil {
			return nil, err
		}
	}
	for name := range s.opts.Models {
		if slices.Contains(names, name) {
			return nil, fmt.Errorf("model %q is both in the repository and given with --model", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// readModel reads a model's source: its --model file or its repository
// directory.
func (s *Server) readModel(name string) (*repo.Model, error) {
	if path, ok := s.opts.Models[name]; ok {
		return repo.Single(name, path)
	}
	if s.opts.Repository == "" {
		return nil, oip.Errorf(oip.NotFound, "unknown model %q", name)
	}
	if err := repo.CheckName(name); err != nil {
		return nil, oip.Errorf(oip.InvalidArgument, "%v", err)
	}
	if st, err := os.Stat(filepath.Join(s.opts.Repository, name)); err != nil || !st.IsDir() {
		return nil, oip.Errorf(oip.NotFound, "unknown model %q: no directory %s in the model repository", name, filepath.Join(s.opts.Repository, name))
	}
	m, err := repo.Read(s.opts.Repository, name)
	if err != nil {
		return nil, oip.Errorf(oip.InvalidArgument, "%v", err)
	}
	return m, nil
}

// Ready reports whether the server takes inference requests (false while
// draining).
func (s *Server) Ready() bool { return !s.admit.isDraining() }

// Drain makes the server refuse new inference requests (and report not
// ready), then waits until the requests in progress have been answered or
// ctx ends.
func (s *Server) Drain(ctx context.Context) error {
	select {
	case <-s.admit.drain():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain: %d requests still running: %w", s.admit.inProgress(), ctx.Err())
	}
}

// admission counts the inference requests in progress and refuses new
// ones once draining.
type admission struct {
	mu       sync.Mutex
	draining bool
	active   int
	idle     chan struct{} // closed when draining and active reaches 0
}

// enter admits a request unless the server is draining.
func (a *admission) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining {
		return false
	}
	a.active++
	return true
}

// exit ends an admitted request.
func (a *admission) exit() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.active--
	if a.draining && a.active == 0 {
		close(a.idle)
	}
}

// drain starts draining; the channel closes when no request is left.
func (a *admission) drain() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.draining {
		a.draining, a.idle = true, make(chan struct{})
		if a.active == 0 {
			close(a.idle)
		}
	}
	return a.idle
}

func (a *admission) isDraining() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.draining
}

func (a *admission) inProgress() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.active
}

// Close unloads every model (stopping its backend processes) and waits
// for versions being retired. Call it after Drain.
func (s *Server) Close() {
	s.admit.drain()
	s.mu.Lock()
	var all []*loaded
	for _, e := range s.models {
		for _, l := range e.versions {
			all = append(all, l)
		}
		e.versions, e.order, e.state, e.reason = nil, nil, "UNAVAILABLE", "server is shutting down"
	}
	s.mu.Unlock()
	for _, l := range all {
		s.retire(l)
	}
	s.retiring.Wait()
}

// loadedVersions lists every loaded version (for metrics).
func (s *Server) loadedVersions() []*loaded {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*loaded
	for _, e := range s.models {
		for _, v := range e.order {
			out = append(out, e.versions[v])
		}
	}
	return out
}

// IndexEntry is one row of the repository index.
type IndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
}

// Index lists every model the server knows (repository directories and
// --model files) with its loaded versions and state. With readyOnly, only
// the loaded versions.
func (s *Server) Index(readyOnly bool) ([]IndexEntry, error) {
	names, err := s.modelNames()
	if err != nil {
		return nil, oip.Errorf(oip.Internal, "%v", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name := range s.models {
		if !slices.Contains(names, name) {
			names = append(names, name) // loaded, since removed from the repository
		}
	}
	sort.Strings(names)
	out := []IndexEntry{}
	for _, name := range names {
		e := s.models[name]
		if e == nil || len(e.order) == 0 {
			if !readyOnly {
				reason := "not loaded"
				if e != nil && e.reason != "" {
					reason = e.reason
				}
				out = append(out, IndexEntry{Name: name, State: "UNAVAILABLE", Reason: reason})
			}
			continue
		}
		for _, v := range e.order {
			out = append(out, IndexEntry{Name: name, Version: v, State: "READY", Reason: e.reason})
		}
	}
	return out, nil
}

// lookup finds the version a request names ("" for the highest loaded)
// and registers a user of it; release with l.users.Done().
func (s *Server) lookup(name, version string) (*loaded, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.models[name]
	if e == nil {
		return nil, oip.Errorf(oip.NotFound, "unknown model %q", name)
	}
	if len(e.order) == 0 {
		return nil, oip.Errorf(oip.Unavailable, "model %q is not loaded (%s)", name, e.reason)
	}
	if version == "" {
		version = e.order[len(e.order)-1]
	}
	l := e.versions[version]
	if l == nil {
		return nil, oip.Errorf(oip.NotFound, "model %q has no version %q loaded (loaded: %s)", name, version, strings.Join(e.order, ", "))
	}
	l.users.Add(1)
	return l, nil
}

// versionsOf lists a model's loaded versions.
func (s *Server) versionsOf(name string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.models[name]; e != nil {
		return slices.Clone(e.order)
	}
	return nil
}

// defaultThreads splits the machine's CPUs between a model's instances
// when the threads per instance are not set.
func defaultThreads(instances int) int {
	return max(runtime.NumCPU()/max(instances, 1), 1)
}
