package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/budget"
	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gorgonia.org/tensor"
)

// ExecutablePrefix starts the file name of every external backend:
// attnrun-backend-<name>.
const ExecutablePrefix = "attnrun-backend-"

// PluginDirEnv names the environment variable holding the default plugin
// directory.
const PluginDirEnv = "ATTNRUN_PLUGIN_DIR"

// PluginPathEnv names the environment variable that tells a plugin started
// from a verified file (LaunchSpec.Exe) its path in the plugin directory: it
// is executed as /proc/self/fd/N, so a wrapper script's $0 is that, not the
// file's name.
const PluginPathEnv = "ATTNRUN_PLUGIN_PATH"

// LaunchSpec says how to start one backend process.
type LaunchSpec struct {
	// Name is the backend's name in messages ("cpu", "gpu").
	Name string
	// Cmd is the command to run. Launch adds to its environment (the
	// handshake, the status page fd) and its ExtraFiles (the status page);
	// its Stdin, Stdout and Stderr are taken over by go-plugin. Launch sets
	// its SysProcAttr: the backend leads its own process group and gets
	// SIGKILL when the host dies (see procrunner.go).
	Cmd *exec.Cmd
	// Exe, when set, is the verified executable (see OpenPlugin): Launch
	// executes exactly that open file, through /proc/self/fd, so that the
	// bytes checked are the bytes run, and closes it. Cmd.Path then only
	// names it in messages.
	Exe *os.File
	// StartTimeout bounds start and handshake (0: DefaultStartTimeout).
	StartTimeout time.Duration
	// Logger receives go-plugin's and the backend's log lines (nil: Warn
	// level and above to stderr).
	Logger hclog.Logger
	// SharedBytes is the initial size of the tensor region shared with the
	// backend (0: DefaultSharedBytes); negative passes no region, and
	// tensors travel as bytes inside the gRPC messages. Setting
	// NoSharedMemoryEnv=1 in the host's environment does the same.
	SharedBytes int64
	// SharedMaxBytes bounds the region's growth (0: DefaultSharedMaxBytes,
	// or without that bound when Budget has a limit; raised to SharedBytes
	// if smaller).
	SharedMaxBytes int64
	// Budget is the host's memory budget, which the region's size is
	// reserved from (nil: none).
	Budget *budget.Budget
	// Arena is the session's tensor arena (see arena.go), shared with every
	// process of the session that has a tensor region; nil: none. The
	// process does not own it: the caller closes it.
	Arena *Arena
}

// Process is a running backend process. It implements Backend; when a call
// fails because the process died, Run returns a *DiedError naming the node
// that was running; a call abandoned by its context returns an
// *InterruptedError at once (see deadlines.go for the other deadlines).
type Process struct {
	name   string
	pid    int
	client *plugin.Client
	rpc    *client
	run    *procRunner
	page   *statusPage
	shm    *hostShm  // nil: tensors travel inline
	bell   *hostBell // nil: every Run goes over gRPC
	parent *os.File  // write end of the parent pipe
	stderr *tailBuffer

	busy       atomic.Int32          // Runs in flight; the watchdog pings only then
	final      atomic.Pointer[Where] // the status page's last word, kept when Kill unmaps it
	killed     chan struct{}         // closed when Kill starts
	killOnce   sync.Once
	parentOnce sync.Once
	mu         sync.Mutex
	killReason string // why the host killed the process ("" for a plain Kill)
}

var _ Backend = (*Process)(nil)

// NewLogger returns the logger Launch uses by default: go-plugin and backend
// lines at Warn level and above, to w. go-plugin's own notices about a
// process ending are left out: Launch and DiedError report those.
func NewLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   "attnrun-plugin",
		Level:  hclog.Warn,
		Output: w,
		Exclude: func(_ hclog.Level, msg string, _ ...any) bool {
			switch msg {
			case "plugin process exited", "plugin failed to exit gracefully",
				// go-plugin's readers of pipes Kill had to close (see
				// terminate): the backend is being killed anyway.
				"error encountered while scanning stdout", "reading plugin stderr":
				return true
			}
			return false
		},
	})
}

// TidyLogLine turns a line NewLogger writes for a backend's own warning or
// error (BackendLogf) — "2026-11-28T17:03:49.065Z [WARN]  attnrun-plugin.
// attnrun: MESSAGE: @module=attnrun-backend timestamp=2026-…" — into
// "warning: MESSAGE" ("error: MESSAGE"). Other lines are returned as they
// are.
func TidyLogLine(line string) string {
	const suffix = ": @module=" + backendLoggerName + " timestamp="
	cut := strings.LastIndex(line, suffix)
	if cut < 0 {
		return line
	}
	head, msg, ok := strings.Cut(line[:cut], ": ")
	if !ok {
		return line
	}
	switch {
	case strings.Contains(head, "[WARN]"):
		return "warning: " + msg
	case strings.Contains(head, "[ERROR]"):
		return "error: " + msg
	}
	return line
}

// Launch starts a backend process, completes the go-plugin handshake and
// returns the connected Process. On failure the process is killed and the
// error says why in one line (e.g. the executable is not a backend). It
// returns soon after ctx ends, with an error wrapping ctx's.
func Launch(ctx context.Context, spec LaunchSpec) (*Process, error) {
	if spec.Exe != nil {
		defer spec.Exe.Close() // the child has its own descriptor
	}
	if spec.Cmd == nil {
		return nil, errors.New("launch: no command")
	}
	display := spec.Cmd.Path // the executable in messages
	if spec.Name == "" {
		spec.Name = strings.TrimPrefix(baseName(display), ExecutablePrefix)
	}
	if spec.StartTimeout <= 0 {
		spec.StartTimeout = DefaultStartTimeout
	}
	if spec.Logger == nil {
		spec.Logger = NewLogger(os.Stderr)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("launch backend %q (%s): %w", spec.Name, display, err)
	}
	pageFile, page, err := newHostStatusPage()
	if err != nil {
		return nil, fmt.Errorf("launch backend %q: %w", spec.Name, err)
	}
	defer pageFile.Close() // the child has its copy, the host its mapping

	// The parent pipe: the child reads its end until the host (the only
	// holder of the write end) is gone.
	parentR, parentW, err := os.Pipe()
	if err != nil {
		page.close()
		return nil, fmt.Errorf("launch backend %q: %w", spec.Name, err)
	}
	defer parentR.Close()

	// The tensor region (see shm.go), unless turned off.
	var shm *hostShm
	if spec.SharedBytes >= 0 && os.Getenv(NoSharedMemoryEnv) != "1" {
		size, limit := spec.SharedBytes, spec.SharedMaxBytes
		if size == 0 {
			size = DefaultSharedBytes
		}
		if limit == 0 {
			limit = DefaultSharedMaxBytes
			if l := spec.Budget.Limit(); l > 0 {
				limit = l // the budget bounds it
			}
		}
		if shm, err = newHostShm(size, max(size, limit), spec.Budget); err != nil {
			page.close()
			parentR.Close()
			parentW.Close()
			return nil, fmt.Errorf("launch backend %q: %w", spec.Name, err)
		}
	}

	// The doorbell (see doorbell.go): Runs past gRPC, with the region only.
	var bell *hostBell
	if shm != nil && os.Getenv(NoDoorbellEnv) != "1" {
		if bell, err = newHostBell(); err != nil {
			page.close()
			shm.close()
			parentR.Close()
			parentW.Close()
			return nil, fmt.Errorf("launch backend %q: %w", spec.Name, err)
		}
	}

	cmd := spec.Cmd
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, pageFile, parentR)
	shmEnv := SharedFDEnv + "=" // none: also hides a value inherited from the host
	if shm != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, shm.f)
		shmEnv += strconv.Itoa(fd + 2)
	}
	bellEnv := DoorbellFDEnv + "="
	if bell != nil {
		bellEnv += strconv.Itoa(3 + len(cmd.ExtraFiles))
		cmd.ExtraFiles = append(cmd.ExtraFiles, bell.f)
	}
	arenaEnv := ArenaFDEnv + "="
	var arena *Arena
	if shm != nil && spec.Arena != nil {
		if f := spec.Arena.file(); f != nil {
			arena = spec.Arena
			arenaEnv += strconv.Itoa(3 + len(cmd.ExtraFiles))
			cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		}
	}
	var extraEnv []string
	if spec.Exe != nil {
		// Executed through the child's own descriptor of the verified file
		// (not close-on-exec, so that a script's interpreter can open it).
		exeFD := 3 + len(cmd.ExtraFiles)
		cmd.ExtraFiles = append(cmd.ExtraFiles, spec.Exe)
		if len(cmd.Args) == 0 {
			cmd.Args = []string{display}
		}
		cmd.Path = "/proc/self/fd/" + strconv.Itoa(exeFD)
		extraEnv = append(extraEnv, PluginPathEnv+"="+display)
	}
	// The host environment goes first so that the spec's and ours win.
	cmd.Env = append(append(append(os.Environ(), cmd.Env...), extraEnv...),
		StatusFDEnv+"="+strconv.Itoa(fd), ParentFDEnv+"="+strconv.Itoa(fd+1), shmEnv, bellEnv, arenaEnv)

	tail := &tailBuffer{max: 8 << 10}
	pr := &procRunner{cmd: cmd, name: display, done: make(chan struct{}), drained: make(chan struct{})}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugin.PluginSet{PluginName: &grpcPlugin{}},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		// go-plugin passes a blank command carrying only its own variables
		// (handshake cookie, protocol versions, socket dir): run ours with them.
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, socketDir string) (runner.Runner, error) {
			cmd.Env = append(cmd.Env, spec.Env...)
			pr.setSocketDir(socketDir)
			return pr, pr.pipes()
		},
		SkipHostEnv:  true, // added above, before the spec's variables
		StartTimeout: spec.StartTimeout,
		Logger:       spec.Logger,
		Stderr:       tail,
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
			// Our dialer removes the socket's directory once connected
			// (procRunner.dial); so the connection must never be redialed
			// just because it was idle.
			grpc.WithContextDialer(pr.dial),
			grpc.WithIdleTimeout(0),
		},
	})
	fail := func(err error) (*Process, error) {
		msg := oneLine(err)
		if msg == noHandshake {
			// stdout closed: the process is exiting; say how it ended
			// (once its stderr is read too).
			if waitFor(pr.drained, time.Second) && pr.waitErr != nil {
				msg += " (" + pr.waitErr.Error() + ")"
			}
		}
		if last := tail.lastLine(); last != "" {
			msg += " (backend stderr: " + last + ")"
		}
		terminate(c, pr)
		page.close()
		shm.close()
		bell.close()
		parentW.Close()
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("launch backend %q (%s): %w", spec.Name, display, err)
		}
		return nil, fmt.Errorf("launch backend %q (%s): %s", spec.Name, display, msg)
	}
	type started struct {
		cl  *client
		err error
	}
	ch := make(chan started, 1)
	go func() {
		rpc, err := c.Client()
		if err != nil {
			ch <- started{err: err}
			return
		}
		raw, err := rpc.Dispense(PluginName)
		if err != nil {
			ch <- started{err: err}
			return
		}
		cl, ok := raw.(*client)
		if !ok {
			ch <- started{err: fmt.Errorf("dispensed %T, not a backend client", raw)}
			return
		}
		ch <- started{cl: cl}
	}()
	var st started
	select {
	case st = <-ch:
	case <-ctx.Done():
		// End the handshake wait: the group's death closes the pipes
		// go-plugin reads the handshake from (or, when a process outside
		// the group holds them, closing them does).
		pr.killGroup()
		select {
		case st = <-ch:
		case <-time.After(killWait):
			pr.closePipes()
			<-ch
		}
		return fail(ctx.Err())
	}
	if st.err != nil {
		return fail(st.err)
	}
	p := &Process{name: spec.Name, pid: pr.pid, client: c, rpc: st.cl, run: pr, page: page, shm: shm, bell: bell, parent: parentW, stderr: tail, killed: make(chan struct{})}
	st.cl.shm, st.cl.arena = shm, arena
	st.cl.bell, st.cl.gone, st.cl.done = bell, pr.exited, pr.done
	st.cl.drainFailed = p.drainFailed
	go p.watchdog()
	return p, nil
}

// terminate kills a backend's process group and lets go-plugin clean up,
// within about 2×killWait whatever the backend does: when go-plugin's
// readers still wait for the pipes (held open by a process that left the
// group), the pipes are closed under them.
func terminate(c *plugin.Client, pr *procRunner) {
	pr.killGroup()
	waitFor(pr.done, killWait)
	done := make(chan struct{})
	go func() {
		c.Kill()
		close(done)
	}()
	if !waitFor(done, killWait) {
		pr.closePipes()
	}
	pr.removeSocketDir()
}

// noHandshake replaces go-plugin's message for a backend that closed its
// stdout without a handshake line.
const noHandshake = "no go-plugin handshake on stdout"

// oneLine condenses go-plugin's multi-line start errors to their first line.
func oneLine(err error) string {
	msg := strings.TrimSpace(err.Error())
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = strings.TrimSpace(msg[:i])
	}
	if msg == "Unrecognized remote plugin message:" {
		msg = noHandshake
	}
	return msg
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// Name is the backend's name.
func (p *Process) Name() string { return p.name }

// Pid is the backend process's id.
func (p *Process) Pid() int { return p.pid }

// SharedBytes is the current size of the tensor region shared with the
// backend, 0 when tensors travel inline (see shm.go). It waits for a Run in
// flight.
func (p *Process) SharedBytes() int64 {
	if p.shm == nil {
		return 0
	}
	p.shm.mu.Lock()
	defer p.shm.mu.Unlock()
	return int64(len(p.shm.mem))
}

// DoorbellRuns counts the Runs this process answered through the doorbell
// (see doorbell.go) rather than over gRPC.
func (p *Process) DoorbellRuns() uint64 {
	if p.bell == nil {
		return 0
	}
	return p.bell.answered.Load()
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool { return p.run.exited() }

// Done is closed once the process has ended.
func (p *Process) Done() <-chan struct{} { return p.run.done }

// ExitErr returns how the process ended ("exit status 2", "signal: killed");
// nil while it runs or when it exited with status 0.
func (p *Process) ExitErr() error {
	if !p.Exited() {
		return nil
	}
	return p.run.waitErr
}

// KillReason says why the host killed the process (it stopped answering),
// "" when it did not, or killed it on request (Kill, Shutdown).
func (p *Process) KillReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killReason
}

// Kill ends the process group at once (SIGKILL: a stopped backend too) and
// releases the host's resources for it, returning within about two seconds
// whatever the backend does. It is safe to call more than once.
func (p *Process) Kill() { p.kill("") }

// kill is Kill recording why (reason "" for a requested kill).
func (p *Process) kill(reason string) {
	p.killOnce.Do(func() {
		p.mu.Lock()
		p.killReason = reason
		p.mu.Unlock()
		close(p.killed)
		terminate(p.client, p.run)
		w := p.where()
		p.final.Store(&w)
		p.page.close()
		// After the process is gone: a Run in flight fails and releases
		// the region, which close waits for.
		p.shm.close()
		p.bell.close() // after the region: no Run holds either now
		p.closeParent()
	})
}

// Shutdown asks the backend to exit (it reads end of file on its parent
// pipe), waits for that at most grace (ShutdownGrace when 0), then kills the
// process group. Unlike go-plugin's graceful shutdown it never waits on the
// backend beyond that.
func (p *Process) Shutdown(grace time.Duration) {
	if grace <= 0 {
		grace = ShutdownGrace
	}
	p.closeParent()
	waitFor(p.run.done, grace)
	p.Kill()
}

func (p *Process) closeParent() {
	p.parentOnce.Do(func() { p.parent.Close() })
}

// Info asks the backend to describe itself (deadline InfoTimeout).
func (p *Process) Info(ctx context.Context) (*Info, error) {
	var info *Info
	err := p.control(ctx, "info", InfoTimeout, func(ctx context.Context) (err error) {
		info, err = p.rpc.Info(ctx)
		return err
	})
	return info, err
}

// Capability asks which nodes the backend takes (deadline
// CapabilityTimeout).
func (p *Process) Capability(ctx context.Context, nodes []NodeQuery) ([]Verdict, error) {
	var v []Verdict
	err := p.control(ctx, "capability", CapabilityTimeout, func(ctx context.Context) (err error) {
		v, err = p.rpc.Capability(ctx, nodes)
		return err
	})
	return v, err
}

// Compile sends a partition to the backend (deadline CompileDeadline of its
// weights' size).
func (p *Process) Compile(ctx context.Context, m *ir.Model, opts CompileOptions) (PartitionID, error) {
	var id PartitionID
	err := p.control(ctx, "compile", CompileDeadline(weightBytes(m)), func(ctx context.Context) (err error) {
		id, err = p.rpc.Compile(ctx, m, opts)
		return err
	})
	return id, err
}

// Run runs a compiled partition. If the backend dies meanwhile, the error is
// a *DiedError naming the node that was running. Tensors travel through the
// shared region (see shm.go), which one Run uses at a time: concurrent Runs
// on one Process are serialized. Outputs are fresh tensors the caller owns.
func (p *Process) Run(ctx context.Context, id PartitionID, inputs map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	return p.RunInto(ctx, id, inputs, nil)
}

// RunInto is Run writing the outputs named in into into those caller-owned
// tensors (see BindOutput for what they must be), which the result then
// holds; the other outputs are fresh tensors. When ctx ends first, it
// returns an *InterruptedError at once.
func (p *Process) RunInto(ctx context.Context, id PartitionID, inputs, into map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	p.busy.Add(1)
	defer p.busy.Add(-1)
	out, err := p.rpc.RunInto(ctx, id, inputs, into)
	return out, p.check(ctx, err)
}

// Release frees a compiled partition in the backend (deadline
// ReleaseTimeout).
func (p *Process) Release(ctx context.Context, id PartitionID) error {
	return p.control(ctx, "release", ReleaseTimeout, func(ctx context.Context) error {
		return p.rpc.Release(ctx, id)
	})
}

// Stats asks for the backend's resource counters (deadline StatsTimeout).
func (p *Process) Stats(ctx context.Context) (*Stats, error) {
	var st *Stats
	err := p.control(ctx, "stats", StatsTimeout, func(ctx context.Context) (err error) {
		st, err = p.rpc.Stats(ctx)
		return err
	})
	return st, err
}

// Ping checks that the backend answers (deadline PingTimeout).
func (p *Process) Ping(ctx context.Context) error {
	return p.control(ctx, "ping", PingTimeout, func(ctx context.Context) error {
		return p.rpc.ping(ctx, 0)
	})
}

// drainFailed handles a backend that did not confirm, after an abandoned
// Run, that it let go of the tensor region: one that did not answer in time
// is stuck and killed; one whose connection broke is dying, and is killed if
// it does not end by itself.
func (p *Process) drainFailed(timedOut bool) {
	if timedOut && !p.Exited() {
		p.kill(fmt.Sprintf("it did not let go of its tensor region within %v after an abandoned run", PingTimeout))
		return
	}
	if !waitFor(p.run.done, diedWait) {
		p.kill("its connection to the host broke")
	}
}

// check turns a Run's failure into the error to return: an *InterruptedError
// when ctx ended (at once, whatever the backend does), a *DiedError when the
// process died or was killed, the error itself otherwise.
func (p *Process) check(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var remote *RemoteError
	if errors.As(err, &remote) && ctx.Err() == nil {
		return err
	}
	ctxErr := ctx.Err()
	if st, ok := status.FromError(err); ok && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) && ctxErr == nil {
		// The backend's end of the deadline (gRPC sends it along) can
		// fire a moment before ours: wait for ours.
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Second {
			t := time.NewTimer(time.Until(dl))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			// Past its deadline a context ends only once its timer's
			// goroutine has run, which on a loaded machine can be well
			// after the deadline: its error is the deadline's already.
			if ctxErr = ctx.Err(); ctxErr == nil && !time.Now().Before(dl) {
				ctxErr = context.DeadlineExceeded
			}
		}
	}
	if ctxErr != nil {
		e := &InterruptedError{Backend: p.name, Pid: p.pid, Op: "run", Err: ctxErr, Queued: errors.Is(err, errQueued)}
		if !e.Queued {
			e.Where = p.where()
		}
		return e
	}
	// The transport fails a little before the process is reaped.
	if !waitFor(p.run.done, diedWait) {
		return err
	}
	return p.died()
}

// died builds the error describing the process's death from the status page.
func (p *Process) died() *DiedError {
	waitFor(p.run.drained, stderrWait) // its last words, if any
	return &DiedError{Backend: p.name, Pid: p.pid, Where: p.where(), ExitErr: p.run.waitErr, Stderr: p.stderr.panicLine(), Killed: p.KillReason()}
}

// where reads what the backend is running from its status page, or once
// Kill has closed the page, what it said then.
func (p *Process) where() Where {
	if w := p.final.Load(); w != nil {
		return *w
	}
	w, open := readWhere(p.page, p.rpc.meta)
	if !open {
		// Closed since final was loaded: kill keeps the page's last word in
		// final before it closes the page.
		if w := p.final.Load(); w != nil {
			return *w
		}
	}
	return w
}

// readWhere reads a status page once, all of it while the page is held
// against close (see statusPage.state), naming the node from the
// partition's metadata; open is false when the page was closed (the Where
// then says no node was running).
func readWhere(page *statusPage, meta func(PartitionID) *partMeta) (w Where, open bool) {
	st := page.state()
	w = Where{Partition: st.Partition, NodeIndex: st.Node, Running: st.Running, Step: st.Label}
	if w.Running {
		if m := meta(w.Partition); m != nil && w.NodeIndex < len(m.nodes) {
			w.Node = m.nodes[w.NodeIndex]
		}
	}
	return w, st.Open
}

// tailBuffer keeps the last bytes a backend wrote to stderr.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, l := range strings.Split(string(t.buf), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// lastLine is the last non-empty line written.
func (t *tailBuffer) lastLine() string {
	l := t.lines()
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}

// panicLine is the first "panic:" or "fatal error:" line, if any.
func (t *tailBuffer) panicLine() string {
	for _, l := range t.lines() {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return l
		}
	}
	return ""
}
