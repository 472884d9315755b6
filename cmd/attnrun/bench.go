package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/session"
)

// benchResult is what `attnrun bench --json` prints, as one line.
type benchResult struct {
	Model   string `json:"model"`
	Backend string `json:"backend"`
	BLAS    string `json:"blas"`
	Threads int    `json:"threads"`
	// Precision is the arithmetic of the matrix products (--precision).
	Precision ops.Precision `json:"precision"`
	// Transport is "shm" (tensors through the shared region), "inline"
	// (tensor bytes inside the gRPC messages, --no-shm) or "in process"
	// (--in-process: the backend reads the caller's tensors).
	Transport string `json:"transport"`
	// RunsVia is how the timed runs reached the backend: "doorbell" (the
	// shared-memory doorbell, plugins/doorbell.go), "grpc" (some or all
	// over gRPC: --no-shm, ATTNRUN_NO_DOORBELL=1, or a backend without a
	// doorbell) or "in process" (--in-process).
	RunsVia string `json:"runs_via"`
	// Outputs is "bound" (written into tensors bound once, like ONNX
	// Runtime's IOBinding) or "fresh" (new tensors every run,
	// --fresh-outputs).
	Outputs string `json:"outputs"`
	// SharedTensors is set when the inputs and bound outputs (with
	// --fresh-outputs, the inputs) were tensors in the session's arena
	// (session.Session.NewTensor), passed to the backend process by
	// reference; false with --heap-tensors (every run copies them through
	// the region), --no-shm and --in-process.
	SharedTensors bool              `json:"shared_tensors"`
	Inputs        map[string]string `json:"inputs"`
	Iters         int               `json:"iters"`
	Warmup        int               `json:"warmup"`
	P50ms         float64           `json:"p50_ms"`
	P90ms         float64           `json:"p90_ms"`
	P99ms         float64           `json:"p99_ms"`
	Minms         float64           `json:"min_ms"`
	Maxms         float64           `json:"max_ms"`
	Meanms        float64           `json:"mean_ms"`
	// Stddevms is the sample standard deviation (n-1) of the timed runs'
	// latencies (0 for one run).
	Stddevms float64 `json:"stddev_ms"`
	RunsSec  float64 `json:"runs_per_sec"`
	// PeakRSS is the preferred backend process's peak resident set size;
	// BackendRSS has every backend's.
	PeakRSS    int64            `json:"peak_rss_bytes"`
	BackendRSS map[string]int64 `json:"backend_peak_rss_bytes"`
	// Instances is the number of instances of each backend (--instances;
	// BackendRSS names instance i > 0 "name#i"), Callers the number of
	// goroutines calling Run at the same time (--callers), and InProcess
	// whether the CPU backend ran inside attnrun (--in-process; its RSS is
	// then attnrun's).
	Instances int  `json:"instances"`
	Callers   int  `json:"callers"`
	InProcess bool `json:"in_process"`
}

func newBenchCmd(g *globalFlags) *cobra.Command {
	var in inputFlags
	var iters, warmup, instances, callers int
	var asJSON, noShm, freshOutputs, quiet, inProcess, heapTensors bool
	var profilePath string
	cmd := &cobra.Command{
		Use:   "bench MODEL.onnx --input NAME=SOURCE ... [--iters N] [--warmup N]",
		Short: "Time repeated runs of a model: latency percentiles, throughput, backend peak memory",
		Long: `bench opens a session, runs the model --warmup times untimed, then --iters
times, timing each whole run as a caller sees it (host → backend process →
host). It prints p50, p90, p99 (nearest rank), min, max, mean and the sample
standard deviation of the latency, runs per second and the
backend process's peak resident set size. With --json, stdout holds one JSON
object on its last line. A progress bar is drawn on stderr only when stderr
is a terminal, and never with --json or --quiet.

The outputs of the first run are bound (session.RunOptions.Into, like ONNX
Runtime's IOBinding) and every later run writes into them, as a serving
loop would; --fresh-outputs gives every run new output tensors instead.
The inputs and the bound outputs are tensors in the memory the backend
processes share (session.Session.NewTensor, like IOBinding's device
tensors): runs pass them by reference. --heap-tensors keeps them in Go
memory instead, which every run copies into and out of the backend's region.

--instances N runs N instances of each backend (session.Options.Instances:
N backend processes, each with the model compiled, --threads threads each)
and --callers M (default N) goroutines calling Run at the same time, each
with its own bound outputs; the runs per second are then the timed runs
divided by the wall time of the timed phase, the throughput of the whole
session. --in-process runs the CPU backend inside attnrun
(session.Options.InProcess: no process, no copies, no crash isolation).

--profile FILE profiles the timed runs (every caller's): a table of time per
op type and node on stderr, and a Chrome trace-event JSON in FILE.`,
		Example: `  attnrun bench models/s000_multi_head/model.onnx --input x=random:1x128x32
  attnrun bench model.onnx -i x=random:1x512x768 --iters 200 --threads 2 --json
  attnrun bench model.onnx -i x=random:1x128x768 --instances 2 --threads 1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if iters < 1 {
				return usageErrorf("--iters must be ≥ 1")
			}
			if warmup < 0 {
				return usageErrorf("--warmup must be ≥ 0")
			}
			if instances < 1 {
				return usageErrorf("--instances must be ≥ 1")
			}
			if callers == 0 {
				callers = instances
			}
			if callers < 1 {
				return usageErrorf("--callers must be ≥ 1")
			}
			if profilePath != "" {
				if err := checkOutputFile("--profile", profilePath); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			opts := g.sessionOptions()
			opts.NoSharedMemory = noShm
			opts.Instances, opts.InProcess = instances, inProcess
			s, err := g.openWith(ctx, args[0], opts)
			if err != nil {
				return err
			}
			defer g.close(s)
			loaded, err := in.load(s.Inputs(), g.maxTensorBytes)
			if err != nil {
				return err
			}
			inputs := make(map[string]*tensor.Dense, len(loaded))
			shapes := make(map[string]string, len(loaded))
			var shared *sharedTensors
			if !heapTensors && !noShm && !inProcess {
				shared = &sharedTensors{s: s}
				defer shared.free()
			}
			for name, t := range loaded {
				d, err := ir.ToDense(t)
				if err == nil {
					d, err = shared.copyOf(d)
				}
				if err != nil {
					return fmt.Errorf("input %q: %w", name, err)
				}
				inputs[name] = d
				shapes[name] = fmt.Sprintf("%v[%s]", t.DType, ir.ShapeString(t.Shape))
			}
			var bar *progress
			if w := cmd.ErrOrStderr(); !quiet && !asJSON && isTerminal(w) {
				bar = newProgress(w, "bench", warmup+iters)
			}
			var prof *session.Profile
			if profilePath != "" {
				prof = &session.Profile{}
			}
			bellBefore := doorbellRuns(s)
			times, wall, err := benchLoop(ctx, s, inputs, warmup, iters, callers, !freshOutputs, shared, bar, prof)
			bar.finish()
			if err != nil {
				return err
			}
			res := summarize(times)
			res.RunsSec = float64(iters) / wall.Seconds()
			res.Model, res.Inputs, res.Iters, res.Warmup = args[0], shapes, iters, warmup
			res.Instances, res.Callers, res.InProcess = instances, callers, inProcess
			res.Backend, res.Transport, res.Outputs = g.backend, "shm", "bound"
			res.SharedTensors = shared != nil
			res.Precision, _ = ops.ParsePrecision(g.precision)
			if freshOutputs {
				res.Outputs = "fresh"
			}
			if noShm {
				res.Transport = "inline"
			}
			switch {
			case inProcess && g.backend == session.CPU:
				res.Transport, res.RunsVia = "in process", "in process"
			case doorbellRuns(s)-bellBefore >= uint64(warmup+iters):
				res.RunsVia = "doorbell"
			default:
				res.RunsVia = "grpc"
			}
			if bs := s.Backends(); len(bs) > 0 {
				res.BLAS = bs[0].Details["blas"]
				res.Threads = s.Threads()
				if res.Threads == 0 {
					res.Threads, _ = strconv.Atoi(bs[0].Details["gomaxprocs"])
				}
			}
			stats, err := s.Stats(ctx)
			if err != nil {
				return fmt.Errorf("reading backend stats: %w", err)
			}
			res.BackendRSS = map[string]int64{}
			for name, st := range stats {
				res.BackendRSS[name] = st.MaxRSSBytes
			}
			res.PeakRSS = res.BackendRSS[g.backend]
			w := cmd.OutOrStdout()
			if prof != nil {
				if err := writeProfile(cmd.ErrOrStderr(), args[0], s, prof, profilePath); err != nil {
					return err
				}
			}
			if asJSON {
				b, err := json.Marshal(res)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(w, "%s\n", b)
				return err
			}
			printBench(w, &res)
			return nil
		},
	}
	in.register(cmd)
	cmd.Flags().IntVarP(&iters, "iters", "n", 100, "timed runs")
	cmd.Flags().IntVar(&warmup, "warmup", 10, "untimed runs before timing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as one JSON object (the last line of stdout)")
	cmd.Flags().BoolVar(&noShm, "no-shm", false, "send tensors as bytes inside the gRPC messages instead of through shared memory")
	cmd.Flags().BoolVar(&freshOutputs, "fresh-outputs", false, "give every run new output tensors instead of writing into the first run's")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar (there is none either when stderr is not a terminal, or with --json)")
	cmd.Flags().IntVar(&instances, "instances", 1, "instances of each backend (each a process with the model compiled, --threads threads each)")
	cmd.Flags().IntVar(&callers, "callers", 0, "goroutines calling Run at the same time (default: --instances)")
	cmd.Flags().BoolVar(&inProcess, "in-process", false, "run the CPU backend inside attnrun (no process, no crash isolation)")
	cmd.Flags().BoolVar(&heapTensors, "heap-tensors", false, "keep the inputs and bound outputs in Go memory (every run copies them through the backend's region) instead of in the memory the backends share")
	cmd.Flags().StringVar(&profilePath, "profile", "", "profile the timed runs (of every caller): print time per op type and node (stderr) and write a Chrome trace-event JSON to this file")
	return cmd
}

// benchLoop runs warmup untimed runs and then iters timed ones, from
// callers goroutines at once, returning each timed run's duration and the
// wall time of the timed runs. With bind, each caller binds its first run's
// outputs and writes its later runs into them: copies made by shared when
// it is set. With prof, the timed runs (every caller's) are profiled into
// it, in the order they started.
func benchLoop(ctx context.Context, s *session.Session, inputs map[string]*tensor.Dense, warmup, iters, callers int, bind bool, shared *sharedTensors, bar *progress, prof *session.Profile) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ros := make([]session.RunOptions, callers) // each caller's bound outputs and profile
	var mu sync.Mutex                          // times and bar
	times := make([]time.Duration, 0, iters)
	// phase makes n runs (numbered from first) from every caller at once.
	phase := func(first, n int, timed bool) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for c := range ros {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)); i <= n && ctx.Err() == nil; i = int(next.Add(1)) {
					start := time.Now()
					out, err := s.RunWith(ctx, inputs, ros[c])
					d := time.Since(start)
					if err != nil {
						cancel(fmt.Errorf("run %d: %w", first+i, cliError(err)))
						return
					}
					if bind && ros[c].Into == nil {
						if ros[c].Into, err = shared.copies(bindable(out)); err != nil {
							cancel(fmt.Errorf("binding the outputs of run %d: %w", first+i, err))
							return
						}
					}
					mu.Lock()
					if timed {
						times = append(times, d)
					}
					bar.step(d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	phase(0, warmup, false)
	if prof != nil {
		// The timed runs only; each caller appends to a profile of its own.
		for c := range ros {
			ros[c].Profile = &session.Profile{}
		}
	}
	start := time.Now()
	phase(warmup, iters, true)
	wall := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	if prof != nil {
		for _, ro := range ros {
			prof.Runs = append(prof.Runs, ro.Profile.Runs...)
		}
		slices.SortStableFunc(prof.Runs, func(a, b session.RunProfile) int { return a.Start.Compare(b.Start) })
	}
	return times, wall, nil
}

// bindable returns the outputs that can be bound for later runs: plain
// tensors of rank ≥ 1 (scalars cannot be bound).
func bindable(out map[string]*tensor.Dense) map[string]*tensor.Dense {
	into := make(map[string]*tensor.Dense, len(out))
	for name, d := range out {
		if len(d.Shape()) > 0 && !d.RequiresIterator() {
			into[name] = d
		}
	}
	return into
}

// sharedTensors makes bench's inputs and bound outputs in the session's
// arena (Session.NewTensor) and frees them at the end. A nil
// *sharedTensors leaves tensors where they are.
type sharedTensors struct {
	s    *session.Session
	mu   sync.Mutex
	made []*tensor.Dense
}

// copyOf returns a copy of d in the arena (d itself when sh is nil).
func (sh *sharedTensors) copyOf(d *tensor.Dense) (*tensor.Dense, error) {
	if sh == nil {
		return d, nil
	}
	c, err := sh.s.NewTensorFrom(d)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	sh.made = append(sh.made, c)
	sh.mu.Unlock()
	return c, nil
}

// copies returns copyOf of every tensor of m.
func (sh *sharedTensors) copies(m map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	if sh == nil {
		return m, nil
	}
	out := make(map[string]*tensor.Dense, len(m))
	for name, d := range m {
		c, err := sh.copyOf(d)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", name, err)
		}
		out[name] = c
	}
	return out, nil
}

// free gives back every tensor made.
func (sh *sharedTensors) free() {
	if sh == nil {
		return
	}
	for _, d := range sh.made {
		_ = sh.s.FreeTensor(d)
	}
}

// summarize computes the latency statistics of times (not empty).
func summarize(times []time.Duration) benchResult {
	sorted := append([]time.Duration(nil), times...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var total time.Duration
	for _, d := range sorted {
		total += d
	}
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	r := benchResult{
		P50ms:  ms(percentile(sorted, 50)),
		P90ms:  ms(percentile(sorted, 90)),
		P99ms:  ms(percentile(sorted, 99)),
		Minms:  ms(sorted[0]),
		Maxms:  ms(sorted[len(sorted)-1]),
		Meanms: ms(total) / float64(len(sorted)),
	}
	if n := len(sorted); n > 1 {
		var sq float64
		for _, d := range sorted {
			dev := ms(d) - r.Meanms
			sq += dev * dev
		}
		r.Stddevms = math.Sqrt(sq / float64(n-1))
	}
	if total > 0 {
		r.RunsSec = float64(len(sorted)) / total.Seconds()
	}
	return r
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func printBench(w io.Writer, r *benchResult) {
	names := make([]string, 0, len(r.Inputs))
	for n := range r.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	var ins []string
	for _, n := range names {
		ins = append(ins, n+" "+r.Inputs[n])
	}
	fmt.Fprintf(w, "model:      %s\n", r.Model)
	fmt.Fprintf(w, "inputs:     %s\n", strings.Join(ins, ", "))
	transport := r.Transport
	switch {
	case r.SharedTensors && r.Outputs == "fresh":
		transport += ", inputs shared"
	case r.SharedTensors:
		transport += ", inputs and bound outputs shared"
	}
	fmt.Fprintf(w, "backend:    %s (blas %s, %d threads, %s products, tensors via %s, runs via %s, %s outputs)\n", r.Backend, r.BLAS, r.Threads, r.Precision, transport, r.RunsVia, r.Outputs)
	fmt.Fprintf(w, "runs:       %d timed after %d warmup\n", r.Iters, r.Warmup)
	if r.Instances > 1 || r.Callers > 1 || r.InProcess {
		where := "backend processes"
		if r.InProcess {
			where = "in attnrun's process"
		}
		fmt.Fprintf(w, "instances:  %d of each backend (%s), %d concurrent callers\n", r.Instances, where, r.Callers)
	}
	fmt.Fprintf(w, "latency:    p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  min %.3f ms  max %.3f ms\n", r.P50ms, r.P90ms, r.P99ms, r.Minms, r.Maxms)
	fmt.Fprintf(w, "            mean %.3f ms  stddev %.3f ms\n", r.Meanms, r.Stddevms)
	fmt.Fprintf(w, "throughput: %.1f runs/s\n", r.RunsSec)
	if r.InProcess && r.Backend == "cpu" {
		fmt.Fprintf(w, "peak RSS:   %s (attnrun's own process, which runs the cpu backend)\n", humanBytes(r.PeakRSS))
		return
	}
	fmt.Fprintf(w, "peak RSS:   %s (backend %q process)\n", humanBytes(r.PeakRSS), r.Backend)
	others := make([]string, 0, len(r.BackendRSS))
	for name := range r.BackendRSS {
		if name != r.Backend {
			others = append(others, name)
		}
	}
	sort.Strings(others) // cpu, cpu#1, ...
	for _, name := range others {
		fmt.Fprintf(w, "            %s (backend %q process)\n", humanBytes(r.BackendRSS[name]), name)
	}
}

func humanBytes(n int64) string {
	switch {
	case n < 0:
		return "unknown"
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// isTerminal reports whether w is a terminal (a progress bar redrawn with
// \r belongs on one, not in a log file or a pipe).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress is a one-line progress bar redrawn in place with \r, at most
// every progressEvery, on w (a terminal). A nil *progress draws nothing.
type progress struct {
	w       io.Writer
	label   string // the command: "bench", "profile"
	total   int
	done    int
	last    time.Time
	recent  time.Duration
	started bool
}

const progressEvery = 100 * time.Millisecond

// newProgress starts a bar labelled with the command's name for total runs.
func newProgress(w io.Writer, label string, total int) *progress {
	return &progress{w: w, label: label, total: total}
}

// step records one finished run taking d.
func (p *progress) step(d time.Duration) {
	if p == nil {
		return
	}
	p.done++
	p.recent = d
	if now := time.Now(); !p.started || now.Sub(p.last) >= progressEvery || p.done == p.total {
		p.started, p.last = true, now
		p.draw()
	}
}

func (p *progress) draw() {
	const width = 30
	filled := width * p.done / max(p.total, 1)
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d  last %.3f ms ", p.label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.done, p.total, float64(p.recent.Nanoseconds())/1e6)
}

// finish ends the bar's line.
func (p *progress) finish() {
	if p != nil && p.started {
		fmt.Fprintln(p.w)
	}
}

// doorbellRuns sums the Runs the session's backend processes answered
// through the doorbell so far.
func doorbellRuns(s *session.Session) uint64 {
	var n uint64
	for _, b := range s.Backends() {
		n += b.DoorbellRuns
	}
	return n
}
