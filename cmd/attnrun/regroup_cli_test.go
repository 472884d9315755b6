package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
)

// TestInspectShowsRegroupSteps: BLOOM's attention (heads folded into the
// batch, the scores viewed as [B, H, S, S] for the mask and P viewed back)
// with its ALiBi term and its weights as graph inputs and outputs. The
// fused node runs in the batch shape [B, H]; inspect says which Reshape
// steps the fusion runs around it, and what they are; --dot draws it;
// run runs it.
func TestInspectShowsRegroupSteps(t *testing.T) {
	const b, h, s, d = 2, 3, 5, 8
	vi := func(name string, dt ir.DType, dims ...int) *ir.ValueInfo {
		return &ir.ValueInfo{Name: name, Type: ops.Known(dt, dims)}
	}
	node := func(op string, in []string, out string, attrs ...*ir.Attribute) *ir.Node {
		return &ir.Node{Name: "/" + out, OpType: op, Inputs: in, Outputs: []string{out}, Attrs: attrs}
	}
	shape := func(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }
	g := &ir.Graph{Name: "bloom_like",
		Inputs: []*ir.ValueInfo{vi("q", ir.Float, b*h, s, d), vi("kt", ir.Float, b*h, d, s), vi("v", ir.Float, b*h, s, d),
			vi("alibi", ir.Float, b*h, 1, s), vi("mask", ir.Bool, b, 1, s, s)},
		Outputs: []*ir.ValueInfo{vi("y", ir.Float, b*h, s, d), vi("p3", ir.Float, b*h, s, s)},
		Initializers: map[string]*ir.Tensor{"alpha": ir.Scalar(float32(0.35)), "fill": ir.Scalar(float32(-math.MaxFloat32)),
			"heads": shape(b, h, s, s), "folded": shape(b*h, s, s)},
		InitializerOrder: []string{"alpha", "fill", "heads", "folded"},
		Nodes: []*ir.Node{
			node("MatMul", []string{"q", "kt"}, "s0"), node("Mul", []string{"s0", "alpha"}, "s1"),
			node("Add", []string{"s1", "alibi"}, "s2"), node("Reshape", []string{"s2", "heads"}, "s3"),
			node("Where", []string{"mask", "fill", "s3"}, "s4"),
			node("Softmax", []string{"s4"}, "p", &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}),
			node("Reshape", []string{"p", "folded"}, "p3"), node("MatMul", []string{"p3", "v"}, "y")},
	}
	data, err := onnx.Encode(&ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "bloom_like.onnx")
	if err := os.WriteFile(model, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := attnrun(t, "inspect", model)
	r.wantOK(t)
	for _, want := range []string{
		"/FusedAttention replaces MatMul(/s0) Mul(/s1) Add(/s2) Reshape(/s3) Where(/s4) Softmax(/p) Reshape(/p3) MatMul(/y)",
		"bias attnrun:alibi/regrouped_2x3x1x5 added before the mask",
		"also writes the weights scores to attnrun:p3/regrouped_2x3x5x5 (Sq×Sk)",
		"runs before it Reshape(attnrun:alibi/regrouped_2x3x1x5): mask alibi seen in the fused attention's batch shape, [2x3x1x5] (a view of the same data, no copy)",
		"runs after it Reshape(attnrun:p3/regrouped_2x3x5x5): the weights the fused attention writes, in their own shape, [6x5x5] (a view of the same data, no copy)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = attnrun(t, "inspect", model, "--dot")
	r.wantOK(t)
	renderDOT(t, r.stdout)
	r = attnrun(t, "run", model, "-i", "q=random:6x5x8", "-i", "kt=random:6x8x5", "-i", "v=random:6x5x8", "-i", "alibi=random:6x1x5", "-i", "mask=random")
	r.wantOK(t)
	for _, want := range []string{"y: float32 [6x5x8]", "p3: float32 [6x5x5]"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run output lacks %q:\n%s", want, r.stdout)
		}
	}
}
