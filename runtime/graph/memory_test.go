package graph

import (
	"context"
	"math/rand"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/ops/blas"
)

// interpret runs a model node by node with each schema's Run, allocating
// every result: the reference for the planned executor.
func interpret(t *testing.T, p *Program, in map[string]*ir.Tensor) map[string]*ir.Tensor {
	t.Helper()
	vals := map[string]*ir.Tensor{}
	for k, v := range p.Model.Graph.Initializers {
		vals[k] = v
	}
	for k, v := range in {
		vals[k] = v
	}
	for _, n := range p.Order {
		args := make([]*ir.Tensor, len(n.Inputs))
		for i, name := range n.Inputs {
			if name != "" {
				args[i] = vals[name]
			}
		}
		res, err := p.Schemas[n].Run(&ops.Context{Opset: p.Opsets[n], Threads: 1}, n, args)
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range n.Outputs {
			if name != "" {
				vals[name] = res[i]
			}
		}
	}
	out := map[string]*ir.Tensor{}
	for _, o := range p.Model.Graph.Outputs {
		out[o.Name] = vals[o.Name]
	}
	return out
}

// TestMemoryPlan runs a graph whose intermediates share arena buffers:
// a buffer freed by liveness is reused, an elementwise step overwrites
// an input that dies at it, a Reshape is a view, and a Reshape producing
// a graph output copies. The results must equal the node-by-node
// reference, and a second run must not disturb the first run's outputs.
func TestMemoryPlan(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{1, 0}}
	syn := synth{
		inputs: []*ir.ValueInfo{vi("x", ir.Float, 2, 3, 4)},
		inits: map[string]*ir.Tensor{
			"w":   randT(r, 4, 4),
			"s64": ir.FromSlice([]int{2}, []int64{6, 4}),
		},
		nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"a"}),
			node("Softmax", []string{"a"}, []string{"b"}, axis),
			node("Mul", []string{"b", "x"}, []string{"c"}),       // in place over b
			node("Reshape", []string{"c", "s64"}, []string{"d"}), // a view of c
			node("Transpose", []string{"d"}, []string{"e"}, perm),
			node("MatMul", []string{"e", "d"}, []string{"f"}), // [4, 4]
			node("Softmax", []string{"f"}, []string{"g"}, axis),
			node("Add", []string{"g", "g"}, []string{"y"}),
			node("Reshape", []string{"c", "s64"}, []string{"z"}), // a graph output: copied
		},
		outputs: []string{"y", "z"},
	}
	m := syn.model()
	for _, noFuse := range []bool{false, true} {
		p, err := Compile(m, Options{Threads: 2, NoFuse: noFuse})
		if err != nil {
			t.Fatal(err)
		}
		in := map[string]*ir.Tensor{"x": randT(r, 2, 3, 4)}
		pl, err := p.planFor(in)
		if err != nil {
			t.Fatal(err)
		}
		views, into := 0, 0
		for _, st := range pl.steps {
			if st.view {
				views++
			}
			if st.bufs != nil {
				into++
			}
		}
		// Into the arena: a, b, c (in place), e, f, g, and y, a graph
		// output, into a buffer of its own. Fused, f reads d and e through
		// views of c (FusedMatMul) and neither runs.
		wantViews, wantInto := 1, 7
		if !noFuse {
			wantViews, wantInto = 0, 6
		}
		if views != wantViews || into != wantInto || len(pl.mem.sizes) >= into {
			t.Fatalf("noFuse %v: %d view steps, %d into steps, %d arena buffers", noFuse, views, into, len(pl.mem.sizes))
		}
		want := interpret(t, p, in)
		got, err := p.Run(context.Background(), in, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range want {
			sameOutputs(t, got[name], w)
		}
		// A second run reuses the arena; the first outputs stay intact.
		keep := map[string]string{}
		for name, g := range got {
			keep[name] = g.String()
		}
		in2 := map[string]*ir.Tensor{"x": randT(r, 2, 3, 4)}
		got2, err := p.Run(context.Background(), in2, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, g := range got {
			if g.String() != keep[name] {
				t.Fatalf("output %s changed by the next run", name)
			}
		}
		for name, w := range interpret(t, p, in2) {
			sameOutputs(t, got2[name], w)
		}
		// With ReuseOutputs, y comes back in the plan's own buffer: the
		// same memory run after run, still with the right values.
		var first *ir.Tensor
		for _, x := range []map[string]*ir.Tensor{in, in2} {
			got, err := p.Run(context.Background(), x, RunOptions{ReuseOutputs: true})
			if err != nil {
				t.Fatal(err)
			}
			sameOutputs(t, got["y"], interpret(t, p, x)["y"])
			if first == nil {
				first = got["y"]
			} else if &first.Float32s()[0] != &got["y"].Float32s()[0] {
				t.Error("ReuseOutputs gave y new memory")
			}
		}
		if &got["y"].Float32s()[0] == &got2["y"].Float32s()[0] {
			t.Error("without ReuseOutputs two runs shared y's memory")
		}
	}
}

// TestOutputViewOfInput: a graph output that only reshapes a graph input
// shares the input's data under ReuseOutputs (the caller copies outputs
// before the inputs change) and is a copy otherwise.
func TestOutputViewOfInput(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for _, c := range []struct {
		name  string
		nodes []*ir.Node
		inits map[string]*ir.Tensor
	}{
		{"Identity", []*ir.Node{node("Identity", []string{"x"}, []string{"y"})}, nil},
		{"Reshape", []*ir.Node{node("Reshape", []string{"x", "s"}, []string{"y"})}, map[string]*ir.Tensor{"s": ir.FromSlice([]int{2}, []int64{6, 4})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			syn := synth{inputs: []*ir.ValueInfo{vi("x", ir.Float, 2, 3, 4)}, inits: c.inits, nodes: c.nodes, outputs: []string{"y"}}
			p, err := Compile(syn.model(), Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			x := randT(r, 2, 3, 4)
			in := map[string]*ir.Tensor{"x": x}
			for _, reuse := range []bool{true, false} {
				got, err := p.Run(context.Background(), in, RunOptions{ReuseOutputs: reuse})
				if err != nil {
					t.Fatal(err)
				}
				y := got["y"]
				if y.Len() != 24 || y.Float32s()[23] != x.Float32s()[23] {
					t.Fatalf("reuse %v: y = %v", reuse, y)
				}
				if shared := &y.Float32s()[0] == &x.Float32s()[0]; shared != reuse {
					t.Errorf("reuse %v: y shares x's data: %v", reuse, shared)
				}
			}
		})
	}
}

// TestFuseMatMul covers the MatMul rewrite: a Transpose swapping the last
// two axes becomes a transposed GEMM operand, a head split read through
// strides, and a bias Add is folded in; results equal the unfused graph.
func TestFuseMatMul(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	perm := func(p ...int64) *ir.Attribute { return &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: p} }
	cases := []struct {
		name     string
		syn      synth
		replaced string
		absorbed string
	}{
		{"transposed weight and bias", synth{
			inputs: []*ir.ValueInfo{vi("x", ir.Float, 2, 5, 8), vi("wt", ir.Float, 6, 8)},
			inits:  map[string]*ir.Tensor{"b": randT(r, 6)},
			nodes: []*ir.Node{
				node("Transpose", []string{"wt"}, []string{"w"}, perm(1, 0)),
				node("MatMul", []string{"x", "w"}, []string{"h"}),
				node("Add", []string{"b", "h"}, []string{"y"}),
			}}, "MatMul Add", "Transpose"},
		{"head split operands", synth{
			inputs: []*ir.ValueInfo{vi("q", ir.Float, 2, 5, 12), vi("k", ir.Float, 2, 5, 12)},
			inits:  map[string]*ir.Tensor{"shape": ir.FromSlice([]int{4}, []int64{2, 5, 3, 4})},
			nodes: []*ir.Node{
				node("Reshape", []string{"q", "shape"}, []string{"q4"}),
				node("Transpose", []string{"q4"}, []string{"qh"}, perm(0, 2, 1, 3)),
				node("Reshape", []string{"k", "shape"}, []string{"k4"}),
				node("Transpose", []string{"k4"}, []string{"kh"}, perm(0, 2, 3, 1)),
				node("MatMul", []string{"qh", "kh"}, []string{"y"}),
			}}, "MatMul", "Reshape Transpose Reshape Transpose"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.syn.outputs = []string{"y"}
			m := c.syn.model()
			in := map[string]*ir.Tensor{}
			for _, v := range m.Graph.Inputs {
				dims, _ := v.Type.Shape.Concrete()
				in[v.Name] = randT(r, dims...)
			}
			p, err := Compile(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Run(context.Background(), in, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameOutputs(t, got["y"], interpret(t, p, in)["y"])
			fs, err := p.Fusions(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) != 1 || fs[0].Node.OpType != ops.FusedMatMulOp {
				t.Fatalf("fusions %v", fs)
			}
			if g := opTypes(fs[0].Replaced); g != c.replaced {
				t.Errorf("replaced %s, want %s", g, c.replaced)
			}
			if g := opTypes(fs[0].Absorbed); g != c.absorbed {
				t.Errorf("absorbed %s, want %s", g, c.absorbed)
			}
		})
	}
}

func opTypes(ns []*ir.Node) string {
	s := ""
	for i, n := range ns {
		if i > 0 {
			s += " "
		}
		s += n.OpType
	}
	return s
}

// TestArenaScratch checks ops.Context.Scratch's backing: pieces handed
// out during one step are disjoint, a step gets the same memory back run
// after run once the chunks exist, and a request larger than every chunk
// adds one.
func TestArenaScratch(t *testing.T) {
	a := &arena{}
	step := func(sizes ...int) [][]float32 {
		a.startStep(0)
		var out [][]float32
		for _, n := range sizes {
			s := a.scratchFloats(n)
			if len(s) != n {
				t.Fatalf("asked %d, got %d", n, len(s))
			}
			for i := range s {
				s[i] = float32(len(out) + 1)
			}
			out = append(out, s)
		}
		for k, s := range out { // no later piece overwrote an earlier one
			for _, v := range s {
				if v != float32(k+1) {
					t.Fatalf("piece %d overwritten", k)
				}
			}
		}
		return out
	}
	first := step(100, 50)
	step(10)
	again := step(100, 50)
	for k := range first {
		if &first[k][0] != &again[k][0] {
			t.Errorf("piece %d moved between runs", k)
		}
	}
	if n := len(a.chunks); n != 2 {
		t.Errorf("%d chunks, want 2", n)
	}
	step(500)
	if n := len(a.chunks); n != 3 {
		t.Errorf("%d chunks after a larger request, want 3", n)
	}
}

// TestArenaAlloc checks ops.Context.Alloc's backing: a step's k-th
// allocation gets the same memory back in the next run, zeroed, when type
// and size match; another type or size gets new memory; different steps
// never share.
func TestArenaAlloc(t *testing.T) {
	a := &arena{}
	a.startStep(0)
	m := a.alloc(ir.Bool, []int{4, 8})
	idx := a.alloc(ir.Int64, []int{3})
	m.Bools()[5], idx.Int64s()[2] = true, 7
	a.startStep(1)
	other := a.alloc(ir.Bool, []int{32})
	if &other.Bools()[0] == &m.Bools()[0] {
		t.Fatal("two steps share memory")
	}
	// Next run.
	a.startStep(0)
	m2 := a.alloc(ir.Bool, []int{8, 4}) // same size, new shape
	idx2 := a.alloc(ir.Int64, []int{5}) // bigger: new memory
	if &m2.Bools()[0] != &m.Bools()[0] || !slices.Equal(m2.Shape, []int{8, 4}) {
		t.Errorf("mask: reused %v, shape %v", &m2.Bools()[0] == &m.Bools()[0], m2.Shape)
	}
	if m2.Bools()[5] {
		t.Error("reused memory not zeroed")
	}
	if &idx2.Int64s()[0] == &idx.Int64s()[0] || idx2.Len() != 5 {
		t.Error("a larger request reused the smaller tensor")
	}
	a.startStep(0)
	if m3 := a.alloc(ir.Float, []int{32}); m3.DType != ir.Float || m3.Len() != 32 {
		t.Errorf("another type: got %v[%d]", m3.DType, m3.Len())
	}
}

// TestAllocKeepsOutputs: a graph output computed by a kernel without
// RunInto (a bool Not) is new memory every run unless ReuseOutputs, and an
// intermediate bool tensor keeps its memory across runs.
func TestAllocKeepsOutputs(t *testing.T) {
	syn := synth{
		inputs: []*ir.ValueInfo{vi("b", ir.Bool, 2, 3)},
		nodes: []*ir.Node{
			node("Not", []string{"b"}, []string{"nb"}),
			node("Not", []string{"nb"}, []string{"y"}),
		},
		outputs: []string{"y"},
	}
	p, err := Compile(syn.model(), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"b": ir.FromSlice([]int{2, 3}, []bool{true, false, true, false, false, true})}
	var ys []*ir.Tensor
	for _, reuse := range []bool{false, false, true, true} {
		got, err := p.Run(context.Background(), in, RunOptions{ReuseOutputs: reuse})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got["y"].Bools(), in["b"].Bools()) {
			t.Fatalf("y = %v", got["y"].Bools())
		}
		ys = append(ys, got["y"])
	}
	if &ys[0].Bools()[0] == &ys[1].Bools()[0] {
		t.Error("without ReuseOutputs two runs returned the same memory")
	}
	if &ys[2].Bools()[0] != &ys[3].Bools()[0] {
		t.Error("with ReuseOutputs the output moved")
	}
}

// TestPackedWeightsShared: a MatMul on constant weights, with a bias Add
// or alone, is rewritten into FusedMatMul, which packs its weights once
// (Program.memo) for every run and every plan (two sequence lengths), with
// the node-by-node results.
func TestPackedWeightsShared(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	x := &ir.ValueInfo{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Param: "s"}, {Value: 40}}, RankKnown: true}}
	for _, withBias := range []bool{true, false} {
		syn := synth{
			inputs:  []*ir.ValueInfo{x},
			inits:   map[string]*ir.Tensor{"w": randT(r, 40, 70), "b": randT(r, 70)},
			nodes:   []*ir.Node{node("MatMul", []string{"x", "w"}, []string{"y"})},
			outputs: []string{"y"},
		}
		if withBias {
			syn.nodes = []*ir.Node{
				node("MatMul", []string{"x", "w"}, []string{"xw"}),
				node("Add", []string{"xw", "b"}, []string{"y"}),
			}
		}
		p, err := Compile(syn.model(), Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []int{3, 9, 3} {
			in := map[string]*ir.Tensor{"x": randT(r, s, 40)}
			got, err := p.Run(context.Background(), in, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameOutputs(t, got["y"], interpret(t, p, in)["y"])
		}
		if fs, err := p.Fusions(map[string]*ir.Tensor{"x": randT(r, 3, 40)}); err != nil || len(fs) != 1 || fs[0].Node.OpType != ops.FusedMatMulOp {
			t.Fatalf("bias %v: fusions %v (%v), want one FusedMatMul", withBias, fs, err)
		}
		n := 0
		p.memo.Range(func(key, v any) bool {
			if _, ok := v.(*blas.PackedB); !ok {
				t.Errorf("memo holds %T", v)
			}
			n++
			return true
		})
		if n != 1 {
			t.Errorf("bias %v: weights packed %d times, want once", withBias, n)
		}
	}
}

// TestSameTypeCastIsView: a Cast to its input's own type (an fp32 export's
// x.to(torch.float32)) runs as a view of its input, as Identity does; a
// Cast that converts runs its kernel. The outputs are the interpreter's.
func TestSameTypeCastIsView(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	to := func(dt ir.DType) *ir.Attribute { return &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(dt)} }
	syn := synth{
		inputs: []*ir.ValueInfo{vi("x", ir.Float, 3, 8)},
		inits:  map[string]*ir.Tensor{"w": randT(r, 8, 8)},
		nodes: []*ir.Node{
			node("MatMul", []string{"x", "w"}, []string{"a"}),
			node("Cast", []string{"a"}, []string{"b"}, to(ir.Float)), // a view of a
			node("Relu", []string{"b"}, []string{"c"}),
			node("Cast", []string{"c"}, []string{"d"}, to(ir.Int64)), // converts
			node("Cast", []string{"d"}, []string{"e"}, to(ir.Float)), // converts back
			node("Add", []string{"e", "b"}, []string{"y"}),
		},
		outputs: []string{"y"},
	}
	m := syn.model()
	p, err := Compile(m, Options{Threads: 2, NoFuse: true})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"x": randT(r, 3, 8)}
	pl, err := p.planFor(in)
	if err != nil {
		t.Fatal(err)
	}
	var views []string
	for _, st := range pl.steps {
		if st.view {
			views = append(views, st.node.Outputs[0])
		}
	}
	if !slices.Equal(views, []string{"b"}) {
		t.Errorf("steps run as views: %v, want [b]", views)
	}
	got, err := p.Run(context.Background(), in, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameOutputs(t, got["y"], interpret(t, p, in)["y"])
}
