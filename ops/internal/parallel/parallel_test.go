package parallel

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunCallsEachIndexOnce: every w in [0, n) is called exactly once, for
// the pool and for the goroutine fallback, with pauses long enough for the
// workers to park between runs.
func TestRunCallsEachIndexOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		pause time.Duration
	}{
		{"zero", 0, 0}, {"one", 1, 0}, {"two", 2, 0}, {"eight", 8, 0},
		{"two after park", 2, 3 * SpinTime()}, {"five after park", 5, 3 * SpinTime()},
	} {
		t.Run(c.name, func(t *testing.T) {
			for rep := 0; rep < 50; rep++ {
				calls := make([]atomic.Int32, c.n)
				Run(c.n, func(w int) { calls[w].Add(1) })
				for w := range calls {
					if got := calls[w].Load(); got != 1 {
						t.Fatalf("rep %d: f(%d) called %d times", rep, w, got)
					}
				}
				if rep%10 == 9 {
					time.Sleep(c.pause)
				}
			}
		})
	}
}

// TestRunNestedAndConcurrent: a region started inside a region, and regions
// started by several goroutines at once, each complete with every index.
func TestRunNestedAndConcurrent(t *testing.T) {
	var total atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := 0; rep < 20; rep++ {
				Run(3, func(int) {
					Run(2, func(int) { total.Add(1) })
				})
			}
		}()
	}
	wg.Wait()
	if got, want := total.Load(), int64(4*20*3*2); got != want {
		t.Fatalf("%d inner calls, want %d", got, want)
	}
}

// TestRunPanics: a panic in a worker's call reaches the caller after every
// call has ended, and the pool stays usable.
func TestRunPanics(t *testing.T) {
	for _, w := range []int{0, 1, 3} {
		var ended atomic.Int32
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("panic in f(%d): recovered %v, want boom", w, r)
				}
				if ended.Load() != 3 {
					t.Errorf("panic in f(%d): %d other calls ended before the re-panic, want 3", w, ended.Load())
				}
			}()
			Run(4, func(i int) {
				if i == w {
					panic("boom")
				}
				time.Sleep(time.Millisecond)
				ended.Add(1)
			})
		}()
	}
	var n atomic.Int32
	Run(4, func(int) { n.Add(1) })
	if n.Load() != 4 {
		t.Fatalf("after panics: %d calls, want 4", n.Load())
	}
}

// TestSpinTimeFrom: the environment's spin time, and the default for an
// empty, invalid or negative value.
func TestSpinTimeFrom(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{"", DefaultSpinTime}, {"500us", 500 * time.Microsecond}, {"0", 0},
		{"fast", DefaultSpinTime}, {"-1ms", DefaultSpinTime},
	} {
		if got := spinTimeFrom(c.v); got != c.want {
			t.Errorf("%s=%q: %v, want %v", SpinEnv, c.v, got, c.want)
		}
	}
}

// BenchmarkForkJoin times an empty two-way region through the pool and
// through fresh goroutines: the per-region overhead the pool saves.
func BenchmarkForkJoin(b *testing.B) {
	var sink atomic.Int64
	f := func(w int) { sink.Add(int64(w)) }
	b.Run("pool", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			Run(2, f)
		}
	})
	b.Run("goroutines", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			goroutines(2, f)
		}
	})
}

// TestSpinStopsWhenContended: a spinning thread that loses its CPU for
// longer than preemptGap (simulated by a poll that sleeps) turns spinning
// off for a while, during which spinUntil polls once and returns.
func TestSpinStopsWhenContended(t *testing.T) {
	if SpinTime() == 0 {
		t.Skip(SpinEnv + "=0: no spinning to stop")
	}
	defer noSpinUntil.Store(0)
	noSpinUntil.Store(0)
	polls := 0
	spinUntil(func() bool {
		polls++
		if polls == 100 {
			time.Sleep(2 * preemptGap) // as if another process had the CPU
		}
		return false
	})
	if noSpinUntil.Load() <= time.Now().UnixNano() {
		t.Fatal("a poll gap of 2×preemptGap did not turn spinning off")
	}
	polls = 0
	if spinUntil(func() bool { polls++; return false }) || polls != 1 {
		t.Errorf("while off: %d polls, want 1", polls)
	}
	noSpinUntil.Store(0)
	polls = 0
	spinUntil(func() bool { polls++; return false })
	if polls < 64 {
		t.Errorf("back on: %d polls, want a spin", polls)
	}
}
