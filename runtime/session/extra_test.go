package session

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/graph"
	"gorgonia.org/tensor"
)

// TestAttentionWeightsOutputs: with AttentionWeights, a run of seed 000's
// causal model also returns the core's weights (rows summing to 1, masked
// keys 0) and its computed mask; the declared outputs are unchanged. A
// profiled run records the partition's steps. All of it in a backend
// process, in process, and on 2 instances (of either) with 2 goroutines
// running at once, each with its own profile.
func TestAttentionWeightsOutputs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join("..", "..", "models", "s000_causal", "model.onnx")
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"process", Options{}},
		{"in process", Options{InProcess: true}},
		{"2 instances", Options{Instances: 2}},
		{"2 instances in process", Options{Instances: 2, InProcess: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts
			opts.AttentionWeights, opts.Logf = true, t.Logf
			s, err := Open(ctx, path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cores := s.AttentionCores()
			if len(cores) != 1 || cores[0].Mask == "" {
				t.Fatalf("cores %+v", cores)
			}
			if len(s.Outputs()) != 1 || s.Outputs()[0].Name != "y" {
				t.Errorf("declared outputs changed: %v", s.Outputs())
			}
			pids := map[int]bool{}
			for _, b := range s.Backends() {
				pids[b.Pid] = true
			}
			var wg sync.WaitGroup
			for g := 0; g < s.Instances(); g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := 0; r < 3; r++ {
						checkWeightsRun(t, s, cores[0], pids)
					}
				}()
			}
			wg.Wait()
		})
	}

	_, err := Open(ctx, path, Options{ExtraOutputs: []string{"no such value"}, Logf: t.Logf})
	if err == nil || !strings.Contains(err.Error(), `extra output "no such value": the graph has no value of that name`) {
		t.Errorf("unknown extra output: %v", err)
	}
}

// checkWeightsRun makes one profiled run of seed 000's causal model (the
// last two keys masked) and checks its attention weights, its computed
// mask and its profile (one partition with steps, run by a backend of
// pids).
func checkWeightsRun(t *testing.T, s *Session, core graph.AttentionCore, pids map[int]bool) {
	const b, sq = 1, 5
	x := tensor.New(tensor.WithShape(b, sq, 32), tensor.WithBacking(make([]float32, b*sq*32)))
	mask := tensor.New(tensor.WithShape(b, sq), tensor.WithBacking([]bool{false, false, false, true, true}))
	prof := &Profile{}
	out, err := s.RunWith(context.Background(), map[string]*tensor.Dense{"x": x, "mask": mask}, RunOptions{Profile: prof})
	if err != nil {
		t.Error(err)
		return
	}
	w, err := ir.FromDense(out[core.Weights])
	if err != nil {
		t.Error(err)
		return
	}
	if got := ir.ShapeString(w.Shape); got != "1x4x5x5" {
		t.Errorf("weights of shape [%s]", got)
		return
	}
	ws := w.Float32s()
	for row := 0; row < len(ws)/sq; row++ {
		q := row % sq
		sum := float32(0)
		for k := 0; k < sq; k++ {
			v := ws[row*sq+k]
			if (k > q || k >= 3) && v != 0 {
				t.Errorf("row %d: masked key %d has weight %v", row, k, v)
			}
			sum += v
		}
		if sum < 0.9999 || sum > 1.0001 {
			t.Errorf("row %d sums to %v", row, sum)
		}
	}
	if out[core.Mask] == nil {
		t.Errorf("no computed mask %q among %d outputs", core.Mask, len(out))
	}
	if len(prof.Runs) != 1 || len(prof.Runs[0].Partitions) != 1 || len(prof.Runs[0].Partitions[0].Steps) == 0 {
		t.Errorf("profile %+v", prof)
		return
	}
	if p := prof.Runs[0].Partitions[0]; p.Backend != CPU || !pids[p.Pid] || p.Run.Duration <= 0 || p.Host.Duration < p.Call.Duration {
		t.Errorf("partition profile %+v (backend pids %v)", p, pids)
	}
}
