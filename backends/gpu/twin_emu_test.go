package gpu

import (
	"fmt"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/graph"
)

// TestAttentionOpTwinOnEmulator: seed 000's MultiHeadAttention in
// primitive ops and its twin with one Attention node on the same weights
// lower to the same device plan: the same kernels in the same order, and
// an attention_f32 launch with the same parameters (pointers aside, the
// scale to an ulp).
func TestAttentionOpTwinOnEmulator(t *testing.T) {
	launches := func(name string) []*launch {
		m, err := loadModel("../../models/" + name + "/model.onnx")
		if err != nil {
			t.Fatal(err)
		}
		prog, err := graph.Compile(m, graph.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pl, err := lowerPlan(prog, map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{2, 9, 32})}, map[string]bool{})
		if err != nil {
			t.Fatal(err)
		}
		var out []*launch
		for _, c := range pl.calls {
			k := c.k
			if k == nil {
				k = &launch{kernel: "sgemm"}
			}
			out = append(out, k)
		}
		return out
	}
	prim, twin := launches("s000_multi_head"), launches("s000_multi_head_attention_op")
	if len(prim) != len(twin) {
		t.Fatalf("%d device calls vs %d", len(prim), len(twin))
	}
	attention := 0
	for i := range prim {
		a, b := prim[i], twin[i]
		if a.kernel != b.kernel {
			t.Fatalf("call %d: %s vs %s", i, a.kernel, b.kernel)
		}
		if a.kernel != "attention_f32" {
			continue
		}
		attention++
		if a.grid != b.grid || a.block != b.block || a.shmem != b.shmem || len(a.fields) != len(b.fields) {
			t.Fatalf("attention launches differ: %+v vs %+v", a, b)
		}
		for k, fa := range a.fields {
			fb := b.fields[k]
			switch {
			case fa.kind == fPtr:
				if fa.off != fb.off || (fa.val == "") != (fb.val == "") {
					t.Errorf("%s: offset %d vs %d", fa.name, fa.off, fb.off)
				}
			case fa.name == "scale":
				if d := fa.f - fb.f; d > 1e-7 || d < -1e-7 {
					t.Errorf("scale %g vs %g", fa.f, fb.f)
				}
			case fmt.Sprint(fa) != fmt.Sprint(fb):
				t.Errorf("%s: %v vs %v", fa.name, fa, fb)
			}
		}
	}
	if attention != 1 {
		t.Fatalf("%d attention launches", attention)
	}
}
