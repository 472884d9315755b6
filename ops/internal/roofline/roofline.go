// Package roofline measures this machine's multiply-add peak (the FP
// pipes' throughput on registers, per core and on several cores in
// lock-step) and reports benchmarks' rates against it, for the roofline
// benchmarks of packages blas and ops (go test -bench Roofline). Rounds
// are timed one by one and the best is reported besides the mean: on a
// shared machine a round without interference comes now and then, and the
// best is what the hardware does.
package roofline

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Lockstep runs call(t) on threads goroutines, each locked to an OS
// thread, for rounds rounds that start together, and returns the best and
// the mean rate in GFLOP/s of flops per call per thread.
func Lockstep(rounds, threads int, flops float64, call func(t int)) (best, mean float64) {
	if threads == 1 {
		var total time.Duration
		fastest := time.Duration(1 << 62)
		for i := 0; i < rounds; i++ {
			t0 := time.Now()
			call(0)
			d := time.Since(t0)
			total += d
			fastest = min(fastest, d)
		}
		return flops / fastest.Seconds() / 1e9, flops * float64(rounds) / total.Seconds() / 1e9
	}
	var arrived atomic.Int64 // barrier: threads·(2·round + phase) arrivals so far
	barrier := func(target int64) {
		arrived.Add(1)
		for arrived.Load() < target {
			runtime.Gosched()
		}
	}
	durs := make([]time.Duration, rounds)
	var wg sync.WaitGroup
	for t := 0; t < threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var t0 time.Time
			for r := 0; r < rounds; r++ {
				barrier(int64(threads * (2*r + 1)))
				if t == 0 {
					t0 = time.Now()
				}
				call(t)
				barrier(int64(threads * (2*r + 2)))
				if t == 0 {
					durs[r] = time.Since(t0)
				}
			}
		}(t)
	}
	wg.Wait()
	var total time.Duration
	fastest := time.Duration(1 << 62)
	for _, d := range durs {
		total += d
		fastest = min(fastest, d)
	}
	all := flops * float64(threads)
	return all / fastest.Seconds() / 1e9, all * float64(rounds) / total.Seconds() / 1e9
}

// PeakLoop returns the register-only multiply-add loop of the widest
// vectors this CPU has for the precision (bf16: DotBF16Peak512), sized to
// about 0.1 ms, and its flops; ok is false when there is none.
func PeakLoop(bf16 bool) (call func(int), flops float64, ok bool) {
	const units = 35000
	loop, perUnit, ok := peakUnits(bf16)
	if !ok {
		return nil, 0, false
	}
	return func(int) { loop(units) }, perUnit * units, true
}

// peakUnits returns the peak loop of the precision as a call that runs n
// units of it, and the flops of one unit (the loops unroll 24 independent
// multiply-adds; a bf16 unit is half an fp32 unit's iterations, each twice
// the flops).
func peakUnits(bf16 bool) (loop func(n int), flopsPerUnit float64, ok bool) {
	switch {
	case bf16 && kernel.BF16:
		return func(n int) { kernel.DotBF16Peak512(n / 2) }, 768, true
	case bf16:
		return nil, 0, false
	case kernel.AVX512:
		return kernel.FMAPeak512, 768, true
	case kernel.Available:
		return kernel.FMAPeak256, 384, true
	}
	return nil, 0, false
}

// Floor runs reps jobs of the peak loop worth flops multiply-add flops in
// all on threads goroutines locked to OS threads and started together, and
// returns the jobs' wall times sorted: the time the FP pipes alone need for
// a workload with that many matrix-product flops, nothing else in it. The
// threads claim the loop in chunks of about 30 µs, so a core that another
// process holds up leaves its share to the others, as the best scheduler
// could. The median is what the machine gives typically, with the
// interference a shared machine has at the time; no real kernel's median
// can be below it. ok is false when the CPU has no peak loop for the
// precision.
func Floor(bf16 bool, threads int, flops float64, reps int) (times []time.Duration, ok bool) {
	loop, perUnit, ok := peakUnits(bf16)
	if !ok {
		return nil, false
	}
	const chunk = 10000 // units: 7.7 MFLOP, about 30 µs on one Zen 5 core
	chunks := int64(flops/perUnit/chunk + 0.5)
	times = make([]time.Duration, reps)
	for r := range times {
		var next atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for next.Add(1) <= chunks {
					loop(chunk)
				}
			}()
		}
		wg.Wait()
		times[r] = time.Since(t0)
	}
	slices.Sort(times)
	return times, true
}

// peaks keeps the best peak measured so far by precision and core count
// (a cache of measurements: the hardware's peak does not change, a
// measurement disturbed by other processes only reads low).
var peaks struct {
	sync.Mutex
	gflops map[[2]int]float64
}

// Peak measures the peak loop on threads cores over 500 rounds of about
// 0.1 ms and returns the best GFLOP/s seen in any measurement of this
// process so far (0 where the CPU has no such loop): each call can only
// raise it, so a round disturbed by other work on a shared machine does not
// stick.
func Peak(bf16 bool, threads int) float64 {
	peaks.Lock()
	defer peaks.Unlock()
	key := [2]int{threads, 0}
	if bf16 {
		key[1] = 1
	}
	call, flops, ok := PeakLoop(bf16)
	if !ok {
		return 0
	}
	g, _ := Lockstep(500, threads, flops, func(int) { call(0) })
	if peaks.gflops == nil {
		peaks.gflops = map[[2]int]float64{}
	}
	peaks.gflops[key] = max(peaks.gflops[key], g)
	return peaks.gflops[key]
}

// Report runs b.N rounds of call on lockThreads goroutines in
// lock-step and reports best and mean GFLOP/s, and with pctCores > 0 the
// best as a percentage of the measured peak of that many cores.
func Report(b *testing.B, lockThreads, pctCores int, flops float64, call func(t int), bf16 bool) {
	b.Helper()
	call(0) // warm caches and packing buffers outside the timed rounds
	b.ResetTimer()
	best, mean := Lockstep(b.N, lockThreads, flops, call)
	b.StopTimer()
	var peak float64
	if pctCores > 0 {
		peak = Peak(bf16, pctCores)
	}
	b.ReportMetric(best, "GFLOP/s")
	b.ReportMetric(mean, "mean-GFLOP/s")
	if peak > 0 {
		b.ReportMetric(100*best/peak, "%peak")
	}
}
