package graph

import (
	"context"
	"testing"

	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/conform"
)

// TestModelsInProcessBF16 runs every bundled model with bf16 products,
// fused and unfused, against PyTorch's fp32 outputs within
// conform.BF16Tolerance (a model's own, bf16_tolerance.json, where it has
// one), and checks that the plan really multiplied in bf16 (fp32 runs
// match PyTorch to about 1e-6; bf16 ones cannot).
func TestModelsInProcessBF16(t *testing.T) {
	worst := 0.0
	cases, err := conform.Find([]string{"../../models"})
	if err != nil {
		t.Fatal(err)
	}
	for _, noFuse := range []bool{false, true} {
		for _, c := range cases {
			name := c.Name
			if noFuse {
				name = "unfused/" + name
			}
			t.Run(name, func(t *testing.T) {
				r := conform.Run(context.Background(), c, opener(Options{Threads: 2, NoFuse: noFuse, Precision: ops.PrecisionBF16}, nil), c.BF16For())
				if !r.Pass {
					t.Fatalf("%v (max abs %g)", r.Err, r.MaxAbs)
				}
				worst = max(worst, r.MaxAbs)
			})
		}
	}
	if worst < 1e-4 {
		t.Errorf("largest error %g: the bf16 plans computed in fp32", worst)
	}
}
