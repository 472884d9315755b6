package viz

import (
	"strings"
	"testing"
	"time"

	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/session"
)

// TestProfileSharedTensors: the profile's table says which tensors went by
// reference (shared tensors) and in how many of the runs, and says nothing
// of them when none did.
func TestProfileSharedTensors(t *testing.T) {
	run := func(in, out []string) session.RunProfile {
		return session.RunProfile{Span: plugins.Span{Duration: time.Millisecond}, Partitions: []session.PartitionProfile{
			{Backend: "cpu", RunProfile: plugins.RunProfile{InputsShared: in, OutputsShared: out}},
		}}
	}
	cases := []struct {
		name string
		runs []session.RunProfile
		want string // the line, "" for none
	}{
		{name: "none", runs: []session.RunProfile{run(nil, nil), run(nil, nil)}},
		{name: "every run", runs: []session.RunProfile{run([]string{"x", "past"}, []string{"y"}), run([]string{"past", "x"}, []string{"y"})},
			want: "by reference (shared tensors, no copy across the process boundary): inputs past, x; outputs y"},
		{name: "some runs", runs: []session.RunProfile{run([]string{"x"}, nil), run(nil, nil), run([]string{"x"}, nil)},
			want: "by reference (shared tensors, no copy across the process boundary): inputs x (2 of 3 runs); outputs none"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sum := Summarize(c.runs)
			var b strings.Builder
			sum.WriteTable(&b)
			var got string
			for _, line := range strings.Split(b.String(), "\n") {
				if strings.HasPrefix(line, "by reference") {
					got = line
				}
			}
			if got != c.want {
				t.Errorf("line %q, want %q", got, c.want)
			}
		})
	}
}
