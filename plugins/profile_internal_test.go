package plugins

import (
	"testing"
	"time"
)

// TestWallNanos checks how spans' starts cross the process boundary: times
// read from this process's clock are placed by their monotonic distance
// from the anchor (so that a step of the wall clock cannot reorder a
// run's spans), times without a monotonic reading (decoded from the wire)
// and the zero time keep their wall clock, and a span survives the round
// trip to the nanosecond.
func TestWallNanos(t *testing.T) {
	later := clockAnchor.Add(5*time.Millisecond + 7)
	if got := wallNanos(later) - wallNanos(clockAnchor); got != int64(5*time.Millisecond+7) {
		t.Errorf("5 ms 7 ns after the anchor: %d ns after it on the wire", got)
	}
	now := time.Now()
	if d := wallNanos(now) - now.UnixNano(); d < -int64(time.Millisecond) || d > int64(time.Millisecond) {
		t.Errorf("now: %d ns from its wall clock (no clock step expected during the test)", d)
	}
	wall := time.Unix(0, 1_700_000_000_123_456_789) // no monotonic reading
	if got := wallNanos(wall); got != wall.UnixNano() {
		t.Errorf("a wall-only time moved to %d, want %d", got, wall.UnixNano())
	}
	if got := wallNanos(time.Time{}); got != (time.Time{}).UnixNano() {
		t.Errorf("the zero time moved to %d", got)
	}
	sp := Span{Start: later, Duration: 3 * time.Microsecond}
	back := spanFromWire(spanToWire(sp))
	if back.Start.UnixNano() != wallNanos(later) || back.Duration != sp.Duration {
		t.Errorf("round trip: %v, want start %d and %v", back, wallNanos(later), sp.Duration)
	}
}
