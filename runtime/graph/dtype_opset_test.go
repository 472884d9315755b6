package graph

import (
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestTypeRefusedAtOpsetNamesTheFix: a node on an element type its op's
// version at the model's opset does not take (as torch.onnx exports at
// opset 11: Min on int64, Pad on bool) is refused, and the error names the
// first opset whose version takes it; where none does, it says only what
// the op takes.
func TestTypeRefusedAtOpsetNamesTheFix(t *testing.T) {
	pads := ir.NewTensor(ir.Int64, []int{4})
	copy(pads.Int64s(), []int64{0, 1, 0, 1})
	for _, c := range []struct {
		name  string
		opset int64
		in    *ir.ValueInfo
		node  *ir.Node
		want  string // in the error; "" when the model compiles
		never string // not in the error
	}{
		{"Min int64 at 11", 11, vi("x", ir.Int64, 2, 3), node("Min", []string{"x", "x"}, []string{"y"}),
			"Min-12 takes int64: export the model at opset 12 or later", ""},
		{"Min int64 at 12", 12, vi("x", ir.Int64, 2, 3), node("Min", []string{"x", "x"}, []string{"y"}), "", ""},
		{"Pad bool at 11", 11, vi("x", ir.Bool, 2, 3), node("Pad", []string{"x", "pads"}, []string{"y"}),
			"Pad-13 takes bool: export the model at opset 13 or later", ""},
		{"Pad bool at 13", 13, vi("x", ir.Bool, 2, 3), node("Pad", []string{"x", "pads"}, []string{"y"}), "", ""},
		{"Min bool: no version takes it", 17, vi("x", ir.Bool, 2, 3), node("Min", []string{"x", "x"}, []string{"y"}),
			"which this op does not take (it takes", "export the model"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := synth{inputs: []*ir.ValueInfo{c.in}, inits: map[string]*ir.Tensor{"pads": pads}, nodes: []*ir.Node{c.node}, outputs: []string{"y"}}.model()
			m.Opsets[""] = c.opset
			_, err := Compile(m, Options{Threads: 1})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("compile: %v", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("compiled; want an error with %q", c.want)
			case !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `node "/y" (`+c.node.OpType+`)`):
				t.Fatalf("error %q; want the node and %q", err, c.want)
			case c.never != "" && strings.Contains(err.Error(), c.never):
				t.Fatalf("error %q has %q", err, c.never)
			}
		})
	}
}
