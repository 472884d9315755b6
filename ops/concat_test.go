package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestConcatRun(t *testing.T) {
	a := mvF32([]int{2, 2}, 1, 2, 3, 4)
	b := mvF32([]int{2, 1}, 5, 6)
	c := mvF32([]int{1, 2}, 7, 8)
	cases := []struct {
		name  string
		opset int
		axis  int64
		in    []*ir.Tensor
		shape []int
		want  any
	}{
		{"axis1", 13, 1, []*ir.Tensor{a, b}, []int{2, 3}, []float32{1, 2, 5, 3, 4, 6}},
		{"axis-1", 11, -1, []*ir.Tensor{b, a}, []int{2, 3}, []float32{5, 1, 2, 6, 3, 4}},
		{"axis0", 7, 0, []*ir.Tensor{a, c}, []int{3, 2}, []float32{1, 2, 3, 4, 7, 8}},
		{"axis-2 three", 13, -2, []*ir.Tensor{c, a, c}, []int{4, 2}, []float32{7, 8, 1, 2, 3, 4, 7, 8}},
		{"1d int64 with empty", 13, 0, []*ir.Tensor{mvI64(1, 2), ir.FromSlice([]int{0}, []int64{}), mvI64(3)}, []int{3}, []int64{1, 2, 3}},
		{"bool 3d", 13, 2, []*ir.Tensor{ir.FromSlice([]int{1, 2, 1}, []bool{true, false}), ir.FromSlice([]int{1, 2, 1}, []bool{false, true})}, []int{1, 2, 2}, []bool{true, false, false, true}},
		{"single", 13, 0, []*ir.Tensor{c}, []int{1, 2}, []float32{7, 8}},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			n := mvNode("Concat", len(cs.in), 1, mvInt("axis", cs.axis))
			out := mvRun(t, cs.opset, n, cs.in...)
			mvWant(t, out[0], cs.shape, cs.want)
			// RunInto writes every element of a buffer it is given dirty.
			s, err := Lookup(DomainONNX, "Concat", cs.opset)
			if err != nil {
				t.Fatal(err)
			}
			into := ir.NewTensor(cs.in[0].DType, cs.shape)
			switch d := into.Data.(type) { // not the result anywhere
			case []float32:
				for i := range d {
					d[i] = 9
				}
			case []int64:
				for i := range d {
					d[i] = 9
				}
			case []bool:
				for i := range d {
					d[i] = i%2 == 0
				}
			}
			if err := s.RunInto(&Context{Opset: cs.opset}, n, cs.in, []*ir.Tensor{into}); err != nil {
				t.Fatal(err)
			}
			mvWant(t, into, cs.shape, cs.want)
		})
	}
}

// TestConcatParallel: a Concat large enough to be split between threads
// (concatParallelMin elements a thread) writes what one thread writes,
// every element of a dirty output, whether the threads split the outer
// blocks (a KV cache's 16 heads) or, with fewer blocks than threads, each
// block's elements; Run and RunInto alike.
func TestConcatParallel(t *testing.T) {
	cases := []struct {
		name   string
		axis   int64
		shapes [][]int
	}{
		{"kv cache: 16 heads, past then one token", 2, [][]int{{1, 16, 2047, 64}, {1, 16, 1, 64}}},
		{"one outer block", 0, [][]int{{400000}, {5}, {200000}}},
		{"three outer blocks, uneven", 1, [][]int{{3, 100000, 2}, {3, 7, 2}, {3, 1, 2}}},
		{"empty input among them", 1, [][]int{{2, 0, 4}, {2, 300000, 4}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var in []*ir.Tensor
			base := float32(0)
			for _, sh := range c.shapes {
				x := ir.NewTensor(ir.Float, sh)
				d := x.Float32s()
				for i := range d {
					d[i] = base + float32(i%4093)
				}
				base += 10000
				in = append(in, x)
			}
			n := mvNode("Concat", len(in), 1, mvInt("axis", c.axis))
			s, err := Lookup(DomainONNX, "Concat", 13)
			if err != nil {
				t.Fatal(err)
			}
			want, err := s.Run(&Context{Opset: 13, Threads: 1}, n, in)
			if err != nil {
				t.Fatal(err)
			}
			if shapeProd(want[0].Shape) < 2*concatParallelMin {
				t.Fatalf("%v elements: too few to split", shapeProd(want[0].Shape))
			}
			for _, threads := range []int{2, 3, 4} {
				got, err := s.Run(&Context{Opset: 13, Threads: threads}, n, in)
				if err != nil {
					t.Fatal(err)
				}
				into := ir.NewTensor(ir.Float, want[0].Shape)
				for i, d := 0, into.Float32s(); i < len(d); i++ {
					d[i] = -1 // not the result anywhere
				}
				if err := s.RunInto(&Context{Opset: 13, Threads: threads}, n, in, []*ir.Tensor{into}); err != nil {
					t.Fatal(err)
				}
				for _, out := range []*ir.Tensor{got[0], into} {
					w, g := want[0].Float32s(), out.Float32s()
					for i := range w {
						if g[i] != w[i] {
							t.Fatalf("%d threads: element %d is %g, one thread writes %g", threads, i, g[i], w[i])
						}
					}
				}
			}
			// The single-thread result itself against the inputs, block by block.
			axis := int(c.axis)
			outer, inner := shapeProd(want[0].Shape[:axis]), shapeProd(want[0].Shape[axis+1:])
			w := want[0].Float32s()
			at := 0
			for o := 0; o < outer; o++ {
				for _, x := range in {
					l := x.Shape[axis] * inner
					src := x.Float32s()[o*l : (o+1)*l]
					for i, v := range src {
						if w[at+i] != v {
							t.Fatalf("block %d: element %d is %g, want %g", o, at+i, w[at+i], v)
						}
					}
					at += l
				}
			}
		})
	}
}

func TestConcatErrors(t *testing.T) {
	a := mvF32([]int{2, 2}, 1, 2, 3, 4)
	mvErr(t, 13, mvNode("Concat", 2, 1, mvInt("axis", 0)), "does not match", a, mvF32([]int{1, 3}, 1, 2, 3))
	mvErr(t, 13, mvNode("Concat", 2, 1, mvInt("axis", 0)), "is int64, input 0 is float32", a, mvI64(1, 2))
	mvErr(t, 13, mvNode("Concat", 1, 1), "attribute axis is required", a)
	mvErr(t, 7, mvNode("Concat", 1, 1, mvInt("axis", -1)), "needs opset 11", a)
	mvErr(t, 13, mvNode("Concat", 1, 1, mvInt("axis", 2)), "out of range", a)
	_, err := mvInfer(t, 13, mvNode("Concat", 2, 1, mvInt("axis", 0)), Typed(ir.Float, mvShape("b", 3)), Typed(ir.Float, mvShape("c", 4)))
	if err == nil {
		t.Error("Infer should reject mismatched dims off the axis")
	}
}

func TestConcatInfer(t *testing.T) {
	n := mvNode("Concat", 2, 1, mvInt("axis", 1))
	// Symbolic lengths add up to a symbol naming the sum (a KV cache).
	out, err := mvInfer(t, 13, n, Typed(ir.Float, mvShape("b", "s", nil)), Typed(ir.Float, mvShape(nil, 5, 64)))
	if err != nil || out[0].Type.String() != "float32[b, s + 5, 64]" {
		t.Fatalf("got %v %v", out, err)
	}
	out, err = mvInfer(t, 13, n, Typed(ir.Float, mvShape("b", "seq", 8)), Typed(ir.Float, mvShape("b", "past", 8)))
	if err != nil || out[0].Type.String() != "float32[b, past + seq, 8]" {
		t.Fatalf("got %v %v", out, err)
	}
	out, err = mvInfer(t, 13, n, Typed(ir.Float, mvShape("b", nil, 8)), Typed(ir.Float, mvShape("b", "past", 8)))
	if err != nil || out[0].Type.String() != "float32[b, ?, 8]" {
		t.Fatalf("got %v %v", out, err)
	}
	out, err = mvInfer(t, 13, n, Typed(ir.Float, mvShape("b", 3)), Typed(ir.Float, mvShape("b", 5)))
	if err != nil || out[0].Type.String() != "float32[b, 8]" {
		t.Fatalf("got %v %v", out, err)
	}
	// Sym vectors and Const vectors concatenate.
	n0 := mvNode("Concat", 3, 1, mvInt("axis", 0))
	out, err = mvInfer(t, 13, n0, symValue(ir.Int64, mvShape("batch"), false), mvConst(mvI64(-1)), mvConst(mvI64(4, 16)))
	if err != nil || out[0].Sym.String() != "[batch, -1, 4, 16]" || out[0].Type.String() != "int64[4]" {
		t.Fatalf("got %v %v", out, err)
	}
	if out[0].Const != nil {
		t.Error("Const set for a symbolic vector")
	}
	// An input of known length but unknown contents leaves unknown elements.
	out, err = mvInfer(t, 13, n0, Typed(ir.Int64, mvShape(1)), symValue(ir.Int64, mvShape("seq"), false), mvConst(mvI64(8)))
	if err != nil || out[0].Sym.String() != "[?, seq, 8]" {
		t.Fatalf("got %v %v", out, err)
	}
	r, err := mvInfer(t, 13, mvNode("Reshape", 2, 1), Typed(ir.Float, mvShape("b", 4, "seq", 8)), out[0])
	if err != nil || r[0].Type.String() != "float32[?, seq, 8]" {
		t.Fatalf("reshape: %v %v", r, err)
	}
}

// TestConcatOpset1 covers Concat-1, whose axis defaults to 1.
func TestConcatOpset1(t *testing.T) {
	a := mvF32([]int{2, 2}, 1, 2, 3, 4)
	b := mvF32([]int{2, 1}, 5, 6)
	out := mvRun(t, 1, mvNode("Concat", 2, 1), a, b)
	mvWant(t, out[0], []int{2, 3}, []float32{1, 2, 5, 3, 4, 6})
	mvErr(t, 4, mvNode("Concat", 2, 1), "attribute axis is required", a, b)
}

func TestSymSum(t *testing.T) {
	sym := func(p string) ir.Dim { return ir.Dim{Param: p} }
	cases := []struct {
		in   []ir.Dim
		want string
	}{
		{[]ir.Dim{{Value: 3}, {Value: 4}}, "7"},
		{[]ir.Dim{sym("seq"), sym("past")}, "past + seq"},
		{[]ir.Dim{sym("past + seq"), {Value: 2}, sym("a"), sym("seq + 1")}, "a + past + seq + seq + 3"},
		{[]ir.Dim{sym("seq"), {Value: 0}}, "seq"},
		{[]ir.Dim{sym("seq"), ir.UnknownDim}, "?"},
		{[]ir.Dim{sym("seq"), SymLiteral(-1)}, "?"},
		{nil, "0"},
	}
	for _, c := range cases {
		if got := SymSum(c.in...).String(); got != c.want {
			t.Errorf("SymSum(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}
