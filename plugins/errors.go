package plugins

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Where says what a backend was running, as its status page told.
type Where struct {
	// Running is true when a node was running; Partition and NodeIndex (an
	// index into the partition's execution order) say which, Node names it.
	Running   bool
	Partition PartitionID
	NodeIndex int
	Node      NodeRef
	// Step, when set, describes the step that was running in place of
	// Node: a fused step, named with the nodes it replaced.
	Step string
	// PartitionLabel, when set, replaces the backend's partition id in
	// messages (the host's own partition numbering).
	PartitionLabel string
}

// String reads " while running node "/Softmax" (Softmax) of partition 0",
// or " while no node was running".
func (w Where) String() string {
	label := w.PartitionLabel
	if label == "" {
		label = strconv.FormatUint(uint64(w.Partition), 10)
	}
	switch {
	case !w.Running:
		return " while no node was running"
	case w.Step != "":
		return fmt.Sprintf(" while running %s of partition %s", w.Step, label)
	case w.Node.OpType != "":
		return fmt.Sprintf(" while running node %q (%s) of partition %s", w.Node.Label(), w.Node.QualifiedOp(), label)
	}
	return fmt.Sprintf(" while running node #%d of partition %s", w.NodeIndex, label)
}

// DiedError reports a backend process that died during a call.
type DiedError struct {
	Backend string
	Pid     int
	Where
	// ExitErr is how the process ended (*exec.ExitError), nil for status 0.
	ExitErr error
	// Stderr is the backend's panic or fatal error line, if it printed one.
	Stderr string
	// Killed, when set, says why the host killed the process (it stopped
	// answering); ExitErr is then the SIGKILL.
	Killed string
	// InProcess is true for an in-process backend (see InProcess) that
	// panicked; ExitErr is then the panic, and Pid the host's.
	InProcess bool
	// Instance is which instance of its backend died, where the host runs
	// several (package runtime/session sets it; 0 is the first).
	Instance int
}

// Error reads `backend "cpu" (pid 1234) died while running node "/Softmax"
// (Softmax) of partition 0: exit status 2`, or for a backend the host killed
// `backend "cpu" (pid 1234) was killed while running node ... of partition
// 0: it did not answer a health check within 3s`, or for an in-process one
// `backend "cpu" (in process) panicked while running node ... of partition
// 0: panic: ...`.
func (e *DiedError) Error() string {
	var b strings.Builder
	if e.InProcess {
		fmt.Fprintf(&b, "backend %q (in process) panicked%s: %v", e.Backend, e.Where, e.ExitErr)
		return b.String()
	}
	fmt.Fprintf(&b, "backend %q (pid %d) ", e.Backend, e.Pid)
	if e.Killed != "" {
		b.WriteString("was killed")
	} else {
		b.WriteString("died")
	}
	b.WriteString(e.Where.String())
	switch {
	case e.Killed != "":
		fmt.Fprintf(&b, ": %s", e.Killed)
	case e.ExitErr != nil:
		fmt.Fprintf(&b, ": %v", e.ExitErr)
	default:
		b.WriteString(": exit status 0")
	}
	if e.Stderr != "" {
		fmt.Fprintf(&b, " (backend stderr: %s)", e.Stderr)
	}
	return b.String()
}

// InterruptedError reports a call abandoned because its context ended
// (cancelled, or past its deadline). It unwraps to the context's error, so
// errors.Is(err, context.Canceled) and errors.Is(err,
// context.DeadlineExceeded) work. The backend is not harmed: the host
// checks in the background that it finished or dropped the call (a Ping
// with a fence, see PingRequest) before it reuses the tensor region, and
// kills it when it does not answer.
type InterruptedError struct {
	Backend string
	Pid     int
	// Op is the call: "run", "compile", ...
	Op string
	// Queued is true when the call was still waiting for an earlier Run on
	// the same backend (the tensor region is used by one Run at a time).
	Queued bool
	// Where says what the backend was running when the call was abandoned.
	Where
	// Err is the context's error.
	Err error
}

// Error reads `backend "cpu" (pid 1234): run interrupted while running node
// "/MatMul" (MatMul) of partition 0: context deadline exceeded`.
func (e *InterruptedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend %q (pid %d): %s interrupted", e.Backend, e.Pid, e.Op)
	if e.Queued {
		b.WriteString(" while waiting for an earlier run on this backend")
	} else if e.Op == "run" {
		b.WriteString(e.Where.String())
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// Unwrap returns the context's error.
func (e *InterruptedError) Unwrap() error { return e.Err }

// StuckError reports a control call (Info, Capability, Compile, Release,
// Stats, Ping) that the backend did not answer within its deadline (see
// the *Timeout constants). The host kills such a backend: it cannot be
// trusted with the next call. It unwraps to context.DeadlineExceeded.
type StuckError struct {
	Backend string
	Pid     int
	Op      string
	Limit   time.Duration
}

// Error reads `backend "gpu" (pid 1234) did not answer info within 5s and
// was killed`.
func (e *StuckError) Error() string {
	return fmt.Sprintf("backend %q (pid %d) did not answer %s within %v and was killed", e.Backend, e.Pid, e.Op, e.Limit)
}

// Unwrap returns context.DeadlineExceeded.
func (e *StuckError) Unwrap() error { return context.DeadlineExceeded }
