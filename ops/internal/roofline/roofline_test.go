package roofline

import (
	"slices"
	"testing"
)

func TestFloor(t *testing.T) {
	for _, c := range []struct {
		name    string
		bf16    bool
		threads int
	}{
		{"fma/1core", false, 1},
		{"fma/2core", false, 2},
		{"bf16/2core", true, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			const reps = 3
			times, ok := Floor(c.bf16, c.threads, 1e8, reps)
			if !ok {
				if _, _, has := PeakLoop(c.bf16); has {
					t.Fatal("Floor has no loop where PeakLoop has one")
				}
				t.Skip("no peak loop for this precision on this CPU")
			}
			if len(times) != reps {
				t.Fatalf("got %d times, want %d", len(times), reps)
			}
			if !slices.IsSorted(times) || times[0] <= 0 {
				t.Errorf("times %v: want positive and sorted", times)
			}
		})
	}
}
