package ops

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// naiveMatMul is numpy matmul on float64 by index arithmetic alone.
func naiveMatMul(t *testing.T, a []float64, as []int, b []float64, bs []int) ([]float64, []int) {
	pa, pb := append([]int{}, as...), append([]int{}, bs...)
	if len(as) == 1 {
		pa = []int{1, as[0]}
	}
	if len(bs) == 1 {
		pb = []int{bs[0], 1}
	}
	m, k, n := pa[len(pa)-2], pa[len(pa)-1], pb[len(pb)-1]
	batch, err := BroadcastShapes(pa[:len(pa)-2], pb[:len(pb)-2])
	if err != nil {
		t.Fatal(err)
	}
	nb := int(ir.NumElements(batch))
	out := make([]float64, nb*m*n)
	// matIndex maps a batch index of the output onto an operand's batch.
	matIndex := func(bi int, ob []int) int {
		idx := 0
		stride := 1
		rem := bi
		coords := make([]int, len(batch))
		for d := len(batch) - 1; d >= 0; d-- {
			coords[d] = rem % batch[d]
			rem /= batch[d]
		}
		for d := len(ob) - 1; d >= 0; d-- {
			c := coords[len(batch)-len(ob)+d]
			if ob[d] == 1 {
				c = 0
			}
			idx += c * stride
			stride *= ob[d]
		}
		return idx
	}
	for bi := 0; bi < nb; bi++ {
		ai, bj := matIndex(bi, pa[:len(pa)-2]), matIndex(bi, pb[:len(pb)-2])
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for p := 0; p < k; p++ {
					s += a[ai*m*k+i*k+p] * b[bj*k*n+p*n+j]
				}
				out[bi*m*n+i*n+j] = s
			}
		}
	}
	shape := append([]int{}, batch...)
	if len(as) > 1 {
		shape = append(shape, m)
	}
	if len(bs) > 1 {
		shape = append(shape, n)
	}
	return out, shape
}

func TestMatMulByHand(t *testing.T) {
	a := cF32([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	b := cF32([]int{3, 2}, 7, 8, 9, 10, 11, 12)
	tests := []struct {
		name      string
		a, b      *ir.Tensor
		wantShape []int
		want      []float64
	}{
		{"2x3 by 3x2", a, b, []int{2, 2}, []float64{58, 64, 139, 154}},
		{"vector by matrix", cF32([]int{3}, 1, 0, -1), b, []int{2}, []float64{-4, -4}},
		{"matrix by vector", a, cF32([]int{3}, 1, 0, -1), []int{2}, []float64{-2, -2}},
		{"vector by vector", cF32([]int{3}, 1, 2, 3), cF32([]int{3}, 4, 5, 6), []int{}, []float64{32}},
		{"batched vector", cF32([]int{2}, 1, 1), cF32([]int{2, 2, 1}, 1, 2, 3, 4), []int{2, 1}, []float64{3, 7}},
		{"int32", ir.FromSlice([]int{2, 2}, []int32{1, 2, 3, 4}), ir.FromSlice([]int{2, 2}, []int32{5, 6, 7, 8}), []int{2, 2}, []float64{19, 22, 43, 50}},
		{"int64", ir.FromSlice([]int{1, 2}, []int64{-1, 2}), ir.FromSlice([]int{2, 1}, []int64{3, 4}), []int{1, 1}, []float64{5}},
		{"float64", ir.FromSlice([]int{1, 3}, []float64{1, 2, 3}), ir.FromSlice([]int{3, 1}, []float64{0.5, 0.25, 0.125}), []int{1, 1}, []float64{1.375}},
		{"float16", &ir.Tensor{DType: ir.Float16, Shape: []int{1, 2}, Data: float32sToHalf([]float32{1.5, 2})},
			&ir.Tensor{DType: ir.Float16, Shape: []int{2, 1}, Data: float32sToHalf([]float32{2, -0.25})}, []int{1, 1}, []float64{2.5}},
		{"zero inner dim", ir.NewTensor(ir.Float, []int{2, 0}), ir.NewTensor(ir.Float, []int{0, 3}), []int{2, 3}, []float64{0, 0, 0, 0, 0, 0}},
		{"zero rows", ir.NewTensor(ir.Float, []int{0, 4}), ir.NewTensor(ir.Float, []int{4, 3}), []int{0, 3}, nil},
		{"zero batch", ir.NewTensor(ir.Float, []int{1 << 40, 0, 4}), ir.NewTensor(ir.Float, []int{4, 3}), []int{1 << 40, 0, 3}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, opset := range []int{9, 13} {
				out, err := cRun(t, opset, cNode("MatMul", 2, 1), tc.a, tc.b)
				if err != nil {
					t.Fatal(err)
				}
				cClose(t, tc.name, out[0], tc.wantShape, tc.want, 1e-6)
			}
		})
	}
}

func TestMatMulBroadcastVsNaive(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	tests := []struct{ a, b []int }{
		{[]int{2, 1, 3, 4}, []int{5, 4, 6}},
		{[]int{2, 3, 5, 8}, []int{2, 3, 8, 5}}, // [B,H,S,D] x [B,H,D,S]
		{[]int{2, 7, 16}, []int{16, 9}},        // folded into one GEMM
		{[]int{3, 70}, []int{4, 70, 33}},       // shared left matrix
		{[]int{1, 2, 3, 4}, []int{1, 2, 4, 3}},
		{[]int{4, 1, 5, 2}, []int{1, 3, 2, 6}},
		{[]int{65}, []int{3, 65, 20}},
		{[]int{2, 9, 130}, []int{130}},
	}
	for _, tc := range tests {
		a, b := cRand(r, tc.a...), cRand(r, tc.b...)
		want, shape := naiveMatMul(t, cF64s(a.Float32s()), tc.a, cF64s(b.Float32s()), tc.b)
		out, err := cRun(t, 13, cNode("MatMul", 2, 1), a, b)
		if err != nil {
			t.Fatalf("%v x %v: %v", tc.a, tc.b, err)
		}
		cClose(t, ir.ShapeString(tc.a)+" x "+ir.ShapeString(tc.b), out[0], shape, want, 1e-5)
	}
}

func TestMatMulErrors(t *testing.T) {
	tests := []struct {
		name string
		a, b *ir.Tensor
		want string
	}{
		{"inner", ir.NewTensor(ir.Float, []int{2, 3}), ir.NewTensor(ir.Float, []int{4, 5}), "MatMul inner dimensions differ: [2 3] x [4 5]"},
		{"batch", ir.NewTensor(ir.Float, []int{2, 2, 3}), ir.NewTensor(ir.Float, []int{3, 3, 5}), "batch dimensions do not broadcast"},
		{"scalar", ir.NewTensor(ir.Float, nil), ir.NewTensor(ir.Float, []int{3}), "scalars"},
		{"dtypes", ir.NewTensor(ir.Float, []int{2, 2}), ir.NewTensor(ir.Double, []int{2, 2}), "different element types"},
		{"huge output", ir.NewTensor(ir.Float, []int{1 << 20, 0}), ir.NewTensor(ir.Float, []int{0, 1 << 20}), "too many elements"},
		{"bad data", &ir.Tensor{DType: ir.Float, Shape: []int{2, 2}, Data: []float32{1}}, ir.NewTensor(ir.Float, []int{2, 2}), "needs 4 elements"},
	}
	s, _ := Lookup("", "MatMul", 13)
	for _, tc := range tests {
		_, err := s.Run(&Context{Opset: 13}, cNode("MatMul", 2, 1), []*ir.Tensor{tc.a, tc.b})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `node "n" (MatMul)`) {
			t.Errorf("%s: Run error %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := s.Run(&Context{Opset: 13}, cNode("MatMul", 2, 1), []*ir.Tensor{ir.NewTensor(ir.Float, []int{2}), nil}); err == nil {
		t.Error("Run accepted a missing input")
	}
}

func sym(dims ...any) ir.Shape {
	s := ir.Shape{}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			s = append(s, ir.Dim{Value: int64(v)})
		case string:
			if v == "?" {
				s = append(s, ir.UnknownDim)
			} else {
				s = append(s, ir.Dim{Param: v})
			}
		}
	}
	return s
}

func TestMatMulInferSymbolic(t *testing.T) {
	tests := []struct {
		name    string
		a, b    ir.Shape
		want    string
		wantErr string
	}{
		{"projection", sym("batch", "seq", 64), sym(64, 192), "float32[batch, seq, 192]", ""},
		{"scores", sym("b", 12, "s", 64), sym("b", 12, 64, "s"), "float32[b, 12, s, s]", ""},
		{"broadcast batch", sym(1, "h", "s", 64), sym("b", 1, 64, "t"), "float32[b, h, s, t]", ""},
		{"unknown inner", sym("?", "?"), sym(7, 3), "float32[?, 3]", ""},
		{"vector", sym("k"), sym("k", "n"), "float32[n]", ""},
		{"inner mismatch", sym(2, 3), sym(4, 5), "", "MatMul inner dimensions differ: [2 3] x [4 5]"},
		{"symbolic mismatch", sym("b", 3), sym(4, 5), "", "MatMul inner dimensions differ: [b, 3] x [4 5]"},
		{"batch mismatch", sym(2, 3, 4), sym(5, 4, 3), "", "batch dimensions do not broadcast"},
	}
	s, _ := Lookup("", "MatMul", 17)
	for _, tc := range tests {
		out, err := s.Infer(cNode("MatMul", 2, 1), 17, []Value{Typed(ir.Float, tc.a), Typed(ir.Float, tc.b)})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || out[0].Type.String() != tc.want {
			t.Errorf("%s: got %v, %v; want %s", tc.name, out, err, tc.want)
		}
	}
	out, err := s.Infer(cNode("MatMul", 2, 1), 17, []Value{UnknownRank(ir.Float), Typed(ir.Float, sym(2, 2))})
	if err != nil || out[0].Type.RankKnown {
		t.Errorf("unknown rank: got %v, %v", out, err)
	}
}

// naiveGemmRef computes alpha*op(A)*op(B) + beta*C (C broadcast) in float64.
func naiveGemmRef(a []float64, as []int, b []float64, bs []int, c []float64, cs []int, alpha, beta float64, ta, tb bool) ([]float64, []int) {
	m, k := as[0], as[1]
	if ta {
		m, k = k, m
	}
	n := bs[1]
	if tb {
		n = bs[0]
	}
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float64
				if ta {
					av = a[p*as[1]+i]
				} else {
					av = a[i*as[1]+p]
				}
				if tb {
					bv = b[j*bs[1]+p]
				} else {
					bv = b[p*bs[1]+j]
				}
				s += av * bv
			}
			v := alpha * s
			if c != nil {
				cs2 := padOnes(cs, 2)
				ci, cj := i, j
				if cs2[0] == 1 {
					ci = 0
				}
				if cs2[1] == 1 {
					cj = 0
				}
				v += beta * c[ci*cs2[1]+cj]
			}
			out[i*n+j] = v
		}
	}
	return out, []int{m, n}
}

func TestGemmAllFlagCombos(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	const m, k, n = 5, 7, 4
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			for _, cShape := range [][]int{nil, {}, {1}, {n}, {1, n}, {m, 1}, {m, n}} {
				for _, ab := range [][2]float32{{1, 1}, {0.25, 0.35}, {-2, 0}} {
					as, bs := []int{m, k}, []int{k, n}
					if ta {
						as = []int{k, m}
					}
					if tb {
						bs = []int{n, k}
					}
					a, b := cRand(r, as...), cRand(r, bs...)
					in := []*ir.Tensor{a, b}
					var cv []float64
					if cShape != nil {
						c := cRand(r, cShape...)
						in = append(in, c)
						cv = cF64s(c.Float32s())
					}
					node := cNode("Gemm", len(in), 1, cAttrFloat("alpha", ab[0]), cAttrFloat("beta", ab[1]),
						cAttrInt("transA", b2i(ta)), cAttrInt("transB", b2i(tb)))
					out, err := cRun(t, 13, node, in...)
					if err != nil {
						t.Fatal(err)
					}
					want, shape := naiveGemmRef(cF64s(a.Float32s()), as, cF64s(b.Float32s()), bs, cv, cShape, float64(ab[0]), float64(ab[1]), ta, tb)
					cClose(t, "Gemm", out[0], shape, want, 1e-5)
				}
			}
		}
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestGemmTypesAndErrors(t *testing.T) {
	a := ir.FromSlice([]int{2, 2}, []float64{1, 2, 3, 4})
	b := ir.FromSlice([]int{2, 2}, []float64{1, 0, 0, 1})
	c := ir.FromSlice([]int{2}, []float64{10, 20})
	out, err := cRun(t, 9, cNode("Gemm", 3, 1, cAttrInt("transA", 1)), a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "float64 transA", out[0], []int{2, 2}, []float64{11, 23, 12, 24}, 0)

	ai := ir.FromSlice([]int{1, 2}, []int64{2, 3})
	bi := ir.FromSlice([]int{2, 1}, []int64{4, 5})
	out, err = cRun(t, 13, cNode("Gemm", 2, 1, cAttrFloat("alpha", 2)), ai, bi)
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "int64", out[0], []int{1, 1}, []float64{46}, 0)

	errs := []struct {
		name  string
		opset int
		in    []*ir.Tensor
		attrs []*ir.Attribute
		want  string
	}{
		{"C required before 11", 9, []*ir.Tensor{cRand(rand.New(rand.NewSource(1)), 2, 2), cRand(rand.New(rand.NewSource(1)), 2, 2)}, nil, "takes 3 inputs"},
		{"inner", 13, []*ir.Tensor{ir.NewTensor(ir.Float, []int{2, 3}), ir.NewTensor(ir.Float, []int{2, 3})}, nil, "Gemm inner dimensions differ"},
		{"inner with transB ok", 13, []*ir.Tensor{ir.NewTensor(ir.Float, []int{2, 3}), ir.NewTensor(ir.Float, []int{2, 3})}, []*ir.Attribute{cAttrInt("transB", 1)}, ""},
		{"rank", 13, []*ir.Tensor{ir.NewTensor(ir.Float, []int{2, 3, 1}), ir.NewTensor(ir.Float, []int{3, 3})}, nil, "must be 2-D"},
		{"C shape", 13, []*ir.Tensor{ir.NewTensor(ir.Float, []int{2, 3}), ir.NewTensor(ir.Float, []int{3, 4}), ir.NewTensor(ir.Float, []int{3})}, nil, "does not broadcast"},
	}
	for _, tc := range errs {
		_, err := cRun(t, tc.opset, cNode("Gemm", len(tc.in), 1, tc.attrs...), tc.in...)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestGemmInferSymbolic(t *testing.T) {
	s, _ := Lookup("", "Gemm", 13)
	out, err := s.Infer(cNode("Gemm", 3, 1, cAttrInt("transB", 1)), 13,
		[]Value{Typed(ir.Float, sym("n", 768)), Typed(ir.Float, sym(2304, 768)), Typed(ir.Float, sym(2304))})
	if err != nil || out[0].Type.String() != "float32[n, 2304]" {
		t.Fatalf("got %v, %v", out, err)
	}
}

// BenchmarkMatMulScores is the attention scores product [1,12,S,64] x
// [1,12,64,S] at S=512, and the projection [1,S,768] x [768,768].
func BenchmarkMatMulScores(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	for _, c := range []struct {
		name string
		a, w []int
	}{{"scores", []int{1, 12, 512, 64}, []int{1, 12, 64, 512}}, {"projection", []int{1, 512, 768}, []int{768, 768}}} {
		a, w := cRand(r, c.a...), cRand(r, c.w...)
		s, _ := Lookup("", "MatMul", 17)
		n := cNode("MatMul", 2, 1)
		p, _ := planMatMul(c.a, c.w)
		flops := 2 * float64(p.batches) * float64(p.m) * float64(p.n) * float64(p.k)
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := s.Run(&Context{Opset: 17, Threads: 2}, n, []*ir.Tensor{a, w}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// stridedCopyOf materializes a view of t's data as a new tensor.
func stridedCopyOf(t *ir.Tensor, v View) *ir.Tensor {
	out := ir.NewTensor(ir.Float, v.Shape)
	idx := make([]int, len(v.Shape))
	for i := range out.Float32s() {
		off := v.Offset
		for k, x := range idx {
			off += x * v.Strides[k]
		}
		out.Float32s()[i] = t.Float32s()[off]
		for k := len(idx) - 1; k >= 0; k-- {
			idx[k]++
			if idx[k] < v.Shape[k] {
				break
			}
			idx[k] = 0
		}
	}
	return out
}

func fusedMatMulNode(attrs ...*ir.Attribute) *ir.Node {
	return &ir.Node{Name: "fmm", OpType: FusedMatMulOp, Domain: DomainAttnrun, Attrs: attrs}
}

// TestFusedMatMul checks FusedMatMul against MatMul (+ bias) on the
// materialized views: transposed operands (GEMM flags), head-split
// operands (offsets and strides), a broadcast batch, the one-GEMM folding
// of a shared B, and a view with no unit stride (gathered).
func TestFusedMatMul(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	x := randTensor(r, 2, 5, 24)    // [B, S, 3·H·D] with H=2, D=4
	w := randTensor(r, 24, 7)       // a weight
	wt := randTensor(r, 7, 24)      // a weight stored transposed
	bias := randTensor(r, 7)        // [N]
	bias3 := randTensor(r, 1, 1, 7) // [1, 1, N]
	sq := randTensor(r, 6, 6)
	head := func(which int) View { // [B, H, S, D]
		return View{Offset: which * 8, Shape: []int{2, 2, 5, 4}, Strides: []int{120, 4, 24, 1}}
	}
	headT := func(which int) View { // [B, H, D, S]
		v, _ := head(which).Transpose([]int{0, 1, 3, 2})
		return v
	}
	cases := []struct {
		name   string
		a, b   *ir.Tensor
		av, bv *View
		bias   *ir.Tensor
	}{
		{"plain with bias (folded rows)", x, w, nil, nil, bias},
		{"bias [1,1,N]", x, w, nil, nil, bias3},
		{"B transposed", x, wt, nil, &View{Shape: []int{24, 7}, Strides: []int{1, 24}}, bias},
		{"scores from head views", x, x, viewPtr(head(0)), viewPtr(headT(1)), nil},
		{"A transposed, broadcast B", x, randTensor(r, 5, 3), &View{Shape: []int{2, 24, 5}, Strides: []int{120, 1, 24}}, nil, nil},
		{"no unit stride: gathered", sq, sq, &View{Shape: []int{3, 3}, Strides: []int{12, 2}}, &View{Offset: 1, Shape: []int{3, 2}, Strides: []int{2, 6}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var attrs []*ir.Attribute
			a, b := c.a, c.b
			if c.av != nil {
				attrs = append(attrs, intsAttr("a_view", c.av.Ints()))
				a = stridedCopyOf(c.a, *c.av)
			}
			if c.bv != nil {
				attrs = append(attrs, intsAttr("b_view", c.bv.Ints()))
				b = stridedCopyOf(c.b, *c.bv)
			}
			want, err := runMatMul(&Context{Threads: 1}, &ir.Node{Name: "mm", OpType: "MatMul"}, []*ir.Tensor{a, b})
			if err != nil {
				t.Fatal(err)
			}
			in := []*ir.Tensor{c.a, c.b}
			if c.bias != nil {
				in = append(in, c.bias)
				n := c.bias.Len()
				for i, v := range want[0].Float32s() {
					want[0].Float32s()[i] = v + c.bias.Float32s()[i%n]
				}
			}
			n := fusedMatMulNode(attrs...)
			vals := make([]Value, len(in))
			for i, x := range in {
				vals[i] = Value{Type: Known(ir.Float, x.Shape)}
			}
			inf, err := inferFusedMatMul(n, 1, vals)
			if err != nil || !SameShape(mustConcrete(t, inf[0].Type.Shape), want[0].Shape) {
				t.Fatalf("infer %v, %v; want %v", inf, err, want[0].Shape)
			}
			for _, threads := range []int{1, 2} {
				out := ir.NewTensor(ir.Float, want[0].Shape)
				for i := range out.Float32s() {
					out.Float32s()[i] = 1e30 // garbage to overwrite
				}
				if err := runFusedMatMulInto(&Context{Threads: threads}, n, in, []*ir.Tensor{out}); err != nil {
					t.Fatal(err)
				}
				for i, g := range out.Float32s() {
					if !closeF32(g, want[0].Float32s()[i]) {
						t.Fatalf("threads %d: element %d = %g, want %g", threads, i, g, want[0].Float32s()[i])
					}
				}
			}
		})
	}
}

func viewPtr(v View) *View { return &v }

func TestFusedMatMulErrors(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	a, b := randTensor(r, 2, 3), randTensor(r, 3, 4)
	cases := []struct {
		name string
		n    *ir.Node
		in   []*ir.Tensor
		want string
	}{
		{"inner dims", fusedMatMulNode(), []*ir.Tensor{a, a}, "inner dimensions differ"},
		{"bias not N", fusedMatMulNode(), []*ir.Tensor{a, b, randTensor(r, 3)}, "bias"},
		{"view past data", fusedMatMulNode(intsAttr("a_view", View{Offset: 4, Shape: []int{2, 3}, Strides: []int{3, 1}}.Ints())), []*ir.Tensor{a, b}, "does not fit"},
		{"int input", fusedMatMulNode(), []*ir.Tensor{ir.FromSlice([]int{1, 1}, []int64{1}), b}, "float32"},
		{"negative column_stripe", fusedMatMulNode(&ir.Attribute{Name: ColumnStripeAttr, Type: ir.AttrInt, Int: -4}), []*ir.Tensor{a, b}, `node "fmm" (com.attnrun:FusedMatMul): column_stripe -4 is negative`},
		{"float column_stripe", fusedMatMulNode(&ir.Attribute{Name: ColumnStripeAttr, Type: ir.AttrFloat, Float: 4}), []*ir.Tensor{a, b}, "want int"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runFusedMatMul(&Context{Threads: 1}, c.n, c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// halfTensor rounds a float32 tensor to float16.
func halfTensor(t *ir.Tensor) *ir.Tensor {
	return &ir.Tensor{DType: ir.Float16, Shape: t.Shape, Data: float32sToHalf(t.Float32s())}
}

// TestRunIntoMatchesRun runs the output-into forms of MatMul, Gemm,
// Softmax, Transpose, Add and Div on buffers full of garbage and compares
// with Run.
func TestRunIntoMatchesRun(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	x, y := randTensor(r, 2, 3, 4), randTensor(r, 2, 4, 5)
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{2, 0, 1}}
	cases := []struct {
		op    string
		attrs []*ir.Attribute
		in    []*ir.Tensor
	}{
		{"MatMul", nil, []*ir.Tensor{x, y}},
		{"MatMul", nil, []*ir.Tensor{ir.FromSlice([]int{2, 2}, []int64{1, 2, 3, 4}), ir.FromSlice([]int{2, 1}, []int64{5, 6})}},
		{"Softmax", nil, []*ir.Tensor{x}},
		{"Transpose", []*ir.Attribute{perm}, []*ir.Tensor{x}},
		{"Add", nil, []*ir.Tensor{x, randTensor(r, 4)}},
		{"Div", nil, []*ir.Tensor{x, ir.Scalar(float32(2))}},
		// Gemm: no C (beta is then 0: the garbage must not leak in),
		// transposes with a broadcast C, alpha 0, and the other dtypes.
		{"Gemm", nil, []*ir.Tensor{randTensor(r, 3, 4), randTensor(r, 4, 5)}},
		{"Gemm", []*ir.Attribute{iAttr("transA", 1), iAttr("transB", 1), fAttr("alpha", 0.5), fAttr("beta", 2)},
			[]*ir.Tensor{randTensor(r, 4, 3), randTensor(r, 5, 4), randTensor(r, 5)}},
		{"Gemm", []*ir.Attribute{fAttr("alpha", 0)}, []*ir.Tensor{randTensor(r, 3, 4), randTensor(r, 4, 5), randTensor(r, 3, 1)}},
		{"Gemm", nil, []*ir.Tensor{ir.FromSlice([]int{2, 2}, []int64{1, 2, 3, 4}), ir.FromSlice([]int{2, 1}, []int64{5, 6})}},
		{"Gemm", []*ir.Attribute{iAttr("transB", 1)}, []*ir.Tensor{ir.FromSlice([]int{1, 2}, []float64{1, 2}), ir.FromSlice([]int{3, 2}, []float64{1, 2, 3, 4, 5, 6})}},
		{"Gemm", nil, []*ir.Tensor{halfTensor(randTensor(r, 2, 3)), halfTensor(randTensor(r, 3, 2)), halfTensor(randTensor(r, 2))}},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			s, err := Lookup("", c.op, 17)
			if err != nil {
				t.Fatal(err)
			}
			if s.RunInto == nil {
				t.Fatalf("%s has no RunInto", c.op)
			}
			n := &ir.Node{Name: "n", OpType: c.op, Attrs: c.attrs}
			ctx := &Context{Opset: 17, Threads: 2}
			want, err := s.Run(ctx, n, c.in)
			if err != nil {
				t.Fatal(err)
			}
			out := ir.NewTensor(want[0].DType, want[0].Shape)
			switch d := out.Data.(type) {
			case []float32:
				for i := range d {
					d[i] = 1e30
				}
			case []int64:
				for i := range d {
					d[i] = 99
				}
			case []float64:
				for i := range d {
					d[i] = 1e300
				}
			case []uint16:
				for i := range d {
					d[i] = 0x7bff // float16 65504
				}
			}
			if err := s.RunInto(ctx, n, c.in, []*ir.Tensor{out}); err != nil {
				t.Fatal(err)
			}
			if out.String() != want[0].String() {
				t.Fatalf("RunInto %v, Run %v", out, want[0])
			}
			if err := s.RunInto(ctx, n, c.in, []*ir.Tensor{ir.NewTensor(want[0].DType, []int{1})}); err == nil {
				t.Fatal("RunInto accepted a buffer of the wrong shape")
			}
		})
	}
}

// BenchmarkFusedMatMulQKV is seed 000's QKV projection at S=2048:
// [1, S, 768] × [768, 2304] + bias, into a reused buffer, on 2 threads.
func BenchmarkFusedMatMulQKV(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	const s = 2048
	x, w, bias := randTensor(r, 1, s, 768), randTensor(r, 768, 2304), randTensor(r, 2304)
	out := ir.NewTensor(ir.Float, []int{1, s, 2304})
	for _, c := range []struct {
		bias    bool
		threads int
	}{{false, 2}, {true, 2}, {true, 1}} {
		in := []*ir.Tensor{x, w}
		name := fmt.Sprintf("nobias/threads=%d", c.threads)
		if c.bias {
			in, name = append(in, bias), fmt.Sprintf("bias/threads=%d", c.threads)
		}
		b.Run(name, func(b *testing.B) {
			ctx := &Context{Threads: c.threads}
			for i := 0; i < b.N; i++ {
				if err := runFusedMatMulInto(ctx, fusedMatMulNode(), in, []*ir.Tensor{out}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*float64(s)*768*2304*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
