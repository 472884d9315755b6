package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/attnrun/attnrun/backends/cpu"
	"github.com/attnrun/attnrun/plugins"
)

// Backend lifecycle. A session holds, for each backend it uses (the
// preferred one, and cpu for fallback), Options.Instances instances (see
// pool.go); each instance owns its current process and the ids of its
// backend's partitions compiled there. When the host kills
// the process for not answering (see package plugins' deadlines), the
// backend starts a replacement at once, in the background, and recompiles
// its partitions, so that the next Run finds a fresh process ready instead
// of paying for the restart. A process that died by itself (a crash, a kill
// from outside) is replaced when the next Run needs it: its caller has just
// been told of the death and may well close the session instead. A Run that
// arrives while a replacement starts waits for it, as long as its context
// allows. Runs take the current process without holding any session-wide
// lock, so a slow or abandoned Run never holds up another caller.

// closeTimeout bounds Session.Close: whatever the backends do, it returns
// by then (each backend's process group has been sent SIGKILL long before;
// go-plugin's cleanup may finish in the background).
const closeTimeout = 1500 * time.Millisecond

// backend is one instance of a backend the session uses.
type backend struct {
	name string
	// instance is this instance's index in its pool.
	instance int
	pool     *pool
	// path is the plugin file ("" for the built-in cpu backend).
	path string
	opts *Options
	// bg ends when the session closes; wg counts the background restarts.
	bg context.Context
	wg *sync.WaitGroup

	mu  sync.Mutex
	cur *process // nil while none runs
	// restarting is non-nil while a replacement is being started, and
	// closed when that is over; lastErr is why the last one failed.
	restarting chan struct{}
	lastErr    error
	// failures counts the restarts that failed in a row; until retryAt
	// no other is started (restartBackoff), so that a replacement that
	// cannot start (a changed model file, a broken plugin) is not
	// launched again for every Run.
	failures int
	retryAt  time.Time
	closed   bool
}

// restartBackoff is how long after the n-th failed restart in a row the
// next may start: 100 ms, doubling, at most 10 s.
func restartBackoff(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

// process is one backend process with the backend's partitions compiled
// (or, with Options.InProcess, the CPU backend inside this process).
type process struct {
	p    conn
	info *plugins.Info
	ids  []plugins.PartitionID // by partition slot
}

// conn is a running backend as the session uses it: a *plugins.Process, or
// a *plugins.InProcess (Options.InProcess), which has the same lifecycle
// methods.
type conn interface {
	plugins.Backend
	Pid() int
	Done() <-chan struct{}
	Exited() bool
	ExitErr() error
	KillReason() string
	Kill()
	Shutdown(grace time.Duration)
}

var (
	_ conn = (*plugins.Process)(nil)
	_ conn = (*plugins.InProcess)(nil)
)

// alive reports whether the process still runs.
func (g *process) alive() bool { return g != nil && !g.p.Exited() }

// slotOf maps a partition id of this process back to the partition.
func (g *process) slotOf(id plugins.PartitionID) int {
	for i, x := range g.ids {
		if x == id {
			return i
		}
	}
	return -1
}

// start starts the named backend: a process (a plugin is verified first,
// see plugins.OpenPlugin, and its path passed to found), or, for cpu with
// Options.InProcess, the CPU backend inside this process.
func start(ctx context.Context, name string, opts *Options, found func(path string)) (conn, error) {
	if name == CPU && opts.InProcess {
		return plugins.NewInProcess(CPU, func(st *plugins.StatusWriter) plugins.Server { return cpu.NewInProcessServer(st, opts.Logf) }), nil
	}
	spec, path, err := launchSpec(name, opts)
	if err != nil {
		return nil, err
	}
	if path != "" && found != nil {
		found(path)
	}
	proc, err := plugins.Launch(ctx, spec)
	if err != nil && name == CPU && ctx.Err() == nil {
		// The CPU backend is this program re-executed: say what that takes.
		return nil, fmt.Errorf("%w; the cpu backend runs as a copy of %s (Options.SelfExe), which must be a Go program importing github.com/attnrun/attnrun/runtime/session (or backends/cpu), or set Options.InProcess", err, opts.SelfExe)
	}
	return proc, err
}

// launchSpec says how to start the named backend, and the plugin's path
// ("" for cpu).
func launchSpec(name string, opts *Options) (plugins.LaunchSpec, string, error) {
	spec := plugins.LaunchSpec{Name: name, Logger: plugins.NewLogger(logWriter{opts.Logf}), Budget: opts.budget, Arena: opts.arena}
	if opts.NoSharedMemory {
		spec.SharedBytes = -1
	}
	if name == CPU {
		cmd := exec.Command(opts.SelfExe)
		cmd.Env = []string{ServeBackendEnv + "=" + CPU}
		if opts.Threads > 0 {
			// One Go processor per compute thread: the backend's other
			// goroutines (gRPC, health checks) are short, and spare
			// processors only spin and steal time from the other instances
			// (2 single-thread instances on 2 cores: ~1.45× the runs/s of
			// one with GOMAXPROCS 2, ~1.7× with 1).
			cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(opts.Threads))
		}
		cmd.Env = append(cmd.Env, opts.spinEnv()...)
		spec.Cmd = cmd
		return spec, "", nil
	}
	if opts.PluginDir == "" {
		return spec, "", fmt.Errorf("unknown backend %q: available backends: %s (no plugin directory is set: --plugin-dir or %s)", name, availableBackends(opts), plugins.PluginDirEnv)
	}
	f, path, err := plugins.OpenPlugin(opts.PluginDir, name, opts.PluginLock)
	if errors.Is(err, fs.ErrNotExist) {
		return spec, "", fmt.Errorf("unknown backend %q: available backends: %s (no %s)", name, availableBackends(opts), path)
	}
	if err != nil {
		return spec, "", fmt.Errorf("backend %q: %s is refused: %w", name, path, err)
	}
	cmd := exec.Command(path)
	cmd.Env = append([]string{ServeBackendEnv + "="}, opts.spinEnv()...) // an attnrun-backend-* is a backend by itself
	spec.Cmd, spec.Exe = cmd, f
	return spec, path, nil
}

// availableBackends lists the backends attnrun could start, for errors about
// an unknown backend name: cpu, then every attnrun-backend-* in the plugin
// directory that passes verification.
func availableBackends(opts *Options) string {
	names := []string{CPU}
	cands, _ := plugins.Discover(opts.PluginDir, opts.PluginLock) // a bad plugin dir lists just cpu
	for _, c := range cands {
		if c.Reason == "" {
			names = append(names, c.Name)
		}
	}
	return strings.Join(names, ", ")
}

// BackendInfo describes a backend for `attnrun backends` and Session.Backends.
type BackendInfo struct {
	Name string
	// Instance is which of the session's instances of the backend this is
	// (Options.Instances; 0 in ListBackends).
	Instance int
	Version  string
	Pid      int
	// Path is the executable ("" for the built-in cpu backend's self exe).
	Path string
	// SHA256 is the plugin file's SHA-256 (hex; ListBackends only, "" for
	// the built-in cpu backend).
	SHA256  string
	Details map[string]string
	Ops     []plugins.OpSupport
	// Available is false when the backend could not be started, is not a
	// backend, was refused by verification, or reports that it cannot
	// compute here (no GPU); Reason says why.
	Available bool
	Reason    string
	// DoorbellRuns counts the Runs this backend process answered through
	// the shared-memory doorbell rather than over gRPC (plugins/doorbell.go;
	// 0 for a backend in process, or one without a doorbell).
	DoorbellRuns uint64
}

// UnavailableError reports a backend that started but cannot compute on
// this machine (plugins.Info.UnavailableReason), e.g. a GPU backend without
// a driver or device.
type UnavailableError struct {
	Backend string
	Reason  string
}

// Error reads `backend "gpu" is unavailable: libcuda.so.1 not found: ...`.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("backend %q is unavailable: %s", e.Backend, e.Reason)
}

// launch starts a process (or the in-process CPU backend) and reads its
// Info; its partitions are not compiled yet.
func (b *backend) launch(ctx context.Context) (*process, error) {
	proc, err := start(ctx, b.name, b.opts, func(path string) { b.path = path })
	if err != nil {
		return nil, err
	}
	info, err := proc.Info(ctx)
	if err != nil {
		proc.Kill()
		var stuck *plugins.StuckError
		if errors.As(err, &stuck) {
			return nil, err
		}
		return nil, fmt.Errorf("backend %q: info: %w", b.name, err)
	}
	if info.ProtocolVersion != plugins.ProtocolVersion {
		proc.Kill()
		return nil, fmt.Errorf("backend %q speaks protocol %d, attnrun speaks %d", b.name, info.ProtocolVersion, plugins.ProtocolVersion)
	}
	if info.UnavailableReason != "" {
		// A backend that cannot compute here is an error, never a silent
		// fallback: the user asked for it by name.
		proc.Kill()
		return nil, &UnavailableError{Backend: b.name, Reason: info.UnavailableReason}
	}
	return &process{p: proc, info: info}, nil
}

// compile compiles the partition in slot into g.
func (b *backend) compile(ctx context.Context, g *process, slot int) error {
	p := b.pool.parts[slot]
	id, err := g.p.Compile(ctx, p.model, b.opts.compileOptions())
	if err != nil {
		return fmt.Errorf("compiling partition %d on backend %q: %w", p.index, b.name, err)
	}
	if len(g.ids) < len(b.pool.parts) {
		g.ids = append(g.ids, make([]plugins.PartitionID, len(b.pool.parts)-len(g.ids))...)
	}
	g.ids[slot] = id
	return nil
}

// start launches a replacement process and compiles every partition in it.
func (b *backend) start(ctx context.Context) (*process, error) {
	g, err := b.launch(ctx)
	if err != nil {
		return nil, err
	}
	for slot := range b.pool.parts {
		if err := b.compile(ctx, g, slot); err != nil {
			g.p.Kill()
			return nil, err
		}
	}
	return g, nil
}

// adopt makes g the current process and watches it.
func (b *backend) adopt(g *process) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur = g
	b.wg.Add(1)
	go b.watch(g)
}

// watch waits for g to end. When the host killed it for not answering, it
// starts the replacement at once (unless the session is closing); a process
// that died by itself is replaced by the next Run (acquire), as its caller
// has just been told of the death and may well close the session instead.
func (b *backend) watch(g *process) {
	defer b.wg.Done()
	select {
	case <-g.p.Done():
	case <-b.bg.Done():
		return
	}
	if g.p.KillReason() == "" {
		// Died by itself: release the host's side of it now (its
		// connection, tensor region, pipes); the next Run replaces it.
		g.p.Kill()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != g || b.closed {
		return
	}
	b.cur = nil
	b.opts.Logf("backend %q (pid %d) %s; restarting it", b.name, g.p.Pid(), endedHow(g.p))
	b.restartLocked()
}

// endedHow says how a process ended: "exited (signal: killed)", or "was
// killed (it did not answer a health check within 3s)".
func endedHow(p conn) string {
	if why := p.KillReason(); why != "" {
		return "was killed (" + why + ")"
	}
	why := "exit status 0"
	if e := p.ExitErr(); e != nil {
		why = e.Error()
	}
	return "exited (" + why + ")"
}

// restartLocked starts a replacement process in the background unless one
// is being started (the caller holds b.mu).
func (b *backend) restartLocked() {
	if b.restarting != nil || b.closed || b.lastErr != nil && time.Now().Before(b.retryAt) {
		return
	}
	done := make(chan struct{})
	b.restarting = done
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		g, err := b.start(b.bg)
		if b.adoptRestart(g, err, done) && b.opts.OnBackendRestart != nil {
			b.opts.OnBackendRestart(b.name, b.instance, g.p.Pid())
		}
	}()
}

// adoptRestart ends the restart that started g (err: how it failed),
// making g current unless the session closed meanwhile, and closes done;
// it reports whether g was adopted.
func (b *backend) adoptRestart(g *process, err error, done chan struct{}) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer close(done)
	b.restarting = nil
	switch {
	case b.closed:
		if g != nil {
			go g.p.Kill()
		}
		return false
	case err != nil:
		b.lastErr = &RestartError{Backend: b.name, Instance: b.instance, Err: err}
		b.failures++
		wait := restartBackoff(b.failures)
		b.retryAt = time.Now().Add(wait)
		b.opts.Logf("%v (next try in %v at the earliest)", b.lastErr, wait)
		return false
	}
	b.lastErr, b.failures = nil, 0
	b.cur = g
	b.wg.Add(1)
	go b.watch(g)
	b.opts.Logf("backend %q restarted (pid %d); %d partition(s) recompiled", b.name, g.p.Pid(), len(b.pool.parts))
	return true
}

// RestartError is the error of a Run whose backend process had ended and
// whose replacement failed to start or to compile the model's partitions
// again: for instance because a weights file changed since the session
// loaded the model (replaced or rewritten), which the replacement refuses
// rather than compute with other weights. A later Run tries again, at
// most once per backoff (100 ms after the first failure, doubling up to
// 10 s); Runs in between get this error at once. Servers report it as
// unavailable.
type RestartError struct {
	// Backend and Instance name the backend instance.
	Backend  string
	Instance int
	// Err is why the replacement failed.
	Err error
}

// Error reads `restarting backend "cpu": compiling partition 0 on backend
// "cpu": ...`.
func (e *RestartError) Error() string {
	return fmt.Sprintf("restarting backend %q: %v", e.Backend, e.Err)
}

// Unwrap returns why the replacement failed.
func (e *RestartError) Unwrap() error { return e.Err }

// errClosed is the error of a Run on a closed session.
var errClosed = errors.New("session is closed")

// acquire returns the process to run on: the current one, or the
// replacement being started (waiting for it as long as ctx allows; a
// process found dead starts one).
func (b *backend) acquire(ctx context.Context) (*process, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, errClosed
	}
	if g := b.cur; g.alive() {
		b.mu.Unlock()
		return g, nil
	}
	b.replaceDeadLocked()
	done := b.restarting
	if done == nil {
		// A restart failed moments ago (restartBackoff): its error stands.
		err := b.lastErr
		b.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("backend %q is not running", b.name)
		}
		return nil, err
	}
	b.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("backend %q: waiting for its restart: %w", b.name, ctx.Err())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return nil, errClosed
	case b.cur.alive():
		return b.cur, nil
	case b.lastErr != nil:
		return nil, b.lastErr
	}
	return nil, fmt.Errorf("backend %q ended right after its restart", b.name)
}

// restartIfDead starts the replacement of a process found dead, and returns
// a channel closed when the replacement being started (if any) is over; nil
// when the current process runs.
func (b *backend) restartIfDead() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.cur.alive() {
		return nil
	}
	b.replaceDeadLocked()
	return b.restarting
}

// replaceDeadLocked drops the dead current process, if any (its watch
// releases it), and starts its replacement (the caller holds b.mu).
func (b *backend) replaceDeadLocked() {
	if g := b.cur; g != nil {
		b.cur = nil
		b.opts.Logf("backend %q (pid %d) %s; restarting it", b.name, g.p.Pid(), endedHow(g.p))
	}
	b.restartLocked()
}

// current is the current process if it runs, else nil.
func (b *backend) current() *process {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur.alive() {
		return b.cur
	}
	return nil
}

// describe is the backend's BackendInfo.
func (b *backend) describe() BackendInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	bi := BackendInfo{Name: b.name, Instance: b.instance, Path: b.path, Available: b.cur.alive()}
	if g := b.cur; g != nil {
		bi.Pid = g.p.Pid()
		bi.Version, bi.Details, bi.Ops = g.info.Version, g.info.Details, g.info.Ops
		if p, ok := g.p.(*plugins.Process); ok {
			bi.DoorbellRuns = p.DoorbellRuns()
		}
	}
	switch {
	case bi.Available:
	case b.restarting != nil:
		bi.Reason = "restarting"
	case b.lastErr != nil:
		bi.Reason = b.lastErr.Error()
	default:
		bi.Reason = "process exited; it restarts on the next run"
	}
	return bi
}

// close ends the backend: its restart, if any, is abandoned (the session's
// background context has ended) and its process shut down.
func (b *backend) close() {
	b.mu.Lock()
	b.closed = true
	g, restarting := b.cur, b.restarting
	b.cur = nil
	b.mu.Unlock()
	if g != nil {
		g.p.Shutdown(plugins.ShutdownGrace)
	}
	if restarting != nil {
		<-restarting // its Launch or Compile returns when bg ends
	}
}
