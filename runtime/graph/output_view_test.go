package graph

import (
	"context"
	"math/rand"
	"slices"
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

// TestOutputViewOfComputed: a reshape-like graph output of a float32
// tensor that a RunInto step computes and nothing else reads runs as a
// view: the producer writes into the output's own buffer (never an arena
// buffer another step uses), and the output is neither copied nor zeroed.
// Every other reshape-like graph output keeps its copy. Two runs in a row
// with other inputs, with and without ReuseOutputs, must each give the
// node-by-node results; without ReuseOutputs the first run's outputs must
// survive the second and no output may share memory with another or with
// an input.
func TestOutputViewOfComputed(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	i64 := func(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }
	axis0 := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: 0}
	inits := map[string]*ir.Tensor{
		"w": randT(r, 4, 6), "b": randT(r, 6), "c": randT(r, 36),
		"s36": i64(36), "s66": i64(6, 6), "ax0": i64(0),
	}
	xw := func() *ir.Node { return node("MatMul", []string{"x", "w"}, []string{"a"}) }
	x := vi("x", ir.Float, 2, 3, 4)
	x2 := vi("x", ir.Float, 6, 4)
	x1 := vi("x", ir.Float, 1, 6, 4)
	cases := []struct {
		name   string
		input  *ir.ValueInfo
		nodes  []*ir.Node
		out    []string
		noFuse bool
		// views: the graph outputs whose step must run as a view.
		views []string
	}{
		{name: "MatMul Reshape", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s66"}, []string{"y"}),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "MatMul Reshape unfused", input: x, noFuse: true, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s66"}, []string{"y"}),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "Gemm Flatten", input: x2, nodes: []*ir.Node{
			node("Gemm", []string{"x", "w", "b"}, []string{"a"}), // a FusedMatMul
			node("Flatten", []string{"a"}, []string{"y"}, axis0),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "Gemm Flatten unfused", input: x2, noFuse: true, nodes: []*ir.Node{
			node("Gemm", []string{"x", "w", "b"}, []string{"a"}),
			node("Flatten", []string{"a"}, []string{"y"}, axis0),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "Hardmax Flatten (Hardmax has no RunInto: copied)", input: x2, nodes: []*ir.Node{
			node("Hardmax", []string{"x"}, []string{"a"}),
			node("Flatten", []string{"a"}, []string{"y"}, axis0),
		}, out: []string{"y"}},
		{name: "MatMul Reshape Flatten (a chain)", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s66"}, []string{"r"}),
			node("Flatten", []string{"r"}, []string{"y"}, axis0),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "chain with a second reader keeps the copy", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s66"}, []string{"r"}),
			node("Flatten", []string{"r"}, []string{"y"}, axis0),
			node("Reshape", []string{"r", "s36"}, []string{"f"}),
			node("Add", []string{"f", "c"}, []string{"z"}),
		}, out: []string{"y", "z"}},
		{name: "MatMul Squeeze", input: x1, nodes: []*ir.Node{
			xw(),
			node("Squeeze", []string{"a", "ax0"}, []string{"y"}),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "MatMul Unsqueeze", input: x2, nodes: []*ir.Node{
			xw(),
			node("Unsqueeze", []string{"a", "ax0"}, []string{"y"}),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "Softmax Identity", input: x, nodes: []*ir.Node{
			xw(),
			node("Softmax", []string{"a"}, []string{"s"}),
			node("Identity", []string{"s"}, []string{"y"}),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "second reader keeps the copy", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s66"}, []string{"y"}),
			node("Reshape", []string{"a", "s36"}, []string{"f"}),
			node("Add", []string{"f", "c"}, []string{"z"}),
		}, out: []string{"y", "z"}},
		{name: "two outputs of one tensor both copy", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s66"}, []string{"y"}),
			node("Flatten", []string{"a"}, []string{"z"}, axis0),
		}, out: []string{"y", "z"}},
		{name: "output and its reshape", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s66"}, []string{"y"}),
		}, out: []string{"a", "y"}},
		{name: "reshape of a view (a chain)", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s36"}, []string{"f"}),
			node("Reshape", []string{"f", "s66"}, []string{"y"}),
		}, out: []string{"y"}, views: []string{"y"}},
		{name: "a chain whose middle is an output: the rest copies", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s36"}, []string{"f"}),
			node("Reshape", []string{"f", "s66"}, []string{"y"}),
		}, out: []string{"f", "y"}, views: []string{"f"}},
		{name: "viewed output read further", input: x, nodes: []*ir.Node{
			xw(),
			node("Reshape", []string{"a", "s36"}, []string{"y"}),
			node("Add", []string{"y", "c"}, []string{"z"}), // may not write over y
		}, out: []string{"y", "z"}, views: []string{"y"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			syn := synth{inputs: []*ir.ValueInfo{c.input}, inits: inits, nodes: c.nodes, outputs: c.out}
			p, err := Compile(syn.model(), Options{Threads: 2, NoFuse: c.noFuse})
			if err != nil {
				t.Fatal(err)
			}
			dims, _ := c.input.Type.Shape.Concrete()
			ins := []map[string]*ir.Tensor{{"x": randT(r, dims...)}, {"x": randT(r, dims...)}}
			checkOutputViews(t, p, ins[0], c.views)
			for _, reuse := range []bool{false, true} {
				var runs []map[string]*ir.Tensor
				var kept []map[string]string
				for _, in := range ins {
					before := in["x"].String()
					got, err := p.Run(context.Background(), in, RunOptions{ReuseOutputs: reuse})
					if err != nil {
						t.Fatal(err)
					}
					if in["x"].String() != before {
						t.Fatal("the run wrote its input")
					}
					want := interpret(t, p, in)
					saved := map[string]string{}
					for _, name := range c.out {
						sameOutputs(t, got[name], want[name])
						saved[name] = got[name].String()
					}
					runs, kept = append(runs, got), append(kept, saved)
				}
				for _, name := range c.views {
					y0, y1 := &runs[0][name].Float32s()[0], &runs[1][name].Float32s()[0]
					if reuse != (y0 == y1) {
						t.Errorf("reuse %v: %s in the same memory in both runs: %v", reuse, name, y0 == y1)
					}
				}
				if reuse {
					continue
				}
				// The caller owns what Run returned: the next run left it
				// alone, and no two tensors share memory.
				seen := map[*float32]string{&ins[0]["x"].Float32s()[0]: "x", &ins[1]["x"].Float32s()[0]: "x"}
				for k, got := range runs {
					for _, name := range c.out {
						if got[name].String() != kept[k][name] {
							t.Errorf("run %d's %s changed by a later run", k, name)
						}
						ptr := &got[name].Float32s()[0]
						if other, ok := seen[ptr]; ok {
							t.Errorf("run %d's %s shares memory with %s", k, name, other)
						}
						seen[ptr] = name
					}
				}
			}
		})
	}
}

// checkOutputViews checks that exactly the graph outputs named in views
// are produced by steps running as views, and that the producer of each
// such view computes it into an arena buffer no other step uses.
func checkOutputViews(t *testing.T, p *Program, in map[string]*ir.Tensor, views []string) {
	t.Helper()
	pl, err := p.planFor(in)
	if err != nil {
		t.Fatal(err)
	}
	defer p.donePlan(pl)
	users := map[int]int{} // arena buffer → steps computing into it
	for i := range pl.steps {
		for _, b := range pl.steps[i].bufs {
			if b >= 0 {
				users[b]++
			}
		}
	}
	reshaped := map[string]bool{} // graph outputs of reshape-like nodes
	for _, n := range p.Model.Graph.Nodes {
		if reshapeLike(n) {
			reshaped[n.Outputs[0]] = true
		}
	}
	for i := range pl.steps {
		st := &pl.steps[i]
		for k, o := range p.Model.Graph.Outputs {
			if st.outs[0] != pl.outputs[k] || !reshapeLike(st.node) {
				continue
			}
			delete(reshaped, o.Name)
			if want := slices.Contains(views, o.Name); st.view != want {
				t.Errorf("output %s (%s): view %v, want %v", o.Name, st.node.OpType, st.view, want)
			}
			if !st.view {
				continue
			}
			// The producer: back through the chain of views to the step
			// that computes the data.
			src := st.args[0]
			for j := i - 1; j >= 0; j-- {
				k := slices.Index(pl.steps[j].outs, src)
				if k < 0 {
					continue
				}
				if pl.steps[j].view {
					src = pl.steps[j].args[0]
					continue
				}
				if pl.steps[j].bufs == nil {
					t.Fatalf("output %s: its producer %s computes into no buffer", o.Name, pl.steps[j].node.OpType)
				}
				if b := pl.steps[j].bufs[k]; users[b] != 1 {
					t.Errorf("output %s: its producer's buffer %d is shared by %d steps", o.Name, b, users[b])
				}
				break
			}
		}
	}
	for _, o := range p.Model.Graph.Outputs {
		if reshaped[o.Name] {
			t.Errorf("output %s: no reshape-like step of the plan produces it", o.Name)
		}
	}
}
