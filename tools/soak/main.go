// Command soak is attnrun's chaos soak test (make soak; not part of make
// test). It opens sessions on random seed models from models/, runs random
// shapes of them from many goroutines, and meanwhile a chaos loop SIGKILLs
// backends, SIGSTOPs them (and SIGCONTs them after a random while, some
// after the health check has given up on them) and the callers cancel
// contexts and set short deadlines. Half the calls pass their inputs and
// bind their outputs as tensors made by Session.NewTensor (shared with the
// backends) and free them at once, whatever the call's fate; at the end
// every session's arena must be empty again. Every answer is compared bit for bit
// with a reference computed before the chaos starts on a separate, healthy
// session; every call has a watchdog. After the chaos a calm phase (-calm)
// runs the same callers without it: every call must answer right, and the
// resident memory of the backend processes that live through its second
// half must not grow (a backend restarted in the chaos starts small again,
// which would hide a leak from a comparison with the warm-up). At the end it
// compares the host's file descriptors, backend processes, go-plugin
// temporary directories and resident memory with their values after the
// warm-up, prints a summary and exits 1 unless there were no wrong answers,
// no hung calls, no unexpected errors and no growth beyond 10%.
//
//	go run ./tools/soak -duration 2m -goroutines 8 -models 6 -seed 1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/internal/procfs"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/session"
)

func main() {
	cfg := config{}
	flag.DurationVar(&cfg.duration, "duration", 2*time.Minute, "how long the chaos lasts (after the warm-up)")
	flag.DurationVar(&cfg.warmup, "warmup", 15*time.Second, "runs without chaos before the baseline is taken")
	flag.IntVar(&cfg.goroutines, "goroutines", 8, "concurrent callers")
	flag.IntVar(&cfg.models, "models", 6, "seed models to open (drawn at random from -dir)")
	flag.IntVar(&cfg.shapes, "shapes", 4, "random input shapes (cases) per model")
	flag.StringVar(&cfg.dir, "dir", "models", "directory of model directories (model.onnx each)")
	flag.Uint64Var(&cfg.seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	flag.DurationVar(&cfg.hang, "hang", 30*time.Second, "a call taking longer than this is a hung call")
	flag.DurationVar(&cfg.calm, "calm", 10*time.Second, "calls without chaos after it, every one to answer right; the backends' RSS over its second half must not grow")
	flag.Parse()
	os.Exit(soak(cfg))
}

type config struct {
	duration, warmup, hang time.Duration
	calm                   time.Duration
	goroutines, models     int
	shapes                 int
	dir                    string
	seed                   uint64
}

// testCase is one model with one set of inputs and its reference outputs.
type testCase struct {
	model string
	s     *session.Session
	in    map[string]*tensor.Dense
	want  map[string]*tensor.Dense
	shape string
}

// counters are the soak's tallies.
type counters struct {
	ok, wrong, hung, interrupted, died, other atomic.Int64
	kills, stops, cancels, deadlines          atomic.Int64
	continued, stoppedGone                    atomic.Int64 // stops ended by SIGCONT / by the host's kill
	slowInterrupt                             atomic.Int64 // returned > 50 ms after the context ended
	mu                                        sync.Mutex
	latencies                                 []time.Duration
	interruptLag                              []time.Duration
	otherErrs, wrongs                         []string
}

func soak(cfg config) int {
	rng := rand.New(rand.NewPCG(cfg.seed, 0x50a4))
	// go-plugin's socket directories land in a TMPDIR of our own, to be
	// counted.
	tmp, err := os.MkdirTemp("", "attnrun-soak-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	os.Setenv("TMPDIR", tmp)

	paths, err := filepath.Glob(filepath.Join(cfg.dir, "*", "model.onnx"))
	if err != nil || len(paths) == 0 {
		return fail(fmt.Errorf("no models under %s (%v)", cfg.dir, err))
	}
	rng.Shuffle(len(paths), func(i, j int) { paths[i], paths[j] = paths[j], paths[i] })
	paths = paths[:min(cfg.models, len(paths))]
	sort.Strings(paths)
	quiet := func(string, ...any) {}
	var logMu sync.Mutex
	var lifecycle []string
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		lifecycle = append(lifecycle, fmt.Sprintf(format, args...))
	}

	// References: a healthy session per model, closed before the chaos.
	var cases []*testCase
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(filepath.Dir(p)))
	}
	// The seed first, so that a run that fails while it makes its cases
	// can be replayed (-seed).
	fmt.Printf("soak: seed %d, %d goroutines, %d models × %d shapes: %s\n", cfg.seed, cfg.goroutines, len(paths), cfg.shapes, strings.Join(names, ", "))
	for i, p := range paths {
		name := names[i]
		ref, err := session.Open(context.Background(), p, session.Options{Logf: quiet})
		if err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
		s, err := session.Open(context.Background(), p, session.Options{Logf: logf})
		if err != nil {
			return fail(fmt.Errorf("%s: %w", name, err))
		}
		defer s.Close()
		for k := 0; k < cfg.shapes; k++ {
			tc, refused, err := drawCase(rng, ref, s.Inputs())
			if err != nil {
				return fail(fmt.Errorf("%s: %w", name, err))
			}
			if refused > 0 {
				fmt.Printf("soak: %s: %d drawn shapes refused by the model before %s\n", name, refused, tc.shape)
			}
			tc.model, tc.s = name, s
			cases = append(cases, tc)
		}
		ref.Close()
	}

	var c counters
	var chaosOn atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	startCallers(cfg, cases, chaosOn.Load, 1, stop, &wg, &c)

	time.Sleep(cfg.warmup)
	settle(cases)
	base := measure(cases, tmp)
	warmCalls := c.ok.Load() + c.wrong.Load()
	fmt.Printf("soak: warm-up done (%d calls); chaos for %v\n", warmCalls, cfg.duration)

	chaosOn.Store(true)
	chaosDone := make(chan struct{})
	go chaos(cases, rng, stop, &c, chaosDone)
	time.Sleep(cfg.duration)
	chaosOn.Store(false)
	close(stop)
	wg.Wait()
	<-chaosDone
	settle(cases)
	chaosCalls := c.ok.Load() + c.wrong.Load()

	// The calm phase: the same callers, no chaos, every backend up.
	stop = make(chan struct{})
	startCallers(cfg, cases, func() bool { return false }, uint64(cfg.goroutines)+1, stop, &wg, &c)
	time.Sleep(cfg.calm / 2)
	mid := backendRSS()
	time.Sleep(cfg.calm - cfg.calm/2)
	last := backendRSS()
	close(stop)
	wg.Wait()
	settle(cases)
	end := measure(cases, tmp)

	calm := calmResult{calls: c.ok.Load() + c.wrong.Load() - chaosCalls}
	calm.mid, calm.end, calm.same = sameProcesses(mid, last)
	return report(cfg, &c, warmCalls, base, end, calm, lifecycle)
}

// startCallers starts cfg.goroutines callers of random cases (caller w
// draws from random stream first+w of the seed), with the chaos's context
// policy while chaosOn reports true, and a watchdog that counts calls
// running longer than cfg.hang, until stop closes (wg counts them).
func startCallers(cfg config, cases []*testCase, chaosOn func() bool, first uint64, stop chan struct{}, wg *sync.WaitGroup, c *counters) {
	inFlight := make([]atomic.Int64, cfg.goroutines) // start of each worker's call (unix ns), 0 when idle
	for w := 0; w < cfg.goroutines; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(cfg.seed, first+uint64(w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				tc := cases[r.IntN(len(cases))]
				call(tc, r, chaosOn(), &inFlight[w], c)
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		hung := make([]bool, cfg.goroutines)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for w := range inFlight {
				start := inFlight[w].Load()
				if start != 0 && time.Since(time.Unix(0, start)) > cfg.hang && !hung[w] {
					hung[w] = true
					c.hung.Add(1)
					fmt.Printf("soak: HUNG: worker %d in a call for more than %v\n", w, cfg.hang)
				} else if start == 0 {
					hung[w] = false
				}
			}
		}
	}()
}

// calmResult is what the calm phase after the chaos saw: its calls, and
// the RSS of the backend processes alive through its second half (the
// first lets backends restarted late in the chaos warm up), summed at its
// middle and at its end.
type calmResult struct {
	calls    int64
	mid, end int64
	same     int // backend processes alive at both samples
}

// problem says what is wrong with the calm phase ("" when nothing): no
// backend process lived through its second half, or theirs grew by more
// than 10%.
func (r calmResult) problem() string {
	switch {
	case r.same == 0:
		return "no backend process lived through the calm phase"
	case growth(r.mid, r.end) > 10:
		return fmt.Sprintf("backends RSS grew %.1f%% in the calm phase", growth(r.mid, r.end))
	}
	return ""
}

// backendRSS returns the RSS of every process below this one, by pid.
func backendRSS() map[int]int64 {
	out := map[int]int64{}
	for _, pid := range descendants(os.Getpid()) {
		out[pid] = procfs.RSS(pid)
	}
	return out
}

// sameProcesses sums the RSS of the processes in both a and b, in each,
// and counts them.
func sameProcesses(a, b map[int]int64) (sumA, sumB int64, n int) {
	for pid, ra := range a {
		if rb, ok := b[pid]; ok {
			sumA, sumB, n = sumA+ra, sumB+rb, n+1
		}
	}
	return sumA, sumB, n
}

// call runs one case, with a random context policy during the chaos, and
// checks the answer.
func call(tc *testCase, r *rand.Rand, chaos bool, inFlight *atomic.Int64, c *counters) {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	var ended atomic.Int64 // when the context ended (unix ns)
	if chaos {
		switch k := r.IntN(10); {
		case k == 0:
			c.cancels.Add(1)
			var cf context.CancelFunc
			ctx, cf = context.WithCancel(ctx)
			after := time.Duration(r.IntN(3000)) * time.Microsecond
			t := time.AfterFunc(after, func() { ended.Store(time.Now().UnixNano()); cf() })
			cancel = func() { t.Stop(); cf() }
		case k == 1:
			c.deadlines.Add(1)
			d := time.Duration(50+r.IntN(3000)) * time.Microsecond
			var cf context.CancelFunc
			ctx, cf = context.WithTimeout(ctx, d)
			ended.Store(time.Now().Add(d).UnixNano())
			cancel = cf
		}
	}
	defer cancel()
	start := time.Now()
	inFlight.Store(start.UnixNano())
	var out map[string]*tensor.Dense
	var err error
	if r.IntN(2) == 0 {
		out, err = tc.s.Run(ctx, tc.in)
	} else {
		out, err = runShared(ctx, tc)
	}
	took := time.Since(start)
	inFlight.Store(0)
	switch {
	case err == nil:
		if msg := compare(out, tc.want); msg != "" {
			c.wrong.Add(1)
			c.note(&c.wrongs, fmt.Sprintf("%s %s: %s", tc.model, tc.shape, msg))
			return
		}
		c.ok.Add(1)
		c.mu.Lock()
		c.latencies = append(c.latencies, took)
		c.mu.Unlock()
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		c.interrupted.Add(1)
		if e := ended.Load(); e != 0 {
			lag := time.Since(time.Unix(0, e))
			if lag > 50*time.Millisecond {
				c.slowInterrupt.Add(1)
			}
			c.mu.Lock()
			c.interruptLag = append(c.interruptLag, max(lag, 0))
			c.mu.Unlock()
		}
	case chaos && chaosError(err):
		c.died.Add(1)
	default:
		c.other.Add(1)
		c.note(&c.otherErrs, fmt.Sprintf("%s %s: %v", tc.model, tc.shape, err))
	}
}

// runShared runs tc with its inputs and outputs in tensors made by
// NewTensor, freed before it returns (an abandoned run's stay held by the
// arena until its backend lets go): the outputs it returns are copies.
func runShared(ctx context.Context, tc *testCase) (map[string]*tensor.Dense, error) {
	var made []*tensor.Dense
	defer func() {
		for _, d := range made {
			if err := tc.s.FreeTensor(d); err != nil {
				panic(fmt.Sprintf("soak: FreeTensor: %v", err))
			}
		}
	}()
	share := func(d *tensor.Dense) (*tensor.Dense, error) {
		c, err := tc.s.NewTensorFrom(d)
		if err != nil {
			return nil, err
		}
		made = append(made, c)
		return c, nil
	}
	in := make(map[string]*tensor.Dense, len(tc.in))
	for name, d := range tc.in {
		c, err := share(d)
		if err != nil {
			return nil, err
		}
		in[name] = c
	}
	into := make(map[string]*tensor.Dense, len(tc.want))
	for name, w := range tc.want {
		c, err := tc.s.NewTensor(w.Dtype(), w.Shape()...)
		if err != nil {
			return nil, err
		}
		made = append(made, c)
		into[name] = c
	}
	out, err := tc.s.RunWith(ctx, in, session.RunOptions{Into: into})
	if err != nil {
		return nil, err
	}
	copies := make(map[string]*tensor.Dense, len(out))
	for name, d := range out {
		copies[name] = d.Clone().(*tensor.Dense)
	}
	return copies, nil
}

// chaosError reports whether err is what a backend killed or stopped by
// the chaos loop gives: its death, its kill for not answering, or a
// failed restart while it was being killed.
func chaosError(err error) bool {
	var died *plugins.DiedError
	var stuck *plugins.StuckError
	if errors.As(err, &died) || errors.As(err, &stuck) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "restarting backend") || strings.Contains(msg, "did not let go of its tensor region") ||
		strings.Contains(msg, "tensor region is closed") || strings.Contains(msg, "rpc error: code = Unavailable")
}

func (c *counters) note(list *[]string, s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(*list) < 10 {
		*list = append(*list, s)
	}
}

// compare checks out against want bit for bit ("" when equal).
func compare(out, want map[string]*tensor.Dense) string {
	for name, w := range want {
		g, ok := out[name]
		if !ok || g == nil {
			return fmt.Sprintf("output %q missing", name)
		}
		if !g.Shape().Eq(w.Shape()) || g.Dtype() != w.Dtype() {
			return fmt.Sprintf("output %q: %v %v, want %v %v", name, g.Dtype(), g.Shape(), w.Dtype(), w.Shape())
		}
		gf, ok1 := g.Data().([]float32)
		wf, ok2 := w.Data().([]float32)
		if !ok1 || !ok2 {
			return fmt.Sprintf("output %q: not float32", name)
		}
		for i := range wf {
			if math.Float32bits(gf[i]) != math.Float32bits(wf[i]) {
				return fmt.Sprintf("output %q element %d: %v, want %v", name, i, gf[i], wf[i])
			}
		}
	}
	return ""
}

// maxDraws bounds the random shapes drawCase tries for one case.
const maxDraws = 200

// drawCase draws random inputs (randomInputs) until the model's healthy
// reference session runs them, and returns the case with its reference
// outputs and how many draws the model refused first. Dims are drawn
// independently, and some models tie them together (Swin's window
// attention: x's first dim a multiple of the mask's windows), so a draw
// may be no valid input at all; a model that refuses maxDraws in a row is
// an error, with the last refusal.
func drawCase(r *rand.Rand, ref *session.Session, vis []*ir.ValueInfo) (*testCase, int, error) {
	var err error
	for refused := 0; refused < maxDraws; refused++ {
		in, shape := randomInputs(r, vis)
		var want map[string]*tensor.Dense
		if want, err = ref.Run(context.Background(), in); err == nil {
			return &testCase{in: in, want: want, shape: shape}, refused, nil
		}
		err = fmt.Errorf("%s: reference run: %w", shape, err)
	}
	return nil, maxDraws, fmt.Errorf("%d drawn shapes refused, the last: %w", maxDraws, err)
}

// randomInputs draws a shape for every symbolic dim (batch 1–3, other dims
// 1–48) and fills the inputs: floats in [-1, 1), masks mostly true/1.
func randomInputs(r *rand.Rand, vis []*ir.ValueInfo) (map[string]*tensor.Dense, string) {
	dims := map[string]int{}
	in := map[string]*tensor.Dense{}
	var desc []string
	for _, vi := range vis {
		shape := make([]int, len(vi.Type.Shape))
		n := 1
		for i, d := range vi.Type.Shape {
			switch {
			case d.Param == "":
				shape[i] = int(d.Value)
			case dims[d.Param] != 0:
				shape[i] = dims[d.Param]
			case d.Param == "batch":
				dims[d.Param] = 1 + r.IntN(3)
				shape[i] = dims[d.Param]
			default:
				dims[d.Param] = 1 + r.IntN(48)
				shape[i] = dims[d.Param]
			}
			n *= shape[i]
		}
		var data any
		switch vi.Type.DType {
		case ir.Float:
			f := make([]float32, n)
			for i := range f {
				f[i] = 2*r.Float32() - 1
			}
			data = f
		case ir.Bool:
			b := make([]bool, n)
			for i := range b {
				b[i] = r.IntN(100) < 85
			}
			data = b
		case ir.Int64:
			v := make([]int64, n)
			for i := range v {
				if r.IntN(100) < 85 {
					v[i] = 1
				}
			}
			data = v
		default:
			panic(fmt.Sprintf("input %q: soak has no generator for %v", vi.Name, vi.Type.DType))
		}
		in[vi.Name] = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
		desc = append(desc, fmt.Sprintf("%s%v", vi.Name, shape))
	}
	return in, strings.Join(desc, " ")
}

// chaos SIGKILLs and SIGSTOPs backends until stop closes; stopped ones are
// continued after 10 ms to 6 s (past the health check's 4 s, the host has
// killed them by then).
func chaos(cases []*testCase, r *rand.Rand, stop chan struct{}, c *counters, done chan struct{}) {
	defer close(done)
	var sessions []*session.Session
	seen := map[*session.Session]bool{}
	for _, tc := range cases {
		if !seen[tc.s] {
			seen[tc.s] = true
			sessions = append(sessions, tc.s)
		}
	}
	var conts sync.WaitGroup
	defer conts.Wait()
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(100+r.IntN(400)) * time.Millisecond):
		}
		s := sessions[r.IntN(len(sessions))]
		bs := s.Backends()
		if len(bs) == 0 || !bs[0].Available || !ourChild(bs[0].Pid) || stopped(bs[0].Pid) {
			continue // restarting, or stopped already
		}
		pid := bs[0].Pid
		if r.IntN(2) == 0 {
			c.kills.Add(1)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			continue
		}
		c.stops.Add(1)
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		d := time.Duration(10+r.IntN(6000)) * time.Millisecond
		conts.Add(1)
		go func() {
			defer conts.Done()
			time.Sleep(d)
			if ourChild(pid) {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				c.continued.Add(1)
			} else {
				c.stoppedGone.Add(1)
			}
		}()
	}
}

// stopped reports whether pid is stopped.
func stopped(pid int) bool {
	st, _ := procfs.State(pid)
	return st == "T"
}

// ourChild reports whether pid is a live child of this process (so that a
// signal never reaches a process that reused the pid).
func ourChild(pid int) bool {
	st, ppid := procfs.State(pid)
	return st != "" && st != "Z" && ppid == os.Getpid()
}

// settle runs every session until each answers a healthy run, so that its
// backend is up before measuring.
func settle(cases []*testCase) {
	seen := map[*session.Session]bool{}
	for _, tc := range cases {
		if seen[tc.s] {
			continue
		}
		seen[tc.s] = true
		for try := 0; try < 50; try++ {
			if _, err := tc.s.Run(context.Background(), tc.in); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond) // drains and reaping finish
	// An abandoned run's shared tensors go back once its drain ends: at
	// most PingTimeout, and the kill of a backend that did not answer.
	deadline := time.Now().Add(plugins.PingTimeout + 5*time.Second)
	for _, tc := range cases {
		for tc.s.SharedTensorBytes() != 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// usage is a snapshot of the resources the soak watches.
type usage struct {
	fds, procs, tmpDirs  int
	hostRSS, backendsRSS int64
	sharedBytes          int64 // what the sessions' tensor arenas hold
}

func measure(cases []*testCase, tmp string) usage {
	runtime.GC()
	debug.FreeOSMemory()
	var u usage
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		u.fds = len(fds)
	}
	u.hostRSS = procfs.RSS(os.Getpid())
	for _, rss := range backendRSS() {
		u.procs++
		u.backendsRSS += rss
	}
	if m, err := filepath.Glob(filepath.Join(tmp, "*")); err == nil {
		u.tmpDirs = len(m)
	}
	seen := map[*session.Session]bool{}
	for _, tc := range cases {
		if !seen[tc.s] {
			seen[tc.s] = true
			u.sharedBytes += tc.s.SharedTensorBytes()
		}
	}
	return u
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, n := range procfs.Children(pid) {
		out = append(append(out, n), descendants(n)...)
	}
	return out
}

// growth is b's growth over a in per cent (+Inf from 0 to more).
func growth(a, b int64) float64 {
	if a == 0 {
		if b == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return 100 * float64(b-a) / float64(a)
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(math.Ceil(p/100*float64(len(s))))-1)]
}

func report(cfg config, c *counters, warmCalls int64, base, end usage, calm calmResult, lifecycle []string) int {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	mib := func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	restarts, killed := 0, 0
	for _, l := range lifecycle {
		if strings.Contains(l, " restarted (pid ") {
			restarts++
		}
		if strings.Contains(l, " was killed (") {
			killed++
		}
	}
	fmt.Printf("soak: %v of chaos after a %v warm-up, seed %d\n", cfg.duration, cfg.warmup, cfg.seed)
	fmt.Printf("calls:     %d answered (%d in the warm-up, %d during the chaos, %d in %v of calm after it), each compared bit for bit with its reference: %d wrong\n",
		c.ok.Load()+c.wrong.Load(), warmCalls, c.ok.Load()+c.wrong.Load()-warmCalls-calm.calls, calm.calls, cfg.calm, c.wrong.Load())
	fmt.Printf("           %d hung (no return within %v)\n", c.hung.Load(), cfg.hang)
	fmt.Printf("           %d interrupted by their context (%d cancellations, %d deadlines of 50 µs–3 ms set)\n", c.interrupted.Load(), c.cancels.Load(), c.deadlines.Load())
	fmt.Printf("           %d failed with their backend killed or stopped; %d other errors\n", c.died.Load(), c.other.Load())
	fmt.Printf("chaos:     %d SIGKILL, %d SIGSTOP for 10 ms–6 s (%d continued by SIGCONT, %d killed by the host first); %d host kills for not answering, %d restarts\n",
		c.kills.Load(), c.stops.Load(), c.continued.Load(), c.stoppedGone.Load(), killed, restarts)
	fmt.Printf("latency:   answered p50 %s p99 %s max %s; interrupted calls returned p50 %s p99 %s max %s after their context ended (%d over 50 ms)\n",
		ms(percentile(c.latencies, 50)), ms(percentile(c.latencies, 99)), ms(percentile(c.latencies, 100)),
		ms(percentile(c.interruptLag, 50)), ms(percentile(c.interruptLag, 99)), ms(percentile(c.interruptLag, 100)), c.slowInterrupt.Load())
	fmt.Printf("resources        after warm-up        at the end     growth\n")
	fmt.Printf("  host fds       %12d  %16d     %+.1f%%\n", base.fds, end.fds, growth(int64(base.fds), int64(end.fds)))
	fmt.Printf("  processes      %12d  %16d     %+.1f%%\n", base.procs, end.procs, growth(int64(base.procs), int64(end.procs)))
	fmt.Printf("  temp dirs      %12d  %16d\n", base.tmpDirs, end.tmpDirs)
	fmt.Printf("  host RSS       %12s  %16s     %+.1f%%\n", mib(base.hostRSS), mib(end.hostRSS), growth(base.hostRSS, end.hostRSS))
	fmt.Printf("  backends RSS   %12s  %16s     %+.1f%%\n", mib(base.backendsRSS), mib(end.backendsRSS), growth(base.backendsRSS, end.backendsRSS))
	fmt.Printf("  arenas held    %12d  %16d     (bytes of shared tensors, all freed: must be 0)\n", base.sharedBytes, end.sharedBytes)
	fmt.Printf("calm:      backends RSS %s → %s (%+.1f%%) over the calm phase's second half, the same %d processes\n",
		mib(calm.mid), mib(calm.end), growth(calm.mid, calm.end), calm.same)
	var problems []string
	if c.wrong.Load() > 0 {
		problems = append(problems, fmt.Sprintf("%d wrong answers: %s", c.wrong.Load(), strings.Join(c.wrongs, "; ")))
	}
	if c.hung.Load() > 0 {
		problems = append(problems, fmt.Sprintf("%d hung calls", c.hung.Load()))
	}
	if c.other.Load() > 0 {
		problems = append(problems, fmt.Sprintf("%d unexpected errors: %s", c.other.Load(), strings.Join(c.otherErrs, "; ")))
	}
	if c.ok.Load() == 0 {
		problems = append(problems, "no call succeeded")
	}
	if end.sharedBytes != 0 {
		problems = append(problems, fmt.Sprintf("the sessions' tensor arenas still hold %d bytes with every shared tensor freed", end.sharedBytes))
	}
	for _, g := range []struct {
		what string
		a, b int64
	}{{"host fds", int64(base.fds), int64(end.fds)}, {"processes", int64(base.procs), int64(end.procs)}, {"temp dirs", int64(base.tmpDirs), int64(end.tmpDirs)},
		{"host RSS", base.hostRSS, end.hostRSS}, {"backends RSS", base.backendsRSS, end.backendsRSS}} {
		if g.b > g.a && growth(g.a, g.b) > 10 {
			problems = append(problems, fmt.Sprintf("%s grew %.1f%%", g.what, growth(g.a, g.b)))
		}
	}
	if p := calm.problem(); p != "" {
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		fmt.Printf("result:    FAIL: %s\n", strings.Join(problems, "; "))
		return 1
	}
	fmt.Printf("result:    PASS\n")
	return 0
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "soak:", err)
	return 1
}
