package plugins

import (
	"context"
	"os"
	"time"

	"github.com/attnrun/attnrun/plugins/backendpb"
)

// Span is a stretch of wall-clock time. Host and backends run on one
// machine, so their spans share a clock and lay out on one timeline.
type Span struct {
	Start    time.Time
	Duration time.Duration
}

// End is the span's end.
func (s Span) End() time.Time { return s.Start.Add(s.Duration) }

// StepTiming is one executed plan step of a profiled Run.
type StepTiming struct {
	Name, OpType, Domain string
	Span
}

// QualifiedOp is "OpType" or "domain:OpType".
func (t StepTiming) QualifiedOp() string {
	return NodeRef{OpType: t.OpType, Domain: t.Domain}.QualifiedOp()
}

// RunProfile holds the timings of one profiled Run of a partition.
//
// On the host, WithProfile(ctx, p) makes Backend.Run and RunInto ask the
// backend to time the Run and fill p: the host's own spans (writing the
// inputs, the call, reading the outputs) and the backend's (Decode, Run,
// Encode, Steps). Inside a backend, the protocol layer hands a Server's Run
// a context carrying the RunProfile it will send back: a Server that can
// time its steps appends them to ProfileFrom(ctx).Steps.
type RunProfile struct {
	// Host side: the whole RunInto, writing the inputs into the shared
	// region or message, the gRPC call, and reading the outputs.
	Host, WriteInputs, Call, ReadOutputs Span
	// Backend side: decoding the inputs, Server.Run, encoding the outputs.
	Decode, Run, Encode Span
	// Steps are the plan steps the backend timed (empty when it does not).
	Steps []StepTiming
	// Pid is the backend process that ran the partition.
	Pid int
	// OutputsInPlace names, sorted, the outputs the backend computed
	// straight into the memory OutputInto gave: the shared region's (sent
	// without a copy), the caller's bound tensors in the session's arena,
	// or, in process, the caller's bound tensors.
	OutputsInPlace []string
	// Host side again: InputsShared names the inputs passed from the
	// session's tensor arena without a copy (sorted), OutputsShared the
	// outputs the backend left in their bound tensors in the arena (in the
	// order the backend answered), which the host did not copy.
	InputsShared, OutputsShared []string
}

type profileKey struct{}

// WithProfile returns a context that makes a Run profile itself into p.
func WithProfile(ctx context.Context, p *RunProfile) context.Context {
	return context.WithValue(ctx, profileKey{}, p)
}

// ProfileFrom returns the RunProfile a Run should fill, or nil when it is
// not profiled.
func ProfileFrom(ctx context.Context) *RunProfile {
	p, _ := ctx.Value(profileKey{}).(*RunProfile)
	return p
}

// since is the span from start to now.
func since(start time.Time) Span { return Span{start, time.Since(start)} }

// clockAnchor is one reading of both of the process's clocks. Spans sent
// across the process boundary carry wall-clock starts, which spanToWire
// takes as the anchor's wall time plus the monotonic time since it: the
// spans of one process then keep their order and nesting even if the wall
// clock is stepped (NTP, a VM's clock sync) during a run, which would
// otherwise move the steps timed after the step out of the run that holds
// them.
var clockAnchor = time.Now()

// wallNanos is t as Unix nanoseconds on the anchor's timeline (t's wall
// clock when it has no monotonic reading).
func wallNanos(t time.Time) int64 {
	if t.IsZero() {
		return t.UnixNano()
	}
	return clockAnchor.UnixNano() + int64(t.Sub(clockAnchor))
}

func spanToWire(s Span) *backendpb.Span {
	return &backendpb.Span{StartUnixNs: wallNanos(s.Start), DurationNs: int64(s.Duration)}
}

func spanFromWire(s *backendpb.Span) Span {
	if s == nil {
		return Span{}
	}
	return Span{time.Unix(0, s.StartUnixNs), time.Duration(s.DurationNs)}
}

func profileToWire(p *RunProfile) *backendpb.RunProfile {
	w := &backendpb.RunProfile{Decode: spanToWire(p.Decode), Run: spanToWire(p.Run), Encode: spanToWire(p.Encode), Pid: int64(os.Getpid()), OutputsInPlace: p.OutputsInPlace}
	for _, st := range p.Steps {
		w.Steps = append(w.Steps, &backendpb.StepTiming{Name: st.Name, OpType: st.OpType, Domain: st.Domain, Span: spanToWire(st.Span)})
	}
	return w
}

// fromWire fills p's backend side from a reply.
func (p *RunProfile) fromWire(w *backendpb.RunProfile) {
	if w == nil {
		return
	}
	p.Decode, p.Run, p.Encode = spanFromWire(w.Decode), spanFromWire(w.Run), spanFromWire(w.Encode)
	p.Pid = int(w.Pid)
	p.OutputsInPlace = w.OutputsInPlace
	p.Steps = p.Steps[:0]
	for _, st := range w.Steps {
		p.Steps = append(p.Steps, StepTiming{Name: st.Name, OpType: st.OpType, Domain: st.Domain, Span: spanFromWire(st.Span)})
	}
}
