// Package parallel runs the CPU kernels' parallel regions on a pool of
// worker goroutines that spin briefly before parking.
//
// A run of an attention model is a chain of parallel regions (GEMM blocks,
// attention query blocks, elementwise chunks) separated by short serial
// stretches. Starting goroutines for every region parks and wakes OS
// threads between regions; on a virtual machine each wake-up of an idle
// vCPU costs tens of microseconds or more, and the first run after a pause
// (a backend process waiting for its host) paid it at every region. Pool
// workers instead poll for their next task for SpinTime after finishing
// one, as ONNX Runtime's and OpenMP's thread pools do, and only then park
// (see DefaultSpinTime and SpinEnv).
//
// The pool is process-wide (like a BLAS library's threads). One Run owns
// it at a time; a Run that finds it busy (a nested region, or a concurrent
// run of another partition) starts plain goroutines instead.
package parallel

import (
	"os"

	"sync"
	"sync/atomic"
	"time"
)

// DefaultSpinTime is how long an idle worker, or a caller waiting for its
// workers, polls before parking, unless SpinEnv says otherwise. It spans
// the pause between two runs of a backend process (the host copying
// outputs and inputs), so that a steady stream of runs never lets the
// vCPUs go idle: on a shared virtual machine an idle vCPU may wait for a
// scheduler tick (milliseconds) to run again, which made one run in three
// 4 ms slower at S=512 with a 100 µs spin.
const DefaultSpinTime = 2 * time.Millisecond

// SpinEnv names the environment variable that sets the spin time (a Go
// duration such as 500us; 0 parks at once), read when the process starts.
const SpinEnv = "ATTNRUN_SPIN"

// spinTime is the spin time in effect.
var spinTime = spinTimeFrom(os.Getenv(SpinEnv))

// spinTimeFrom parses SpinEnv's value, falling back to DefaultSpinTime for
// an empty or invalid one.
func spinTimeFrom(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if v == "" || err != nil || d < 0 {
		return DefaultSpinTime
	}
	return d
}

// SpinTime reports the spin time in effect.
func SpinTime() time.Duration { return spinTime }

// Run calls f(w) for every w in [0, n) concurrently and returns when all
// calls have returned; the calling goroutine runs f(0). A panic in any call
// is re-raised in the caller after all calls have ended.
func Run(n int, f func(w int)) {
	switch {
	case n <= 0:
		return
	case n == 1:
		f(0)
		return
	}
	if !pool.mu.TryLock() {
		goroutines(n, f)
		return
	}
	defer pool.mu.Unlock()
	for len(pool.workers) < n-1 {
		w := &worker{wake: make(chan struct{}, 1)}
		pool.workers = append(pool.workers, w)
		go w.loop()
	}
	g := &group{done: make(chan struct{}, 1)}
	g.pending.Store(int32(n - 1))
	for i := 1; i < n; i++ {
		pool.workers[i-1].give(&task{f: f, w: i, g: g})
	}
	g.call(f, 0)
	g.wait()
	if p := g.panicked.Load(); p != nil {
		panic(p.v)
	}
}

// goroutines is Run on fresh goroutines, for when the pool is busy.
func goroutines(n int, f func(w int)) {
	g := &group{}
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.call(f, i)
		}()
	}
	g.call(f, 0)
	wg.Wait()
	if p := g.panicked.Load(); p != nil {
		panic(p.v)
	}
}

// pool is the process's workers; mu is held by the Run using them.
var pool struct {
	mu      sync.Mutex
	workers []*worker
}

// group is one Run's bookkeeping.
type group struct {
	pending  atomic.Int32 // worker calls not yet returned
	parked   atomic.Bool  // the caller stopped spinning and waits on done
	done     chan struct{}
	panicked atomic.Pointer[panicValue]
}

type panicValue struct{ v any }

// call runs f(w), recording a panic instead of crashing the process.
func (g *group) call(f func(int), w int) {
	defer func() {
		if r := recover(); r != nil {
			g.panicked.CompareAndSwap(nil, &panicValue{r})
		}
	}()
	f(w)
}

// finish records that one worker call returned.
func (g *group) finish() {
	if g.pending.Add(-1) == 0 && g.parked.Load() {
		select {
		case g.done <- struct{}{}:
		default:
		}
	}
}

// wait returns when every worker call has returned: spinning first, then
// parked on done.
func (g *group) wait() {
	if spinUntil(func() bool { return g.pending.Load() == 0 }) {
		return
	}
	g.parked.Store(true)
	if g.pending.Load() == 0 {
		return
	}
	<-g.done
}

// task is one call of a Run's function.
type task struct {
	f func(int)
	w int
	g *group
}

// worker is a pool goroutine.
type worker struct {
	next   atomic.Pointer[task]
	parked atomic.Bool
	wake   chan struct{}
}

// give hands t to the worker, waking it if it is parked.
func (w *worker) give(t *task) {
	w.next.Store(t)
	if w.parked.CompareAndSwap(true, false) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *worker) loop() {
	for {
		var t *task
		spinUntil(func() bool { t = w.next.Swap(nil); return t != nil })
		if t == nil {
			w.parked.Store(true)
			if t = w.next.Swap(nil); t == nil {
				<-w.wake
				continue
			}
			w.parked.Store(false)
		}
		t.g.call(t.f, t.w)
		t.g.finish()
	}
}

// Spinning only pays on CPUs nobody else wants. When a spinning thread
// finds it lost its CPU for longer than preemptGap between two polls,
// other processes are competing for the CPUs; spinning would then only
// burn this process's share and hand time slices to them (with two CPU
// hogs running, the small test model's p50 went from 0.45 to 5-12 ms), so
// it stops for contendedBackoff and threads park at once. The gap is
// longer than the hiccups of a quiet VM (about 1 ms, seen now and then),
// which would otherwise turn spinning off for no reason.
const (
	preemptGap       = 2 * time.Millisecond
	contendedBackoff = 100 * time.Millisecond
)

// noSpinUntil is the time (UnixNano) until which spinning is off.
var noSpinUntil atomic.Int64

// spinUntil polls cond for up to the spin time and reports whether it
// held. It yields the CPU every few polls (yield_linux.go): a spinning
// worker must not keep a thread that has real work (the host process, the
// backend's gRPC goroutines) from the vCPU it spins on. Without that, the
// tiny model's p90 was 3 ms: a woken thread queued behind the spinner for
// a scheduler time slice.
func spinUntil(cond func() bool) bool {
	if spinTime == 0 || time.Now().UnixNano() < noSpinUntil.Load() {
		return cond()
	}
	start := time.Now()
	last := start
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i&63 == 63 {
			now := time.Now()
			if now.Sub(last) > preemptGap {
				noSpinUntil.Store(now.Add(contendedBackoff).UnixNano())
				return cond()
			}
			if now.Sub(start) > spinTime {
				return false
			}
			last = now
			yield()
		}
	}
}
