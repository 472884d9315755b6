package viz

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/session"
)

// ProfileSummary aggregates profiled runs: time per plan step, per node
// and per op type, and how much of each backend's run the steps cover.
type ProfileSummary struct {
	Runs int
	// Host is the total wall time of the runs as the caller saw them;
	// Backend the total of the partitions' runs inside their backends
	// (Server.Run); Steps the total of the timed steps; Transfers the
	// host's writing of inputs and reading of outputs, and the backends'
	// decoding and encoding.
	Host, Backend, Steps, Transfers time.Duration
	// Nodes and Ops are sorted by total time, largest first.
	Nodes []NodeTime
	Ops   []OpTime
	// Untimed lists the backends that reported no steps.
	Untimed []string
	// SharedInputs and SharedOutputs count, by name, the runs in which an
	// input was passed, or an output left in its bound tensor, by
	// reference: tensors made by Session.NewTensor, never copied across
	// the process boundary (plugins.RunProfile.InputsShared, OutputsShared).
	SharedInputs, SharedOutputs map[string]int
}

// NodeTime is one node's (or fused region's) time over all runs.
type NodeTime struct {
	Backend, Name, Op string
	Calls             int
	Total             time.Duration
}

// OpTime is one op type's time over all runs.
type OpTime struct {
	Op    string
	Calls int
	Total time.Duration
}

// Summarize aggregates profiled runs.
func Summarize(runs []session.RunProfile) ProfileSummary {
	s := ProfileSummary{Runs: len(runs)}
	nodes := map[[3]string]*NodeTime{}
	opsT := map[string]*OpTime{}
	untimed := map[string]bool{}
	for _, r := range runs {
		s.Host += r.Duration
		for _, p := range r.Partitions {
			for _, name := range p.InputsShared {
				s.SharedInputs = countName(s.SharedInputs, name)
			}
			for _, name := range p.OutputsShared {
				s.SharedOutputs = countName(s.SharedOutputs, name)
			}
			s.Backend += p.Run.Duration
			s.Transfers += p.WriteInputs.Duration + p.ReadOutputs.Duration + p.Decode.Duration + p.Encode.Duration
			if len(p.Steps) == 0 {
				untimed[p.Backend] = true
			}
			for _, st := range p.Steps {
				s.Steps += st.Duration
				op := st.QualifiedOp()
				k := [3]string{p.Backend, st.Name, op}
				n := nodes[k]
				if n == nil {
					n = &NodeTime{Backend: p.Backend, Name: st.Name, Op: op}
					nodes[k] = n
				}
				n.Calls++
				n.Total += st.Duration
				o := opsT[op]
				if o == nil {
					o = &OpTime{Op: op}
					opsT[op] = o
				}
				o.Calls++
				o.Total += st.Duration
			}
		}
	}
	for _, n := range nodes {
		s.Nodes = append(s.Nodes, *n)
	}
	sortByTotal(s.Nodes, func(n NodeTime) (time.Duration, string) { return n.Total, n.Name })
	for _, o := range opsT {
		s.Ops = append(s.Ops, *o)
	}
	sortByTotal(s.Ops, func(o OpTime) (time.Duration, string) { return o.Total, o.Op })
	for b := range untimed {
		s.Untimed = append(s.Untimed, b)
	}
	sort.Strings(s.Untimed)
	return s
}

// countName adds one to m[name], making m when it is nil.
func countName(m map[string]int, name string) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[name]++
	return m
}

// sharedLine says which tensors went by reference in how many of runs
// ("x, y (12 of 100 runs)"); "" when none did.
func sharedLine(counts map[string]int, runs int) string {
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		if counts[name] < runs {
			names[i] = fmt.Sprintf("%s (%d of %d runs)", name, counts[name], runs)
		}
	}
	return strings.Join(names, ", ")
}

// sortByTotal sorts by time, largest first, then by name.
func sortByTotal[T any](xs []T, key func(T) (time.Duration, string)) {
	slices.SortFunc(xs, func(a, b T) int {
		ta, na := key(a)
		tb, nb := key(b)
		if ta != tb {
			return cmp.Compare(tb, ta)
		}
		return strings.Compare(na, nb)
	})
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// WriteTable prints the summary: the time per run, then op types and nodes
// sorted by time, with their share of all step time.
func (s *ProfileSummary) WriteTable(w io.Writer) {
	if s.Runs == 0 {
		fmt.Fprintln(w, "no profiled runs")
		return
	}
	n := float64(s.Runs)
	pct := func(d time.Duration) float64 {
		if s.Steps == 0 {
			return 0
		}
		return 100 * float64(d) / float64(s.Steps)
	}
	cover := 0.0
	if s.Backend > 0 {
		cover = 100 * float64(s.Steps) / float64(s.Backend)
	}
	fmt.Fprintf(w, "per run (mean of %d): %.3f ms on the host; %.3f ms running partitions in the backends, of which the timed steps are %.3f ms (%.1f%%); %.3f ms moving tensors (host and backends)\n",
		s.Runs, ms(s.Host)/n, ms(s.Backend)/n, ms(s.Steps)/n, cover, ms(s.Transfers)/n)
	if len(s.Untimed) > 0 {
		fmt.Fprintf(w, "backend(s) %s reported no per-step times: their partitions count only as a whole\n", strings.Join(s.Untimed, ", "))
	}
	if len(s.SharedInputs)+len(s.SharedOutputs) > 0 {
		fmt.Fprintf(w, "by reference (shared tensors, no copy across the process boundary): inputs %s; outputs %s\n",
			cmp.Or(sharedLine(s.SharedInputs, s.Runs), "none"), cmp.Or(sharedLine(s.SharedOutputs, s.Runs), "none"))
	}
	fmt.Fprintf(w, "\nby op type:\n  %-30s %7s %11s %11s %7s\n", "op", "steps", "ms/run", "µs/step", "%")
	for _, o := range s.Ops {
		fmt.Fprintf(w, "  %-30s %7.0f %11.3f %11.1f %6.1f%%\n", o.Op, float64(o.Calls)/n, ms(o.Total)/n, us(o.Total)/float64(o.Calls), pct(o.Total))
	}
	fmt.Fprintf(w, "\nby node:\n  %-40s %-28s %-8s %11s %7s\n", "node", "op", "backend", "µs/run", "%")
	for _, nd := range s.Nodes {
		fmt.Fprintf(w, "  %-40s %-28s %-8s %11.1f %6.1f%%\n", nd.Name, nd.Op, nd.Backend, us(nd.Total)/n, pct(nd.Total))
	}
}

// traceEvent is one event of Chrome's trace-event format (the JSON that
// chrome://tracing and Perfetto open): "X" is a complete event with a
// duration, "M" metadata naming a process or thread.
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace is a profile in Chrome's trace-event JSON format.
type Trace struct {
	TraceEvents     []traceEvent      `json:"traceEvents"`
	DisplayTimeUnit string            `json:"displayTimeUnit"`
	OtherData       map[string]string `json:"otherData,omitempty"`
}

// Track ids (tids) within a process.
const (
	tidRuns      = 1 // host: whole runs; backend: its partitions' runs and steps
	tidTransfers = 2 // host: partitions' calls with writing inputs, reading outputs
	// An in-process backend (session.Options.InProcess) has the host's
	// pid: its partition runs and steps are this track of the host's.
	tidInProcessRuns = 3
)

// NewTrace lays profiled runs out as a trace: the host process (hostPid)
// with one track for the runs and one for each partition's call and tensor
// transfers, and one process per backend with its partition runs, their
// steps nested inside, and its decoding and encoding of tensors (an
// in-process backend: one more track of the host's). Times are in
// microseconds from the first run's start.
func NewTrace(runs []session.RunProfile, hostPid int, other map[string]string) *Trace {
	t := &Trace{DisplayTimeUnit: "ms", OtherData: other}
	if len(runs) == 0 {
		return t
	}
	origin := runs[0].Start
	x := func(name, cat string, pid, tid int, sp plugins.Span, args map[string]any) {
		d := us(sp.Duration)
		t.TraceEvents = append(t.TraceEvents, traceEvent{Name: name, Cat: cat, Ph: "X", Ts: us(sp.Start.Sub(origin)), Dur: &d, Pid: pid, Tid: tid, Args: args})
	}
	meta := func(kind string, pid, tid int, name string) {
		t.TraceEvents = append(t.TraceEvents, traceEvent{Name: kind, Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": name}})
	}
	meta("process_name", hostPid, 0, fmt.Sprintf("attnrun host (pid %d)", hostPid))
	meta("thread_name", hostPid, tidRuns, "runs")
	meta("thread_name", hostPid, tidTransfers, "partitions: calls and tensor transfers")
	backends := map[int]bool{}
	for i, r := range runs {
		x(fmt.Sprintf("run %d", i), "run", hostPid, tidRuns, r.Span, nil)
		for _, p := range r.Partitions {
			tid := tidRuns // the backend's partition runs and steps
			if p.Pid == hostPid {
				tid = tidInProcessRuns
			}
			if !backends[p.Pid] {
				backends[p.Pid] = true
				if p.Pid == hostPid {
					meta("thread_name", p.Pid, tid, fmt.Sprintf("backend %s (in process): partition runs and steps", p.Backend))
				} else {
					meta("process_name", p.Pid, 0, fmt.Sprintf("backend %s (pid %d)", p.Backend, p.Pid))
					meta("thread_name", p.Pid, tid, "partition runs and steps")
					meta("thread_name", p.Pid, tidTransfers, "tensor decoding and encoding")
				}
			}
			args := map[string]any{"run": i, "partition": p.Index, "backend": p.Backend}
			x(fmt.Sprintf("partition %d on %s", p.Index, p.Backend), "partition", hostPid, tidTransfers, p.Host, args)
			x("write inputs", "transfer", hostPid, tidTransfers, p.WriteInputs, args)
			x("read outputs", "transfer", hostPid, tidTransfers, p.ReadOutputs, args)
			if p.Pid != hostPid { // in process, nothing is decoded or encoded
				x("decode inputs", "transfer", p.Pid, tidTransfers, p.Decode, args)
				x("encode outputs", "transfer", p.Pid, tidTransfers, p.Encode, args)
			}
			x(fmt.Sprintf("partition %d", p.Index), "partition", p.Pid, tid, p.Run, args)
			for k, st := range p.Steps {
				x(st.Name, "step", p.Pid, tid, st.Span, map[string]any{"op": st.QualifiedOp(), "run": i, "partition": p.Index, "step": k})
			}
		}
	}
	return t
}

// WriteFile writes the trace as JSON.
func (t *Trace) WriteFile(path string) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
