package graph

import (
	"context"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/runtime/conform"
)

// checkMissReasons requires every attention core that p's plan for in
// leaves unfused to come with the matcher's reason, not the fallback for
// a product never tried.
func checkMissReasons(t *testing.T, p *Program, in map[string]*ir.Tensor) {
	t.Helper()
	missed, err := p.MissedAttention(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range missed {
		if c.Reason == "" || strings.Contains(c.Reason, "was not tried") {
			t.Errorf("unfused core %s → %s has no reason: %q", c.Softmax.Label(), c.Product.Label(), c.Reason)
		}
	}
}

// TestMissedAttentionReasons loads PyTorch exports whose attention the
// fusion does not take (testdata/unfused, made by models/export.py
// --unfused) and checks that MissedAttention lists each core with the
// reason in the export, that --no-fuse says so instead, and that each runs
// right (PyTorch's outputs) node by node.
func TestMissedAttentionReasons(t *testing.T) {
	cases := []struct {
		model string
		want  []string // in the reason
	}{
		{"float64_softmax_attention", []string{"the softmax computes in float64", `"/Cast_1" (Cast)`}},
		{"talking_heads_attention", []string{`einsum node "/Einsum_1" ("b h i j, h k -> b k i j") is not a product of Q and K`}},
		// Found through the Mul after the Softmax (productThroughOne).
		{"post_softmax_query_mask_attention", []string{`node "/Mul" (Mul) between the softmax and the product with V`}},
	}
	dirs, err := filepath.Glob("testdata/unfused/*/model.onnx")
	if err != nil || len(dirs) != len(cases) {
		t.Fatalf("%d models in testdata/unfused, %d cases here (%v)", len(dirs), len(cases), err)
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			m, err := onnx.Load(filepath.Join("testdata/unfused", c.model, "model.onnx"), onnx.Options{})
			if err != nil {
				t.Fatal(err)
			}
			in := zeroInputs(t, m.Graph, modelDims)
			for _, noFuse := range []bool{false, true} {
				p, err := Compile(m, Options{NoFuse: noFuse})
				if err != nil {
					t.Fatal(err)
				}
				missed, err := p.MissedAttention(in)
				if err != nil {
					t.Fatal(err)
				}
				if len(missed) != 1 || missed[0].Softmax.OpType != "Softmax" {
					t.Fatalf("NoFuse %v: missed %+v, want the one Softmax", noFuse, missed)
				}
				want := c.want
				if noFuse {
					want = []string{"--no-fuse"}
				}
				for _, w := range want {
					if !strings.Contains(missed[0].Reason, w) {
						t.Errorf("NoFuse %v: reason %q, want it to contain %q", noFuse, missed[0].Reason, w)
					}
				}
			}
		})
	}
	found, err := conform.Find([]string{"testdata/unfused"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range found {
		t.Run("conform/"+c.Name, func(t *testing.T) {
			fusions := 0
			r := conform.Run(context.Background(), c, opener(Options{Threads: 2}, &fusions), conform.Tolerance{Rtol: 1e-4, Atol: 1e-5})
			if !r.Pass {
				t.Fatalf("%v (max abs %g)", r.Err, r.MaxAbs)
			}
		})
	}
}

// wantMissReason compiles syn (outputs y and syn's) and requires its one
// attention core to be listed by MissedAttention with a reason containing
// want.
func wantMissReason(t *testing.T, r *rand.Rand, syn synth, feeds map[string]*ir.Tensor, want string) {
	t.Helper()
	syn.outputs = append([]string{"y"}, syn.outputs...)
	m := syn.model()
	p, err := Compile(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	missed, err := p.MissedAttention(synthInputs(r, m, feeds))
	if err != nil {
		t.Fatal(err)
	}
	if len(missed) != 1 || !strings.Contains(missed[0].Reason, want) {
		t.Fatalf("missed %+v, want one core whose reason says %q", missed, want)
	}
}
