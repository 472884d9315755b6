package graph

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestRunProfile: a profiled run times every executed step, in plan order,
// and the steps cover the run.
func TestRunProfile(t *testing.T) {
	_, p := compileModel(t, "s001_encoder_2x4")
	in := benchInputs(p, 32)
	steps, err := p.Steps(in)
	if err != nil {
		t.Fatal(err)
	}
	var prof []StepTime
	start := time.Now()
	if _, err := p.Run(context.Background(), in, RunOptions{Profile: &prof}); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	if !profiling {
		if len(prof) != 0 {
			t.Fatalf("built with -tags noprofile, yet %d steps timed", len(prof))
		}
		t.Skip("built with -tags noprofile: steps are not timed")
	}
	if len(prof) != len(steps) {
		t.Fatalf("%d steps timed, the plan has %d", len(prof), len(steps))
	}
	var sum time.Duration
	for i, st := range prof {
		if st.Node != steps[i] {
			t.Errorf("step %d timed %s, the plan runs %s", i, st.Node.Label(), steps[i].Label())
		}
		if i > 0 && st.Start.Before(prof[i-1].Start.Add(prof[i-1].Duration)) {
			t.Errorf("step %d starts before step %d ends", i, i-1)
		}
		sum += st.Duration
	}
	if sum <= 0 || sum > wall {
		t.Errorf("steps add up to %v of a %v run", sum, wall)
	}
}

// BenchmarkProfileOverhead runs the 2-layer encoder with profiling off and
// on. Comparing "off" built normally with "off" built with -tags noprofile
// (which compiles the timing out) measures what the instrumentation costs
// when nobody profiles:
//
//	go test -run - -bench ProfileOverhead/off -count 10 ./runtime/graph > on.txt
//	go test -run - -bench ProfileOverhead/off -count 10 -tags noprofile ./runtime/graph > out.txt
//	benchstat out.txt on.txt
//
// cpu-ns/op (the process's CPU time per run) is steadier than sec/op when
// other work shares the machine.
func BenchmarkProfileOverhead(b *testing.B) {
	_, p := compileModel(b, "s001_encoder_2x4")
	for _, seq := range []int{8, 128} {
		in := benchInputs(p, seq)
		ctx := context.Background()
		for _, on := range []bool{false, true} {
			name := fmt.Sprintf("off/seq=%d", seq)
			if on {
				name = fmt.Sprintf("on/seq=%d", seq)
			}
			b.Run(name, func(b *testing.B) {
				var prof []StepTime
				ro := RunOptions{ReuseOutputs: true}
				if on {
					ro.Profile = &prof
				}
				cpu0 := processCPU()
				for b.Loop() {
					prof = prof[:0]
					if _, err := p.Run(ctx, in, ro); err != nil {
						b.Fatal(err)
					}
				}
				// CPU time varies less than wall time on a shared machine.
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
