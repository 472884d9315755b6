package plugins

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// Process groups and the parent-death signal.
//
// Every backend starts as the leader of its own process group (Setpgid), so
// that a wrapper script's children go with it: the host kills the group
// (kill(-pgid, SIGKILL)), never just the direct child, and kills it again
// as soon as the leader has exited, so that no straggler holds the
// backend's stdout or stderr pipe open (go-plugin waits for both to close).
// Its own process group also keeps a terminal's Ctrl-C from reaching the
// backend: the host alone decides when it ends.
//
// On Linux the backend also gets a parent-death signal (Pdeathsig: SIGKILL),
// so that it dies with its host however the host ends, SIGKILL included and
// even while the backend is stopped (SIGKILL ends a stopped process; the
// parent pipe of serve.go cannot, as a stopped process reads nothing). The
// kernel sends it when the *thread* that forked the child exits, not the
// process (golang/go#27505): a Go program's threads come and go, and one
// that a goroutine locked (runtime.LockOSThread) and left locked dies with
// that goroutine. So every backend is forked from one goroutine that locks
// its thread and never returns (startOnForkThread): that thread lives as
// long as the host does.

// forkRequest asks the fork thread to start a command.
type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	forkOnce     sync.Once
	forkRequests chan forkRequest
)

// startOnForkThread starts cmd from the host's long-lived fork thread (see
// above), with its own process group and a parent-death signal.
func startOnForkThread(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	forkOnce.Do(func() {
		forkRequests = make(chan forkRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread outlives every child
			for r := range forkRequests {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := forkRequest{cmd: cmd, done: make(chan error, 1)}
	forkRequests <- r
	return <-r.done
}

// procRunner runs the backend command for go-plugin (runner.Runner) and
// records how it ended. It waits for the process itself (os.Process.Wait,
// not exec.Cmd.Wait, which would close the pipes before go-plugin has read
// them), kills the process group, and dials the backend's socket.
type procRunner struct {
	cmd            *exec.Cmd
	name           string // the executable in messages
	stdout, stderr io.ReadCloser
	pid            int
	done           chan struct{} // closed once the process has exited
	waitErr        error         // how it ended; set before done closes
	// drained is closed once go-plugin has read both pipes to their end
	// (and so the tail of stderr) and the process has exited.
	drained chan struct{}

	mu         sync.Mutex
	socketDir  string // go-plugin's temporary directory for the socket
	network    string // where the backend listens, from its handshake
	socketAddr string
	dirRemoved bool
	pipesOnce  sync.Once
}

func (r *procRunner) pipes() error {
	var err error
	if r.stdout, err = r.cmd.StdoutPipe(); err != nil {
		return err
	}
	r.stderr, err = r.cmd.StderrPipe()
	return err
}

// Start starts the process (see startOnForkThread) and a goroutine that
// waits for it, then kills what is left of its process group.
func (r *procRunner) Start(context.Context) error {
	if err := startOnForkThread(r.cmd); err != nil {
		r.waitErr = err
		close(r.done)
		close(r.drained)
		return err
	}
	r.pid = r.cmd.Process.Pid
	go func() {
		ps, err := r.cmd.Process.Wait()
		switch {
		case err != nil:
			r.waitErr = err
		case !ps.Success():
			r.waitErr = &exec.ExitError{ProcessState: ps}
		}
		close(r.done)
		r.killGroup() // stragglers the leader left behind
	}()
	return nil
}

// Wait waits for the process (go-plugin calls it once both pipes reached
// end of file) and closes the host's ends of the pipes.
func (r *procRunner) Wait(context.Context) error {
	<-r.done
	r.closePipes()
	close(r.drained)
	return r.waitErr
}

// Kill kills the process group.
func (r *procRunner) Kill(context.Context) error {
	r.killGroup()
	return nil
}

// killGroup sends SIGKILL to the backend's process group. The group's id
// stays reserved while any member lives, so this cannot reach another
// process's group.
func (r *procRunner) killGroup() {
	if r.pid > 0 {
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	}
}

// exited reports whether the process has ended.
func (r *procRunner) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// closePipes closes the host's ends of the backend's stdout and stderr, which
// ends go-plugin's readers even if some process outside the group still
// holds the other ends.
func (r *procRunner) closePipes() {
	r.pipesOnce.Do(func() {
		if r.stdout != nil {
			r.stdout.Close()
		}
		if r.stderr != nil {
			r.stderr.Close()
		}
	})
}

// setSocketDir records go-plugin's temporary directory for the socket.
func (r *procRunner) setSocketDir(dir string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.socketDir = dir
}

// removeSocketDir removes go-plugin's temporary directory (and the socket
// in it). Once connected the host needs neither: removing them early means
// that no exit path of the host, SIGKILL included, leaves them behind.
func (r *procRunner) removeSocketDir() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.socketDir != "" && !r.dirRemoved {
		_ = os.RemoveAll(r.socketDir)
		r.dirRemoved = true
	}
}

// dial connects to the backend's socket (the gRPC dialer; it replaces
// go-plugin's), then removes the socket's directory. gRPC never dials again:
// idleness is turned off, and a broken connection means a dead backend.
func (r *procRunner) dial(ctx context.Context, _ string) (net.Conn, error) {
	r.mu.Lock()
	network, addr := r.network, r.socketAddr
	r.mu.Unlock()
	if addr == "" {
		return nil, errors.New("the backend announced no address")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err == nil {
		r.removeSocketDir()
	}
	return c, err
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.name }
func (r *procRunner) ID() string            { return strconv.Itoa(r.pid) }

func (r *procRunner) Diagnose(context.Context) string {
	return "the executable is not an attnrun backend, or it failed before the go-plugin handshake"
}

// PluginToHost records the address the backend announced in its handshake.
func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	r.mu.Lock()
	r.network, r.socketAddr = network, addr
	r.mu.Unlock()
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
