package gpu

import (
	"context"
	"testing"

	"github.com/attnrun/attnrun/plugins"
)

// TestProfiledRunOnEmulator: a profiled run times each launched call, in
// order, from its launch to its end, as one step.
func TestProfiledRunOnEmulator(t *testing.T) {
	var runners []*emuRunner
	r, err := emuOpener(false, &runners)(context.Background(), "../../models/s000_multi_head/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	er := runners[0]
	p := er.s.parts[er.id]
	in := zeroInputs(t, p.prog, map[string]int{"batch": 2, "seq": 5})
	prof := &plugins.RunProfile{}
	if _, err := r.Run(plugins.WithProfile(context.Background(), prof), in); err != nil {
		t.Fatal(err)
	}
	dp, err := p.planFor(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Steps) == 0 || len(prof.Steps) != len(dp.calls) {
		t.Fatalf("%d steps timed for %d calls", len(prof.Steps), len(dp.calls))
	}
	sawAttention := false
	for i, st := range prof.Steps {
		if st.Name != dp.calls[i].node.Label() || st.Duration < 0 {
			t.Errorf("step %d: %q %v, call %q", i, st.Name, st.Duration, dp.calls[i].node.Label())
		}
		if i > 0 && st.Start.Before(prof.Steps[i-1].End()) {
			t.Errorf("step %d starts before step %d ends", i, i-1)
		}
		sawAttention = sawAttention || st.OpType == "FusedAttention"
	}
	if !sawAttention {
		t.Errorf("no FusedAttention among %+v", prof.Steps)
	}
}
