package ops

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// naiveTranspose is the reference: out[i0..] = in[j..] with j[perm[k]] = i[k].
func naiveTranspose(x *ir.Tensor, perm []int) *ir.Tensor {
	r := len(perm)
	shape := make([]int, r)
	for i, p := range perm {
		shape[i] = x.Shape[p]
	}
	src := x.Float32s()
	out := make([]float32, len(src))
	inStr := contiguousStrides(x.Shape)
	idx := make([]int, r)
	for o := range out {
		rem := o
		for k := r - 1; k >= 0; k-- {
			idx[k] = rem % shape[k]
			rem /= shape[k]
		}
		off := 0
		for k, p := range perm {
			off += idx[k] * inStr[p]
		}
		out[o] = src[off]
	}
	return ir.FromSlice(shape, out)
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for pos := 0; pos <= len(p); pos++ {
			q := append(append(append([]int{}, p[:pos]...), n-1), p[pos:]...)
			out = append(out, q)
		}
	}
	return out
}

func TestTransposeAllPerms4D(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	shapes := [][]int{{2, 3, 4, 5}, {1, 7, 1, 9}, {3, 1, 33, 40}, {2, 16, 4, 8}}
	for _, shape := range shapes {
		x := mvIota(shape...)
		for i := range x.Float32s() {
			x.Float32s()[i] = rng.Float32()
		}
		for _, perm := range permutations(4) {
			p64 := make([]int64, 4)
			for i, p := range perm {
				p64[i] = int64(p)
			}
			out := mvRun(t, 13, mvNode("Transpose", 1, 1, mvInts("perm", p64...)), x)
			want := naiveTranspose(x, perm)
			if !reflect.DeepEqual(out[0].Shape, want.Shape) || !reflect.DeepEqual(out[0].Data, want.Data) {
				t.Fatalf("shape %v perm %v: mismatch", shape, perm)
			}
		}
	}
}

func TestTransposeAttentionLayouts(t *testing.T) {
	// Large enough to take the parallel path.
	x := mvIota(2, 64, 8, 64)
	for _, threads := range []int{1, 4} {
		for _, perm := range [][]int{{0, 2, 1, 3}, {0, 1, 3, 2}, {0, 2, 3, 1}} {
			got, err := Transpose(&Context{Threads: threads}, x, perm)
			if err != nil {
				t.Fatal(err)
			}
			want := naiveTranspose(x, perm)
			if !reflect.DeepEqual(got.Data, want.Data) || !reflect.DeepEqual(got.Shape, want.Shape) {
				t.Fatalf("threads %d perm %v: mismatch", threads, perm)
			}
		}
	}
}

func TestTransposeDefaultAndErrors(t *testing.T) {
	x := mvIota(2, 3, 4)
	out := mvRun(t, 7, mvNode("Transpose", 1, 1), x)
	want := naiveTranspose(x, []int{2, 1, 0})
	mvWant(t, out[0], want.Shape, want.Data)
	out = mvRun(t, 13, mvNode("Transpose", 1, 1), ir.Scalar(int64(5)))
	mvWant(t, out[0], []int{}, []int64{5})
	mvErr(t, 13, mvNode("Transpose", 1, 1, mvInts("perm", 0, 0, 1)), "perm [0 0 1] is not a permutation of 0..2", x)
	mvErr(t, 13, mvNode("Transpose", 1, 1, mvInts("perm", 0, 1)), "perm [0 1] is not a permutation of 0..2", x)
	mvErr(t, 13, mvNode("Transpose", 1, 1, mvInts("perm", 0, 1, 3)), "is not a permutation", x)
	if _, err := mvInfer(t, 13, mvNode("Transpose", 1, 1, mvInts("perm", 1, 1)), Typed(ir.Float, mvShape("b", "s"))); err == nil {
		t.Error("Infer should reject a bad perm")
	}
	v, err := mvInfer(t, 13, mvNode("Transpose", 1, 1, mvInts("perm", 0, 2, 1, 3)), Typed(ir.Float, mvShape("b", "s", 12, 64)))
	if err != nil || v[0].Type.String() != "float32[b, 12, s, 64]" {
		t.Errorf("got %v %v", v, err)
	}
}

func TestTransposeInto(t *testing.T) {
	x := mvIota(2, 3)
	dst := ir.NewTensor(ir.Float, []int{3, 2})
	if err := TransposeInto(nil, dst, x, []int{1, 0}); err != nil {
		t.Fatal(err)
	}
	mvWant(t, dst, []int{3, 2}, []float32{0, 3, 1, 4, 2, 5})
	if err := TransposeInto(nil, ir.NewTensor(ir.Float, []int{2, 3}), x, []int{1, 0}); err == nil {
		t.Error("want a shape error")
	}
	if err := TransposeInto(nil, ir.NewTensor(ir.Int64, []int{3, 2}), x, []int{1, 0}); err == nil {
		t.Error("want a dtype error")
	}
	bad := &ir.Tensor{DType: ir.Float, Shape: []int{3, 2}, Data: make([]int32, 6)}
	if err := TransposeInto(nil, bad, x, []int{1, 0}); err == nil {
		t.Error("want a data type error")
	}
}

func BenchmarkTransposeAttention(b *testing.B) {
	x := mvIota(1, 512, 12, 64)
	for _, perm := range [][]int{{0, 2, 1, 3}, {0, 1, 3, 2}} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/t%d", perm, threads), func(b *testing.B) {
				ctx := &Context{Threads: threads}
				b.SetBytes(int64(x.Len() * 4))
				for i := 0; i < b.N; i++ {
					if _, err := Transpose(ctx, x, perm); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestTransposeLargeThreads checks transposes big enough to run on several
// threads against naiveTranspose: T5's position bias, [S, S, H] to [H, S,
// S] (one matrix, split by columns), and a batch of such matrices.
func TestTransposeLargeThreads(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	n := &ir.Node{Name: "t", OpType: "Transpose", Inputs: []string{"x"}, Outputs: []string{"y"}}
	schema, err := Lookup("", "Transpose", 17)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		shape, perm []int
	}{
		{[]int{300, 301, 4}, []int{2, 0, 1}},
		{[]int{3, 200, 201, 4}, []int{0, 3, 1, 2}},
	} {
		x := randTensor(r, c.shape...)
		want := naiveTranspose(x, c.perm)
		p64 := make([]int64, len(c.perm))
		for i, p := range c.perm {
			p64[i] = int64(p)
		}
		n.Attrs = []*ir.Attribute{{Name: "perm", Type: ir.AttrInts, Ints: p64}}
		for threads := 1; threads <= 3; threads++ {
			got, err := schema.Run(&Context{Opset: 17, Threads: threads}, n, []*ir.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got[0].Float32s(), want.Float32s()) {
				t.Fatalf("%v perm %v, %d threads: differs from the reference", c.shape, c.perm, threads)
			}
		}
	}
}
