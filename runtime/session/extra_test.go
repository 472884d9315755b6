package session

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"gorgonia.org/tensor"
)

// TestAttentionWeightsOutputs: with AttentionWeights, a run of seed 000's
// causal model also returns the core's weights (rows summing to 1, masked
// keys 0) and its computed mask; the declared outputs are unchanged. A
// profiled run records the partition's steps.
func TestAttentionWeightsOutputs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join("..", "..", "models", "s000_causal", "model.onnx")
	s, err := Open(ctx, path, Options{AttentionWeights: true, Logf: t.Logf})
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
	const b, sq = 1, 5
	x := tensor.New(tensor.WithShape(b, sq, 32), tensor.WithBacking(make([]float32, b*sq*32)))
	mask := tensor.New(tensor.WithShape(b, sq), tensor.WithBacking([]bool{false, false, false, true, true}))
	prof := &Profile{}
	out, err := s.RunWith(ctx, map[string]*tensor.Dense{"x": x, "mask": mask}, RunOptions{Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	w, err := ir.FromDense(out[cores[0].Weights])
	if err != nil {
		t.Fatal(err)
	}
	if got := ir.ShapeString(w.Shape); got != "1x4x5x5" {
		t.Fatalf("weights of shape [%s]", got)
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
	if out[cores[0].Mask] == nil {
		t.Errorf("no computed mask %q among %d outputs", cores[0].Mask, len(out))
	}
	if len(prof.Runs) != 1 || len(prof.Runs[0].Partitions) != 1 || len(prof.Runs[0].Partitions[0].Steps) == 0 {
		t.Fatalf("profile %+v", prof)
	}
	if p := prof.Runs[0].Partitions[0]; p.Backend != CPU || p.Pid != s.Backends()[0].Pid || p.Run.Duration <= 0 || p.Host.Duration < p.Call.Duration {
		t.Errorf("partition profile %+v", p)
	}

	_, err = Open(ctx, path, Options{ExtraOutputs: []string{"no such value"}, Logf: t.Logf})
	if err == nil || !strings.Contains(err.Error(), `extra output "no such value": the graph has no value of that name`) {
		t.Errorf("unknown extra output: %v", err)
	}
}
