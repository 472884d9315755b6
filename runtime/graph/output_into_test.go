package graph

import (
	"context"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestOutputInto: RunOptions.OutputInto is asked for exactly the float32
// graph outputs a step computes into a buffer (also through a reshape-like
// view of one), and those outputs are computed in the memory it gives (the
// same pointer), with the node-by-node results; a nil answer leaves the
// memory to the program; outputs it is not asked for (views of inputs,
// copies, kernels without RunInto, other types) are right as before.
func TestOutputInto(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	inits := map[string]*ir.Tensor{"w": randT(r, 4, 6), "b": randT(r, 6), "s66": int64s(6, 6), "c": randT(r, 2, 3, 6)}
	x := vi("x", ir.Float, 2, 3, 4)
	x2 := vi("x", ir.Float, 6, 4)
	cases := []struct {
		name   string
		input  *ir.ValueInfo
		nodes  []*ir.Node
		out    []string
		noFuse bool
		// into: the outputs OutputInto must be asked for (and computed in).
		into []string
		// decline: outputs for which OutputInto answers nil.
		decline []string
	}{
		{name: "MatMul", input: x, nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"y"}),
		}, out: []string{"y"}, into: []string{"y"}},
		{name: "MatMul declined", input: x, nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"y"}),
		}, out: []string{"y"}, into: []string{"y"}, decline: []string{"y"}},
		{name: "MatMul Reshape (the producer computes the view's memory)", input: x, nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"a"}),
			node("Reshape", []string{"a", "s66"}, []string{"y"}),
		}, out: []string{"y"}, into: []string{"y"}},
		{name: "output and its reshape alias: the reshape copies", input: x, nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"a"}),
			node("Reshape", []string{"a", "s66"}, []string{"y"}),
		}, out: []string{"a", "y"}, into: []string{"a"}},
		{name: "output read by a later step", input: x, nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"a"}),
			node("Add", []string{"a", "c"}, []string{"z"}),
		}, out: []string{"a", "z"}, into: []string{"a", "z"}},
		{name: "view of an input is not asked", input: x, nodes: []*ir.Node{
			node("Identity", []string{"x"}, []string{"y"}),
			node("MatMul", []string{"x", "w"}, []string{"z"}),
		}, out: []string{"y", "z"}, into: []string{"z"}},
		{name: "Gemm unfused", input: x2, noFuse: true, nodes: []*ir.Node{
			node("Gemm", []string{"x", "w", "b"}, []string{"y"}),
		}, out: []string{"y"}, into: []string{"y"}},
		{name: "Hardmax has no RunInto", input: x, nodes: []*ir.Node{
			node("Hardmax", []string{"x"}, []string{"y"}),
		}, out: []string{"y"}},
		{name: "MatMul Reshape Flatten (a chain of views)", input: x, nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"a"}),
			node("Reshape", []string{"a", "s66"}, []string{"f"}),
			node("Flatten", []string{"f"}, []string{"y"}),
		}, out: []string{"y"}, into: []string{"y"}},
		{name: "bool output is not asked", input: x, nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"a"}),
			node("Greater", []string{"a", "c"}, []string{"g"}),
		}, out: []string{"a", "g"}, into: []string{"a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			syn := synth{inputs: []*ir.ValueInfo{c.input}, inits: inits, nodes: c.nodes, outputs: c.out}
			p, err := Compile(syn.model(), Options{Threads: 2, NoFuse: c.noFuse})
			if err != nil {
				t.Fatal(err)
			}
			dims, _ := c.input.Type.Shape.Concrete()
			for run, reuse := range []bool{false, true, true} {
				in := map[string]*ir.Tensor{"x": randT(r, dims...)}
				given := map[string][]float32{}
				var asked []string
				into := func(name string, shape []int) []float32 {
					asked = append(asked, name)
					if slices.Contains(c.decline, name) {
						return nil
					}
					// NaN-filled: an element the step does not write shows.
					s := make([]float32, ir.NumElements(shape))
					for i := range s {
						s[i] = float32(math.NaN())
					}
					given[name] = s
					return s
				}
				got, err := p.Run(context.Background(), in, RunOptions{ReuseOutputs: reuse, OutputInto: into})
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(asked)
				if !slices.Equal(asked, c.into) {
					t.Errorf("run %d: OutputInto asked for %v, want %v", run, asked, c.into)
				}
				want := interpret(t, p, in)
				for _, name := range c.out {
					sameOutputs(t, got[name], want[name])
					s, ok := given[name]
					if computedIn := ok && &got[name].Float32s()[0] == &s[0]; computedIn != ok {
						t.Errorf("run %d: output %s computed in the given memory: %v, want %v", run, name, computedIn, ok)
					}
				}
			}
		})
	}
}

// TestOutputIntoWrongLength: memory of the wrong size is an error naming
// the node and the output, not a kernel writing out of bounds.
func TestOutputIntoWrongLength(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	syn := synth{
		inputs:  []*ir.ValueInfo{vi("x", ir.Float, 2, 4)},
		inits:   map[string]*ir.Tensor{"w": randT(r, 4, 6)},
		nodes:   []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"y"})},
		outputs: []string{"y"},
	}
	p, err := Compile(syn.model(), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Run(context.Background(), map[string]*ir.Tensor{"x": randT(r, 2, 4)}, RunOptions{
		OutputInto: func(string, []int) []float32 { return make([]float32, 11) },
	})
	if err == nil || !strings.Contains(err.Error(), `11 elements given for output "y" of shape [2x6]`) || !strings.Contains(err.Error(), "MatMul") {
		t.Fatalf("err = %v, want one naming the node and the output's size", err)
	}
}
