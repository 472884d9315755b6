package graph

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
)

// TestAttentionOpTwin: seed 000's MultiHeadAttention exported by PyTorch
// in primitive ops (models/s000_multi_head) and the same model with its
// attention written as one ONNX Attention node on the same weights
// (models/s000_multi_head_attention_op, models/export_opset23.py) give the
// same outputs and run the same kernel: one com.attnrun:FusedAttention step
// with the same attributes (scale to an ulp, the same views of the QKV
// projection, the same head merge), the Split of the projection read
// through in both, and the same steps around it.
func TestAttentionOpTwin(t *testing.T) {
	load := func(name string) *Program {
		m, err := onnx.Load(filepath.Join("../../models", name, "model.onnx"), onnx.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(m, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	prim, twin := load("s000_multi_head"), load("s000_multi_head_attention_op")
	r := rand.New(rand.NewSource(12))
	for _, shape := range [][]int{{2, 7, 32}, {1, 1, 32}, {3, 130, 32}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			in := map[string]*ir.Tensor{"x": randT(r, shape...)}
			var outs [2]*ir.Tensor
			var fused [2]*ir.Node
			var steps [2][]string
			for k, p := range []*Program{prim, twin} {
				res, err := p.Run(context.Background(), in, RunOptions{})
				if err != nil {
					t.Fatal(err)
				}
				outs[k] = res["y"]
				all, err := p.Fusions(in)
				if err != nil {
					t.Fatal(err)
				}
				fs := attentionFusions(all)
				if len(fs) != 1 {
					t.Fatalf("model %d: %d attention fusions", k, len(fs))
				}
				fused[k] = fs[0].Node
				var absorbed []string
				for _, n := range fs[0].Absorbed {
					absorbed = append(absorbed, n.OpType)
				}
				if !slices.Contains(absorbed, "Split") {
					t.Errorf("model %d: the QKV Split is not read through (absorbed %v)", k, absorbed)
				}
				pl, err := p.planFor(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range pl.steps {
					steps[k] = append(steps[k], st.node.QualifiedOp())
				}
			}
			sameOutputs(t, outs[1], outs[0])
			a, b := kernelAttrs(fused[0]), kernelAttrs(fused[1])
			if !slices.Equal(a, b) {
				t.Errorf("FusedAttention attributes differ:\nprimitive %v\nAttention %v", a, b)
			}
			sa, _ := fused[0].AttrFloat("scale", 0)
			sb, _ := fused[1].AttrFloat("scale", 0)
			if math.Abs(float64(sa-sb)) > 1e-7*math.Abs(float64(sa)) {
				t.Errorf("scale %g vs %g", sa, sb)
			}
			for k, n := range fused {
				if n.Inputs[0] != n.Inputs[1] || n.Inputs[1] != n.Inputs[2] || !strings.Contains(n.Inputs[0], "Wqkv") && !strings.HasPrefix(n.Inputs[0], "qkv") {
					t.Errorf("model %d: FusedAttention reads %v, not the QKV projection", k, n.Inputs)
				}
			}
			if !slices.Equal(steps[0], steps[1]) {
				t.Errorf("the plans differ:\nprimitive %v\nAttention %v", steps[0], steps[1])
			}
			if !slices.Contains(steps[1], ops.DomainAttnrun+":"+ops.FusedAttentionOp) {
				t.Errorf("no FusedAttention step in %v", steps[1])
			}
		})
	}
}

// kernelAttrs lists a fused node's attributes but its scale, sorted, as
// "name=value".
func kernelAttrs(n *ir.Node) []string {
	var out []string
	for _, a := range n.Attrs {
		if a.Name == "scale" {
			continue
		}
		v := fmt.Sprint(a.Int)
		switch a.Type {
		case ir.AttrFloat:
			v = fmt.Sprint(a.Float)
		case ir.AttrInts:
			v = fmt.Sprint(a.Ints)
		case ir.AttrString:
			v = string(a.String)
		}
		out = append(out, a.Name+"="+v)
	}
	sort.Strings(out)
	return out
}
