package plugins

import (
	"runtime"
	"testing"
)

// TestHoldingP: at most GOMAXPROCS − 1 host waits hold their P at a time,
// none with GOMAXPROCS 1, and a released one can be taken again.
func TestHoldingP(t *testing.T) {
	for _, c := range []struct {
		procs, want int
	}{{1, 0}, {2, 1}, {4, 3}} {
		prev := runtime.GOMAXPROCS(c.procs)
		got := 0
		for i := 0; i < c.procs+2; i++ {
			if holdingP() {
				got++
			}
		}
		if got != c.want {
			t.Errorf("GOMAXPROCS %d: %d waits may hold their P, want %d", c.procs, got, c.want)
		}
		if c.want > 0 {
			pHolders.Add(-1) // one wait ends: the next may hold its P
			if !holdingP() {
				t.Errorf("GOMAXPROCS %d: a released P cannot be held again", c.procs)
			}
		}
		pHolders.Add(-int32(got))
		if n := pHolders.Load(); n != 0 {
			t.Fatalf("GOMAXPROCS %d: %d holders left", c.procs, n)
		}
		runtime.GOMAXPROCS(prev)
	}
}
