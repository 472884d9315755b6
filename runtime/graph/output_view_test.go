package graph

import (
	"context"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestInPlaceSparesOutputs: an elementwise step that may overwrite an
// input dying at it (Add, Schema.InPlace) must not overwrite a graph
// output's buffer, which with ReuseOutputs is the tensor Run returns.
func TestInPlaceSparesOutputs(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	syn := synth{
		inputs: []*ir.ValueInfo{vi("x", ir.Float, 3, 4)},
		inits:  map[string]*ir.Tensor{"w": randT(r, 4, 4), "c": randT(r, 3, 4)},
		nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"y"}),
			node("Add", []string{"y", "c"}, []string{"a"}), // y's last reader
			node("MatMul", []string{"a", "w"}, []string{"z"}),
		},
		outputs: []string{"y", "z"},
	}
	for _, noFuse := range []bool{false, true} {
		p, err := Compile(syn.model(), Options{Threads: 1, NoFuse: noFuse})
		if err != nil {
			t.Fatal(err)
		}
		for _, reuse := range []bool{false, true} {
			in := map[string]*ir.Tensor{"x": randT(r, 3, 4)}
			got, err := p.Run(context.Background(), in, RunOptions{ReuseOutputs: reuse})
			if err != nil {
				t.Fatal(err)
			}
			want := interpret(t, p, in)
			for _, name := range []string{"y", "z"} {
				sameOutputs(t, got[name], want[name])
			}
		}
	}
}
