package ops

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func einsumAttr(eq string) *ir.Attribute {
	return &ir.Attribute{Name: "equation", Type: ir.AttrString, String: []byte(eq)}
}

func TestEinsum(t *testing.T) {
	a23 := func() *ir.Tensor { return ewT([]int{2, 3}, []float64{0, 1, 2, 3, 4, 5}) }
	b34 := func() *ir.Tensor { return ewT([]int{3, 4}, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}) }
	ab := []float64{20, 23, 26, 29, 56, 68, 80, 92}
	f32 := func(v []float64) []float32 { return convertSlice[float64, float32](v) }
	i32 := func(v []float64) []int32 { return convertSlice[float64, int32](v) }
	b223 := func() *ir.Tensor { return ewT([]int{2, 2, 3}, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}) }
	eq := func(s string) []*ir.Attribute { return []*ir.Attribute{einsumAttr(s)} }
	ewRunCases(t, []ewCase{
		{name: "matmul float64", op: "Einsum", opset: 12, attrs: eq("ij,jk->ik"), in: []*ir.Tensor{a23(), b34()},
			want: ewT([]int{2, 4}, ab)},
		{name: "matmul implicit float32", op: "Einsum", attrs: eq("ij,jk"),
			in:   []*ir.Tensor{ewT([]int{2, 3}, f32(a23().Data.([]float64))), ewT([]int{3, 4}, f32(b34().Data.([]float64)))},
			want: ewT([]int{2, 4}, f32(ab))},
		{name: "matmul int32", op: "Einsum", attrs: eq("ij,jk->ik"),
			in:   []*ir.Tensor{ewT([]int{2, 3}, i32(a23().Data.([]float64))), ewT([]int{3, 4}, i32(b34().Data.([]float64)))},
			want: ewT([]int{2, 4}, i32(ab))},
		{name: "matmul spaces", op: "Einsum", attrs: eq(" i j , j k -> i k "), in: []*ir.Tensor{a23(), b34()},
			want: ewT([]int{2, 4}, ab)},
		{name: "transposed output", op: "Einsum", attrs: eq("ij,jk->ki"), in: []*ir.Tensor{a23(), b34()},
			want: ewT([]int{4, 2}, []float64{20, 56, 23, 68, 26, 80, 29, 92})},
		{name: "batched A·Bᵀ", op: "Einsum", attrs: eq("bij,bkj->bik"), in: []*ir.Tensor{b223(), b223()},
			want: ewT([]int{2, 2, 2}, []float32{5, 14, 14, 50, 149, 212, 212, 302})},
		{name: "transpose", op: "Einsum", attrs: eq("ij->ji"), in: []*ir.Tensor{a23()},
			want: ewT([]int{3, 2}, []float64{0, 3, 1, 4, 2, 5})},
		{name: "implicit sorts labels", op: "Einsum", attrs: eq("ji"), in: []*ir.Tensor{a23()},
			want: ewT([]int{3, 2}, []float64{0, 3, 1, 4, 2, 5})},
		{name: "implicit uppercase first", op: "Einsum", attrs: eq("aB"), in: []*ir.Tensor{a23()},
			want: ewT([]int{3, 2}, []float64{0, 3, 1, 4, 2, 5})},
		{name: "sum", op: "Einsum", attrs: eq("ij->i"), in: []*ir.Tensor{a23()}, want: ewT([]int{2}, []float64{3, 12})},
		{name: "total", op: "Einsum", attrs: eq("ij->"), in: []*ir.Tensor{a23()}, want: ir.Scalar(float64(15))},
		{name: "inner product", op: "Einsum", attrs: eq("i,i"),
			in: []*ir.Tensor{ewT([]int{3}, []float32{1, 2, 3}), ewT([]int{3}, []float32{4, 5, 6})}, want: ir.Scalar(float32(32))},
		{name: "outer product int64", op: "Einsum", attrs: eq("i,j"),
			in:   []*ir.Tensor{ewT([]int{2}, []int64{1, 2}), ewT([]int{3}, []int64{3, 4, 5})},
			want: ewT([]int{2, 3}, []int64{3, 4, 5, 6, 8, 10})},
		{name: "trace", op: "Einsum", attrs: eq("ii"), in: []*ir.Tensor{ewT([]int{3, 3}, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8})},
			want: ir.Scalar(float64(12))},
		{name: "diagonal", op: "Einsum", attrs: eq("ii->i"), in: []*ir.Tensor{ewT([]int{3, 3}, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8})},
			want: ewT([]int{3}, []float64{0, 4, 8})},
		{name: "batch diagonal", op: "Einsum", attrs: eq("...ii ->...i"),
			in:   []*ir.Tensor{ewT([]int{2, 2, 2}, []int16{1, 2, 3, 4, 5, 6, 7, 8})},
			want: ewT([]int{2, 2}, []int16{1, 4, 5, 8})},
		{name: "ellipsis contraction", op: "Einsum", attrs: eq("...i,i->..."),
			in: []*ir.Tensor{a23(), ewT([]int{3}, []float64{1, 2, 3})}, want: ewT([]int{2}, []float64{8, 26})},
		{name: "ellipsis broadcast", op: "Einsum", attrs: eq("...i,...i->..."),
			in:   []*ir.Tensor{ewT([]int{2, 1, 2}, []float64{1, 2, 3, 4}), ewT([]int{3, 2}, []float64{1, 0, 0, 1, 1, 1})},
			want: ewT([]int{2, 3}, []float64{1, 2, 3, 3, 4, 7})},
		{name: "size-1 label broadcasts", op: "Einsum", attrs: eq("ij,ij->ij"),
			in:   []*ir.Tensor{ewT([]int{1, 3}, []float64{1, 2, 3}), ewT([]int{2, 3}, []float64{1, 1, 1, 2, 2, 2})},
			want: ewT([]int{2, 3}, []float64{1, 2, 3, 2, 4, 6})},
		{name: "three operands", op: "Einsum", attrs: eq("i,ij,j->"),
			in:   []*ir.Tensor{ewT([]int{2}, []float64{1, -1}), a23(), ewT([]int{3}, []float64{1, 1, 1})},
			want: ir.Scalar(float64(-9))},
		{name: "scalar operand", op: "Einsum", attrs: eq(",i->i"),
			in: []*ir.Tensor{ir.Scalar(float64(2)), ewT([]int{2}, []float64{1, 3})}, want: ewT([]int{2}, []float64{2, 6})},
		{name: "uint8 wraps", op: "Einsum", attrs: eq("i,i->"),
			in: []*ir.Tensor{ewT([]int{2}, []uint8{200, 100}), ewT([]int{2}, []uint8{2, 1})}, want: ewT(nil, []uint8{244})},
		{name: "float16", op: "Einsum", attrs: eq("ij,jk->ik"),
			in: []*ir.Tensor{ewF16([]int{1, 2}, 0.5, 2), ewF16([]int{2, 1}, 4, -1)}, want: ewF16([]int{1, 1}, 0)},
		{name: "empty contraction", op: "Einsum", attrs: eq("ij,jk->ik"),
			in: []*ir.Tensor{ewT([]int{2, 0}, []float32{}), ewT([]int{0, 2}, []float32{})}, want: ewT([]int{2, 2}, []float32{0, 0, 0, 0})},
		{name: "not before opset 12", op: "Einsum", opset: 11, attrs: eq("i"), in: []*ir.Tensor{a23()}, wantErr: "unsupported opset version"},
		{name: "no equation", op: "Einsum", in: []*ir.Tensor{a23()}, wantErr: "attribute equation is required"},
		{name: "term count", op: "Einsum", attrs: eq("ij,jk"), in: []*ir.Tensor{a23()}, wantErr: "2 input terms, the node 1 inputs"},
		{name: "rank", op: "Einsum", attrs: eq("i->i"), in: []*ir.Tensor{a23()}, wantErr: "input 0 has rank 2, but its term has 1 labels"},
		{name: "ellipsis rank", op: "Einsum", attrs: eq("ijk...->..."), in: []*ir.Tensor{a23()}, wantErr: "fewer dims than the 3 labels"},
		{name: "sizes", op: "Einsum", attrs: eq("ij,jk"), in: []*ir.Tensor{a23(), a23()}, wantErr: "label j has sizes 3 and 2"},
		{name: "diagonal sizes", op: "Einsum", attrs: eq("ii"), in: []*ir.Tensor{a23()}, wantErr: "label i of input 0 has sizes 2 and 3"},
		{name: "digit label", op: "Einsum", attrs: eq("i1"), in: []*ir.Tensor{a23()}, wantErr: "labels are letters"},
		{name: "lone dot", op: "Einsum", attrs: eq("i.j"), in: []*ir.Tensor{a23()}, wantErr: "'.' outside an ellipsis"},
		{name: "two ellipses", op: "Einsum", attrs: eq("......"), in: []*ir.Tensor{a23()}, wantErr: "more than one ellipsis"},
		{name: "two arrows", op: "Einsum", attrs: eq("ij->ij->ij"), in: []*ir.Tensor{a23()}, wantErr: "more than one \"->\""},
		{name: "unknown output label", op: "Einsum", attrs: eq("ij->ik"), in: []*ir.Tensor{a23()}, wantErr: "output label k is in no input term"},
		{name: "repeated output label", op: "Einsum", attrs: eq("ij->ii"), in: []*ir.Tensor{a23()}, wantErr: "output label i appears twice"},
		{name: "output ellipsis only", op: "Einsum", attrs: eq("ij->...ij"), in: []*ir.Tensor{a23()}, wantErr: "no input term does"},
		{name: "ellipsis dropped", op: "Einsum", attrs: eq("...j->j"), in: []*ir.Tensor{a23()}, wantErr: "which the output must keep"},
		{name: "types differ", op: "Einsum", attrs: eq("i,i"), in: []*ir.Tensor{ewT([]int{1}, []float32{1}), ewT([]int{1}, []float64{1})},
			wantErr: "different element types"},
		{name: "bool refused", op: "Einsum", attrs: eq("i"), in: []*ir.Tensor{ewT([]int{1}, []bool{true})}, wantErr: "element type bool"},
	})
}

func TestEinsumInfer(t *testing.T) {
	eq := func(s string) []*ir.Attribute { return []*ir.Attribute{einsumAttr(s)} }
	ewInferCases(t, []ewInferCase{
		{name: "attention scores", op: "Einsum", attrs: eq("bhqd,bhkd->bhqk"),
			in:   []Value{ewTyped(ir.Float, "b", 8, "q", 64), ewTyped(ir.Float, "b", 8, "k", 64)},
			want: ewTyped(ir.Float, "b", 8, "q", "k")},
		{name: "ellipsis broadcast", op: "Einsum", attrs: eq("...ij,...jk"),
			in:   []Value{ewTyped(ir.Double, "n", 1, 2, 3), ewTyped(ir.Double, 5, 3, 4)},
			want: ewTyped(ir.Double, "n", 5, 2, 4)},
		{name: "size-1 label", op: "Einsum", attrs: eq("ij,ij->ij"), in: []Value{ewTyped(ir.Int32, 1, 3), ewTyped(ir.Int32, "m", 3)},
			want: ewTyped(ir.Int32, "m", 3)},
		{name: "scalar", op: "Einsum", attrs: eq("i,i"), in: []Value{ewTyped(ir.Float, "n"), ewTyped(ir.Float, "n")}, want: ewTyped(ir.Float)},
		{name: "unknown rank without ellipsis", op: "Einsum", attrs: eq("ij,jk->ik"),
			in: []Value{UnknownRank(ir.Float), ewTyped(ir.Float, 3, 4)}, want: Typed(ir.Float, ir.Shape{ir.UnknownDim, {Value: 4}})},
		{name: "unknown rank with ellipsis", op: "Einsum", attrs: eq("...i->..."), in: []Value{UnknownRank(ir.Float)}, want: UnknownRank(ir.Float)},
		{name: "unknown rank, output without ellipsis", op: "Einsum", attrs: eq("...i,i->i"),
			in: []Value{UnknownRank(ir.Float), ewTyped(ir.Float, 7)}, want: ewTyped(ir.Float, 7)},
		{name: "sizes clash", op: "Einsum", attrs: eq("ij,jk"), in: []Value{ewTyped(ir.Float, 2, 3), ewTyped(ir.Float, 4, 5)},
			wantErr: "label j has dims 3 and 4"},
		{name: "rank", op: "Einsum", attrs: eq("ij"), in: []Value{ewTyped(ir.Float, 2)}, wantErr: "input 0 has rank 1"},
		{name: "bad equation", op: "Einsum", attrs: eq("i-j"), in: []Value{ewTyped(ir.Float, 2)}, wantErr: "labels are letters"},
	})
}

// TestEinsumGemm checks which plans take the batched-GEMM kernel and that
// it agrees with the reference loop, for operands in place and transposed.
func TestEinsumGemm(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, c := range []struct {
		eq     string
		shapes [][]int
		gemm   bool
	}{
		{"bhqd,bhkd->bhqk", [][]int{{2, 3, 5, 4}, {2, 3, 6, 4}}, true},
		{"bhqk,bhkd->bhqd", [][]int{{2, 3, 5, 6}, {2, 3, 6, 4}}, true},
		{"bij,bjk->bik", [][]int{{5, 2, 3}, {5, 3, 4}}, true},
		{"bji,bjk->bik", [][]int{{5, 3, 2}, {5, 3, 4}}, true},
		{"bhqd,bkhd->bhqk", [][]int{{2, 3, 5, 4}, {2, 6, 3, 4}}, true}, // B transposed first
		{"bqhd,bkhd->bhqk", [][]int{{2, 5, 3, 4}, {2, 6, 3, 4}}, true}, // A and B transposed first
		{"bij,bjk->kbi", [][]int{{2, 3, 4}, {2, 4, 5}}, true},          // output permuted
		{"i,j->ij", [][]int{{3}, {4}}, true},
		{"ij,ij->", [][]int{{3, 4}, {3, 4}}, true},
		{"ij,jk->ik", [][]int{{2, 1}, {3, 4}}, false}, // j broadcasts
		{"ii,ij->j", [][]int{{3, 3}, {3, 2}}, false},
		{"ij,j->i", [][]int{{2, 4}, {4}}, true},
		{"ij,j->", [][]int{{2, 4}, {4}}, false},  // i summed within one input
		{"ij,k->i", [][]int{{2, 4}, {3}}, false}, // k summed within one input
		{"...ij,...jk", [][]int{{2, 1, 3, 4}, {5, 4, 2}}, false},
	} {
		t.Run(c.eq, func(t *testing.T) {
			eq, err := parseEinsum(c.eq)
			if err != nil {
				t.Fatal(err)
			}
			p, err := planEinsum(eq, c.shapes)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := p.gemm(); ok != c.gemm {
				t.Fatalf("gemm() = %v, want %v", ok, c.gemm)
			}
			in := make([]*ir.Tensor, len(c.shapes))
			ref := make([][]float64, len(c.shapes))
			for k, s := range c.shapes {
				in[k] = cRand(r, s...)
				ref[k] = convertSlice[float32, float64](in[k].Float32s())
			}
			want := make([]float64, ir.NumElements(p.outShape))
			einsumLoop(p, ref, want)
			out, err := cRun(t, 12, cNode("Einsum", len(in), 1, einsumAttr(c.eq)), in...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out[0].Shape, p.outShape) {
				t.Fatalf("shape %v, want %v", out[0].Shape, p.outShape)
			}
			for i, g := range out[0].Float32s() {
				if math.Abs(float64(g)-want[i]) > 1e-5*(1+math.Abs(want[i])) {
					t.Fatalf("element %d: got %v, want %v", i, g, want[i])
				}
			}
			// The output-into form writes every element of a dirty buffer,
			// and does not rely on the contents of scratch memory.
			s, _ := Lookup(DomainONNX, "Einsum", 12)
			nanFilled := func(n int) []float32 {
				f := make([]float32, n)
				for i := range f {
					f[i] = float32(math.NaN())
				}
				return f
			}
			dirty := &ir.Tensor{DType: ir.Float, Shape: p.outShape, Data: nanFilled(int(ir.NumElements(p.outShape)))}
			ctx := &Context{Opset: 12, Threads: 2, Scratch: nanFilled}
			if err := s.RunInto(ctx, cNode("Einsum", len(in), 1, einsumAttr(c.eq)), in, []*ir.Tensor{dirty}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(dirty.Float32s(), out[0].Float32s()) {
				t.Fatalf("RunInto %v, Run %v", dirty.Float32s(), out[0].Float32s())
			}
		})
	}
}

func TestEinsumLabelName(t *testing.T) {
	var got []string
	for _, id := range []int{0, 25, 26, 51, einsumEllipsisBase, einsumEllipsis} {
		got = append(got, einsumLabelName(id))
	}
	if s := strings.Join(got, " "); s != "A Z a z ... ..." {
		t.Fatalf("label names %q", s)
	}
}

func TestEinsumLabels(t *testing.T) {
	node := func(eq string) *ir.Node {
		return &ir.Node{Name: "e", OpType: "Einsum", Attrs: []*ir.Attribute{{Name: "equation", Type: ir.AttrString, String: []byte(eq)}}}
	}
	label := func(c byte) int { return 26 + int(c-'a') }
	b, h, q, k, d := label('b'), label('h'), label('q'), label('k'), label('d')
	e0, e1 := einsumEllipsisBase, einsumEllipsisBase+1
	cases := []struct {
		eq      string
		ranks   []int
		in      [][]int
		out     []int
		wantErr string
	}{
		{"bqhd,bkhd->bhqk", []int{4, 4}, [][]int{{b, q, h, d}, {b, k, h, d}}, []int{b, h, q, k}, ""},
		{"...qd, ...kd -> ...qk", []int{4, 3}, [][]int{{e0, e1, q, d}, {e1, k, d}}, []int{e0, e1, q, k}, ""},
		{"hqd,hkd", []int{3, 3}, [][]int{{h, q, d}, {h, k, d}}, []int{k, q}, ""},
		{"bqhd,bkhd->bhqk", []int{3, 4}, nil, nil, "input 0 has rank 3"},
		{"bq,bk->", []int{2, 2}, [][]int{{b, q}, {b, k}}, []int{}, ""},
	}
	for _, c := range cases {
		in, out, err := EinsumLabels(node(c.eq), c.ranks)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v, want %q", c.eq, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.eq, err)
			continue
		}
		if !slices.EqualFunc(in, c.in, slices.Equal) || !slices.Equal(out, c.out) {
			t.Errorf("%s: labels %v -> %v, want %v -> %v", c.eq, in, out, c.in, c.out)
		}
	}
	if _, _, err := EinsumLabels(&ir.Node{Name: "e", OpType: "Einsum"}, []int{2, 2}); err == nil {
		t.Error("no equation: no error")
	}
}
