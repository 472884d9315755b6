package plugins

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/attnrun/attnrun/ir"
)

// Deadlines. Every control call the host makes has a bounded default
// deadline (the caller's context may end it sooner). A backend that does not
// answer one in time is killed (its process group, SIGKILL) and the call
// fails with a *StuckError: a backend that ignored one call cannot be
// trusted with the next. Run has no default deadline (a large model may
// legitimately run for minutes; session.Options.RunTimeout bounds it), but
// while a Run is in flight the host pings the backend every HealthInterval,
// and kills it when a ping is not answered within PingTimeout; the Run then
// fails with a *DiedError saying so.
const (
	// DefaultStartTimeout bounds a backend's start and go-plugin handshake.
	DefaultStartTimeout = 10 * time.Second
	// InfoTimeout bounds Info.
	InfoTimeout = 5 * time.Second
	// CapabilityTimeout bounds Capability.
	CapabilityTimeout = 10 * time.Second
	// CompileTimeout bounds the Compile of a partition without weights;
	// CompileBytesPerSecond scales it with the partition's initializers
	// (see CompileDeadline).
	CompileTimeout = 30 * time.Second
	// CompileBytesPerSecond is the slowest weight throughput Compile is
	// allowed: each CompileBytesPerSecond bytes of initializers add a second.
	CompileBytesPerSecond = 8 << 20
	// ReleaseTimeout bounds Release.
	ReleaseTimeout = 5 * time.Second
	// StatsTimeout bounds Stats.
	StatsTimeout = 5 * time.Second
	// PingTimeout bounds Ping: the health checks during a Run, and the check
	// after an abandoned Run that the backend has let go of the tensor
	// region.
	PingTimeout = 3 * time.Second
	// HealthInterval is how often a backend with a Run in flight is pinged.
	HealthInterval = time.Second
	// ShutdownGrace is how long Shutdown lets a backend exit by itself
	// before it kills the process group.
	ShutdownGrace = 200 * time.Millisecond
	// killWait bounds each wait of Kill (for the process to be reaped, then
	// for go-plugin's cleanup); Kill returns within about twice that.
	killWait = time.Second
	// diedWait bounds how long a call whose connection broke waits for the
	// process to be reaped, to report how it died. A cancelled call does
	// not wait.
	diedWait = time.Second
	// stderrWait bounds how long a dead backend's error waits for the rest
	// of its stderr (a panic message).
	stderrWait = 500 * time.Millisecond
)

// CompileDeadline is Compile's deadline for a partition whose initializers
// hold weightBytes bytes.
func CompileDeadline(weightBytes int64) time.Duration {
	return CompileTimeout + time.Duration(weightBytes/CompileBytesPerSecond)*time.Second
}

// weightBytes sums a model's initializer bytes.
func weightBytes(m *ir.Model) int64 {
	if m == nil || m.Graph == nil {
		return 0
	}
	var n int64
	for _, t := range m.Graph.Initializers {
		if t != nil {
			n += t.Bytes()
		}
	}
	return n
}

// control makes one control call under its default deadline limit. A call
// abandoned by the caller's context gives an *InterruptedError; one the
// backend did not answer in time kills the backend and gives a
// *StuckError; a dead backend gives a *DiedError.
func (p *Process) control(ctx context.Context, op string, limit time.Duration, call func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := call(cctx)
	if err == nil {
		return nil
	}
	var remote *RemoteError
	switch {
	case errors.As(err, &remote):
		return err
	case ctx.Err() != nil:
		return &InterruptedError{Backend: p.name, Pid: p.pid, Op: op, Err: ctx.Err()}
	case cctx.Err() != nil && !p.Exited():
		p.kill(fmt.Sprintf("it did not answer %s within %v", op, limit))
		return &StuckError{Backend: p.name, Pid: p.pid, Op: op, Limit: limit}
	}
	return p.check(ctx, err)
}

// watchdog pings the backend every HealthInterval while a Run is in flight
// and kills it when a ping goes unanswered for PingTimeout. It returns when
// the process ends.
func (p *Process) watchdog() {
	t := time.NewTicker(HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-p.run.done:
			return
		case <-p.killed:
			return
		case <-t.C:
		}
		if p.busy.Load() == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), PingTimeout)
		err := p.rpc.ping(ctx, 0)
		timedOut := ctx.Err() != nil
		cancel()
		if err != nil && timedOut && !p.Exited() {
			p.kill(fmt.Sprintf("it did not answer a health check within %v", PingTimeout))
			return
		}
	}
}

// waitFor waits for ch to close, at most d; it reports whether it closed.
func waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}
