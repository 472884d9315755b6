package graph

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestEveryModelAttentionFused asserts that every attention core of every
// bundled model (models/*/model.onnx) is fused: each Softmax feeding a
// product with V is among the nodes a FusedAttention fusion replaced, no
// Softmax step is left in the plan, and each ONNX Attention node became a
// FusedAttention step; at the export shapes' kind of sizes and at a decode
// step (one query). A chain left unfused fails with its node names.
func TestEveryModelAttentionFused(t *testing.T) {
	paths, err := filepath.Glob("../../models/*/model.onnx")
	if err != nil || len(paths) < 30 {
		t.Fatalf("found %d models (%v)", len(paths), err)
	}
	decode := map[string]int{"batch": 1, "seq": 1, "enc_seq": 3, "seq_q": 1, "seq_kv": 3, "S": 1, "past": 6, "mem_seq": 3, "height": 1, "width": 1, "bw": 1, "nw": 1}
	for _, path := range paths {
		name := filepath.Base(filepath.Dir(path))
		t.Run(name, func(t *testing.T) {
			m, p := compileModel(t, name)
			var cores []AttentionCore
			for _, c := range p.AttentionCores() {
				if c.Attention == nil {
					cores = append(cores, c)
				}
			}
			for _, dims := range []map[string]int{modelDims, decode} {
				in := zeroInputs(t, m.Graph, dims)
				all, err := p.Fusions(in)
				if err != nil {
					t.Fatal(err)
				}
				fused := map[*ir.Node]bool{}
				for _, f := range attentionFusions(all) {
					for _, n := range f.Replaced {
						fused[n] = true
					}
				}
				for _, c := range cores {
					if !fused[c.Softmax] {
						t.Errorf("at %v: attention core Softmax %q → %s %q is not fused", dims, c.Softmax.Name, c.Output.OpType, c.Output.Name)
					}
				}
				missed, err := p.MissedAttention(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range missed {
					t.Errorf("at %v: MissedAttention lists Softmax %q → %s %q: %s", dims, c.Softmax.Name, c.Product.OpType, c.Product.Name, c.Reason)
				}
				kernels, err := p.AttentionKernels(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range kernels {
					if k.Fused == nil {
						t.Errorf("at %v: Attention node %q is not rewritten: %s", dims, k.Node.Name, k.Reason)
					}
				}
				if len(cores)+len(kernels) == 0 {
					t.Fatal("no attention core and no Attention node found")
				}
				pl, err := p.planFor(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range pl.steps {
					if st.node.OpType == "Softmax" || (st.node.OpType == "Attention" && isDefaultDomain(st.node)) {
						t.Errorf("at %v: %s %q is still a plan step", dims, st.node.OpType, st.node.Name)
					}
				}
				if n := slices.IndexFunc(pl.steps, func(st step) bool { return st.node.OpType == ops.FusedAttentionOp }); n < 0 {
					t.Errorf("at %v: no FusedAttention step in the plan", dims)
				}
			}
		})
	}
}
