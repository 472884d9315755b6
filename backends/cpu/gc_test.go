package cpu

import "testing"

func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name        string
		live, model int64
		want        int
	}{
		{"no heap yet", 0, 0, 100},
		{"small model: the default", 20 * mib, 5 * mib, 100},
		{"model the budget counts but the heap does not hold (mapped)", 30 * mib, 300 * mib, 100},
		{"weights dominate: the floor", 640 * mib, 600 * mib, 10},
		{"half the heap is not the model's", 400 * mib, 200 * mib, 50},
		{"floor as a share of the heap", 256 * mib, 250 * mib, 25},
		{"never under 10", 4096 * mib, 4090 * mib, 10},
	} {
		if got := gcPercent(c.live, c.model); got != c.want {
			t.Errorf("%s: gcPercent(%d MiB, %d MiB) = %d, want %d", c.name, c.live/mib, c.model/mib, got, c.want)
		}
	}
}
