package main

import "testing"

func TestSameProcesses(t *testing.T) {
	mid := map[int]int64{10: 100, 11: 200, 12: 300}
	end := map[int]int64{11: 250, 12: 310, 13: 999} // 10 ended, 13 started: neither counts
	a, b, n := sameProcesses(mid, end)
	if a != 500 || b != 560 || n != 2 {
		t.Errorf("sameProcesses = %d, %d, %d; want 500, 560, 2", a, b, n)
	}
}

func TestCalmProblem(t *testing.T) {
	for _, tc := range []struct {
		r    calmResult
		want string
	}{
		{calmResult{mid: 100 << 20, end: 105 << 20, same: 6}, ""},
		{calmResult{mid: 100 << 20, end: 90 << 20, same: 6}, ""},
		{calmResult{mid: 100 << 20, end: 111 << 20, same: 6}, "backends RSS grew 11.0% in the calm phase"},
		{calmResult{}, "no backend process lived through the calm phase"},
	} {
		if got := tc.r.problem(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.r, got, tc.want)
		}
	}
}
