package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/budget"
	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"gorgonia.org/tensor"
)

// ExecutablePrefix starts the file name of every external backend:
// attnrun-backend-<name>.
const ExecutablePrefix = "attnrun-backend-"

// PluginDirEnv names the environment variable holding the default plugin
// directory.
const PluginDirEnv = "ATTNRUN_PLUGIN_DIR"

// DefaultStartTimeout bounds a backend's start and handshake.
const DefaultStartTimeout = 20 * time.Second

// LaunchSpec says how to start one backend process.
type LaunchSpec struct {
	// Name is the backend's name in messages ("cpu", "gpu").
	Name string
	// Cmd is the command to run. Launch adds to its environment (the
	// handshake, the status page fd) and its ExtraFiles (the status page);
	// its Stdin, Stdout and Stderr are taken over by go-plugin.
	Cmd *exec.Cmd
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
}

// Process is a running backend process. It implements Backend; when a call
// fails because the process died, Run returns a *DiedError naming the node
// that was running.
type Process struct {
	name   string
	pid    int
	client *plugin.Client
	rpc    *client
	run    *procRunner
	page   *statusPage
	shm    *hostShm // nil: tensors travel inline
	parent *os.File // write end of the parent pipe
	stderr *tailBuffer

	killOnce sync.Once
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
			return msg == "plugin process exited" || msg == "plugin failed to exit gracefully"
		},
	})
}

// Launch starts a backend process, completes the go-plugin handshake and
// returns the connected Process. On failure the process is killed and the
// error says why in one line (e.g. the executable is not a backend).
func Launch(ctx context.Context, spec LaunchSpec) (*Process, error) {
	if spec.Cmd == nil {
		return nil, errors.New("launch: no command")
	}
	if spec.Name == "" {
		spec.Name = strings.TrimPrefix(baseName(spec.Cmd.Path), ExecutablePrefix)
	}
	if spec.StartTimeout <= 0 {
		spec.StartTimeout = DefaultStartTimeout
	}
	if spec.Logger == nil {
		spec.Logger = NewLogger(os.Stderr)
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

	cmd := spec.Cmd
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, pageFile, parentR)
	shmEnv := SharedFDEnv + "=" // none: also hides a value inherited from the host
	if shm != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, shm.f)
		shmEnv += strconv.Itoa(fd + 2)
	}
	// The host environment goes first so that the spec's and ours win.
	cmd.Env = append(append(os.Environ(), cmd.Env...),
		StatusFDEnv+"="+strconv.Itoa(fd), ParentFDEnv+"="+strconv.Itoa(fd+1), shmEnv)

	tail := &tailBuffer{max: 8 << 10}
	pr := &procRunner{cmd: cmd, done: make(chan struct{})}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugin.PluginSet{PluginName: &grpcPlugin{}},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		// go-plugin passes a blank command carrying only its own variables
		// (handshake cookie, protocol versions, socket dir): run ours with them.
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, _ string) (runner.Runner, error) {
			cmd.Env = append(cmd.Env, spec.Env...)
			return pr, pr.pipes()
		},
		SkipHostEnv:  true, // added above, before the spec's variables
		StartTimeout: spec.StartTimeout,
		Logger:       spec.Logger,
		Stderr:       tail,
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		},
	})
	fail := func(err error) (*Process, error) {
		msg := oneLine(err)
		if msg == noHandshake {
			// stdout closed: the process is exiting; say how it ended.
			t := time.NewTimer(time.Second)
			select {
			case <-pr.done:
				if pr.waitErr != nil {
					msg += " (" + pr.waitErr.Error() + ")"
				}
			case <-t.C:
			}
			t.Stop()
		}
		if last := tail.lastLine(); last != "" {
			msg += " (backend stderr: " + last + ")"
		}
		c.Kill()
		page.close()
		shm.close()
		parentW.Close()
		return nil, fmt.Errorf("launch backend %q (%s): %s", spec.Name, cmd.Path, msg)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	rpc, err := c.Client()
	if err != nil {
		return fail(err)
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		return fail(err)
	}
	cl, ok := raw.(*client)
	if !ok {
		return fail(fmt.Errorf("dispensed %T, not a backend client", raw))
	}
	cl.shm = shm
	return &Process{name: spec.Name, pid: pr.pid, client: c, rpc: cl, run: pr, page: page, shm: shm, parent: parentW, stderr: tail}, nil
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

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.run.done:
		return true
	default:
		return false
	}
}

// ExitErr returns how the process ended ("exit status 2", "signal: killed");
// nil while it runs or when it exited with status 0.
func (p *Process) ExitErr() error {
	if !p.Exited() {
		return nil
	}
	return p.run.waitErr
}

// Kill ends the process (gracefully if it answers, forcibly otherwise) and
// releases the host's resources for it. It is safe to call more than once.
func (p *Process) Kill() {
	p.killOnce.Do(func() {
		p.client.Kill()
		p.page.close()
		// After the process is gone: a Run in flight fails and releases
		// the region, which close waits for.
		p.shm.close()
		p.parent.Close()
	})
}

// Info asks the backend to describe itself.
func (p *Process) Info(ctx context.Context) (*Info, error) {
	info, err := p.rpc.Info(ctx)
	return info, p.check(err)
}

// Capability asks which nodes the backend takes.
func (p *Process) Capability(ctx context.Context, nodes []NodeQuery) ([]Verdict, error) {
	v, err := p.rpc.Capability(ctx, nodes)
	return v, p.check(err)
}

// Compile sends a partition to the backend.
func (p *Process) Compile(ctx context.Context, m *ir.Model, opts CompileOptions) (PartitionID, error) {
	id, err := p.rpc.Compile(ctx, m, opts)
	return id, p.check(err)
}

// Run runs a compiled partition. If the backend dies meanwhile, the error is
// a *DiedError naming the node that was running. Tensors travel through the
// shared region (see shm.go), which one Run uses at a time: concurrent Runs
// on one Process are serialized. Outputs are fresh tensors the caller owns.
func (p *Process) Run(ctx context.Context, id PartitionID, inputs map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	out, err := p.rpc.Run(ctx, id, inputs)
	return out, p.check(err)
}

// RunInto is Run writing the outputs named in into into those caller-owned
// tensors (see BindOutput for what they must be), which the result then
// holds; the other outputs are fresh tensors.
func (p *Process) RunInto(ctx context.Context, id PartitionID, inputs, into map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	out, err := p.rpc.RunInto(ctx, id, inputs, into)
	return out, p.check(err)
}

// Release frees a compiled partition in the backend.
func (p *Process) Release(ctx context.Context, id PartitionID) error {
	return p.check(p.rpc.Release(ctx, id))
}

// Stats asks for the backend's resource counters.
func (p *Process) Stats(ctx context.Context) (*Stats, error) {
	st, err := p.rpc.Stats(ctx)
	return st, p.check(err)
}

// diedWait bounds how long check waits for a process whose connection broke
// to be reaped.
const diedWait = 3 * time.Second

// check turns an RPC failure caused by the process's death into a
// *DiedError.
func (p *Process) check(err error) error {
	if err == nil {
		return nil
	}
	var remote *RemoteError
	if errors.As(err, &remote) {
		return err
	}
	if !p.Exited() {
		// The transport fails a little before the process is reaped.
		t := time.NewTimer(diedWait)
		defer t.Stop()
		select {
		case <-p.run.done:
		case <-t.C:
			return err
		}
	}
	return p.died()
}

// died builds the error describing the process's death from the status page.
func (p *Process) died() *DiedError {
	e := &DiedError{Backend: p.name, Pid: p.pid, ExitErr: p.run.waitErr, Stderr: p.stderr.panicLine()}
	part, node, running, _ := p.page.read()
	e.Partition, e.Running, e.NodeIndex = part, running, node
	if running {
		if m := p.rpc.meta(part); m != nil && node < len(m.nodes) {
			e.Node = m.nodes[node]
		}
		e.Step = p.page.label()
	}
	return e
}

// DiedError reports a backend process that died during a call.
type DiedError struct {
	Backend string
	Pid     int
	// Running is true when a node was running; Partition and NodeIndex (an
	// index into the partition's execution order) say which, Node names it.
	Running   bool
	Partition PartitionID
	NodeIndex int
	Node      NodeRef
	// Step, when set, describes the step that was running in place of
	// Node: a fused step, named with the nodes it replaced.
	Step string
	// PartitionLabel, when set, replaces the backend's partition id in the
	// message (the host's own partition numbering).
	PartitionLabel string
	// ExitErr is how the process ended (*exec.ExitError), nil for status 0.
	ExitErr error
	// Stderr is the backend's panic or fatal error line, if it printed one.
	Stderr string
}

// Error reads `backend "cpu" (pid 1234) died while running node "/Softmax"
// (Softmax) of partition 0: exit status 2`.
func (e *DiedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend %q (pid %d) died", e.Backend, e.Pid)
	part := e.PartitionLabel
	if part == "" {
		part = strconv.FormatUint(uint64(e.Partition), 10)
	}
	if e.Running {
		if e.Step != "" {
			fmt.Fprintf(&b, " while running %s of partition %s", e.Step, part)
		} else if e.Node.OpType != "" {
			fmt.Fprintf(&b, " while running node %q (%s) of partition %s", e.Node.Label(), e.Node.QualifiedOp(), part)
		} else {
			fmt.Fprintf(&b, " while running node #%d of partition %s", e.NodeIndex, part)
		}
	} else {
		b.WriteString(" while no node was running")
	}
	if e.ExitErr != nil {
		fmt.Fprintf(&b, ": %v", e.ExitErr)
	} else {
		b.WriteString(": exit status 0")
	}
	if e.Stderr != "" {
		fmt.Fprintf(&b, " (backend stderr: %s)", e.Stderr)
	}
	return b.String()
}

// procRunner runs the backend command for go-plugin and records how it ended.
type procRunner struct {
	cmd            *exec.Cmd
	stdout, stderr io.ReadCloser
	pid            int
	done           chan struct{}
	waitErr        error
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) pipes() error {
	var err error
	if r.stdout, err = r.cmd.StdoutPipe(); err != nil {
		return err
	}
	r.stderr, err = r.cmd.StderrPipe()
	return err
}

func (r *procRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		close(r.done)
		r.waitErr = err
		return err
	}
	r.pid = r.cmd.Process.Pid
	return nil
}

func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	select {
	case <-r.done:
	default:
		r.waitErr = err
		close(r.done)
	}
	return err
}

func (r *procRunner) Kill(context.Context) error {
	if r.cmd.Process == nil {
		return nil
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.cmd.Path }
func (r *procRunner) ID() string            { return strconv.Itoa(r.pid) }

func (r *procRunner) Diagnose(context.Context) string {
	return "the executable is not an attnrun backend, or it failed before the go-plugin handshake"
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
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

// Candidate is a file in a plugin directory named like a backend.
type Candidate struct {
	// Name is the backend name: the file name without ExecutablePrefix.
	Name string
	Path string
	// Reason is set when the file cannot be a backend (not a regular file,
	// not executable); such candidates are listed so that they can be
	// reported as unavailable.
	Reason string
}

// Discover lists the attnrun-backend-* files in dir, sorted by name. An empty
// dir gives no candidates.
func Discover(dir string) ([]Candidate, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("plugin dir: %w", err)
	}
	var out []Candidate
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ExecutablePrefix) || len(e.Name()) == len(ExecutablePrefix) {
			continue
		}
		c := Candidate{Name: strings.TrimPrefix(e.Name(), ExecutablePrefix), Path: dir + string(os.PathSeparator) + e.Name()}
		fi, err := os.Stat(c.Path) // follows symlinks
		switch {
		case err != nil:
			c.Reason = err.Error()
		case !fi.Mode().IsRegular():
			c.Reason = "not a regular file"
		case fi.Mode().Perm()&0o111 == 0:
			c.Reason = fmt.Sprintf("not executable (mode %v)", fi.Mode().Perm())
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
