package ops

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestWhere(t *testing.T) {
	b := func(shape []int, v ...bool) *ir.Tensor { return ewT(shape, v) }
	negInf := float32(-1e9)
	ewRunCases(t, []ewCase{
		{name: "same shape", op: "Where",
			in:   []*ir.Tensor{b([]int{2, 2}, true, false, true, true), ewT([]int{2, 2}, []float32{1, 2, 3, 4}), ewT([]int{2, 2}, []float32{9, 8, 7, 6})},
			want: ewT([]int{2, 2}, []float32{1, 8, 3, 4})},
		{name: "onnx where_long_example", op: "Where",
			in:   []*ir.Tensor{b([]int{2, 2}, true, false, true, true), ewT([]int{2, 2}, []int64{1, 2, 3, 4}), ewT([]int{2, 2}, []int64{9, 8, 7, 6})},
			want: ewT([]int{2, 2}, []int64{1, 8, 3, 4})},
		{name: "masked fill: mask [s,s], scalar fill, scores [b,s,s]", op: "Where",
			in: []*ir.Tensor{b([]int{2, 2}, false, true, false, false), ir.Scalar(negInf),
				ewT([]int{2, 2, 2}, []float32{1, 2, 3, 4, 5, 6, 7, 8})},
			want: ewT([]int{2, 2, 2}, []float32{1, negInf, 3, 4, 5, negInf, 7, 8})},
		{name: "three-way [2,1]?[1,3]:[3]", op: "Where",
			in:   []*ir.Tensor{b([]int{2, 1}, true, false), ewT([]int{1, 3}, []int32{1, 2, 3}), ewT([]int{3}, []int32{-1, -2, -3})},
			want: ewT([]int{2, 3}, []int32{1, 2, 3, -1, -2, -3})},
		{name: "row condition [3] with x [2,1], y scalar", op: "Where",
			in:   []*ir.Tensor{b([]int{3}, true, false, true), ewT([]int{2, 1}, []float64{5, 6}), ir.Scalar(0.0)},
			want: ewT([]int{2, 3}, []float64{5, 0, 5, 6, 0, 6})},
		{name: "strings", op: "Where",
			in:   []*ir.Tensor{b([]int{2}, false, true), ewT([]int{2}, []string{"a", "b"}), ewT([]int{1}, []string{"z"})},
			want: ewT([]int{2}, []string{"z", "b"})},
		{name: "bool values", op: "Where",
			in:   []*ir.Tensor{b([]int{2}, false, true), b([]int{2}, true, true), b(nil, false)},
			want: b([]int{2}, false, true)},
		{name: "float16", op: "Where",
			in:   []*ir.Tensor{b([]int{2}, true, false), ewF16([]int{2}, 1.5, 2.5), ewF16(nil, -1)},
			want: ewF16([]int{2}, 1.5, -1)},
		{name: "empty", op: "Where",
			in:   []*ir.Tensor{b([]int{0, 2}), ewT([]int{2}, []float32{1, 2}), ewT([]int{1}, []float32{3})},
			want: ewT([]int{0, 2}, []float32{})},
		{name: "condition not bool", op: "Where",
			in:      []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []float32{1}), ewT([]int{1}, []float32{1})},
			wantErr: "condition has element type int32"},
		{name: "x and y differ", op: "Where",
			in:      []*ir.Tensor{b([]int{1}, true), ewT([]int{1}, []float32{1}), ewT([]int{1}, []int64{1})},
			wantErr: "inputs have different element types float32 and int64"},
		{name: "not broadcastable", op: "Where",
			in:      []*ir.Tensor{b([]int{2}, true, true), ewT([]int{3}, []float32{1, 2, 3}), ewT([]int{1}, []float32{1})},
			wantErr: "not broadcastable"},
		{name: "before opset 9", op: "Where", opset: 8,
			in:      []*ir.Tensor{b([]int{1}, true), ewT([]int{1}, []float32{1}), ewT([]int{1}, []float32{1})},
			wantErr: "unsupported opset version"},
	})
}

func TestWhereInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "three-way symbolic", op: "Where",
			in:   []Value{ewTyped(ir.Bool, "seq", "seq"), ewTyped(ir.Float, "batch", 12, "seq", "seq"), ewTyped(ir.Float)},
			want: ewTyped(ir.Float, "batch", 12, "seq", "seq")},
		{name: "unknown rank condition", op: "Where",
			in:   []Value{UnknownRank(ir.Bool), ewTyped(ir.Int64, 2), ewTyped(ir.Int64, 2)},
			want: UnknownRank(ir.Int64)},
		{name: "condition type", op: "Where",
			in:      []Value{ewTyped(ir.Float, 2), ewTyped(ir.Float, 2), ewTyped(ir.Float, 2)},
			wantErr: "condition has element type float32, want bool"},
	})
}

// BenchmarkWhereMaskedFill runs masked_fill's Where on a causal mask of
// S=2048: a bool [S, S] condition, a scalar fill and [S, S] scores, on 1
// and 2 threads, into an output it reuses (as a plan's arena).
func BenchmarkWhereMaskedFill(b *testing.B) {
	const s = 2048
	cond := ir.NewTensor(ir.Bool, []int{s, s})
	for i := range s {
		for j := range s {
			cond.Bools()[i*s+j] = j > i
		}
	}
	scores := ir.NewTensor(ir.Float, []int{1, s, s})
	fill := ir.Scalar(float32(-3.4e38))
	n := &ir.Node{Name: "where", OpType: "Where", Inputs: []string{"c", "x", "y"}, Outputs: []string{"o"}}
	schema, err := Lookup("", "Where", 17)
	if err != nil {
		b.Fatal(err)
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("%dthreads", threads), func(b *testing.B) {
			ctx := &Context{Opset: 17, Threads: threads}
			b.SetBytes(int64(s * s * 4))
			out := []*ir.Tensor{ir.NewTensor(ir.Float, []int{1, s, s})}
			for range b.N {
				if err := schema.RunInto(ctx, n, []*ir.Tensor{cond, fill, scores}, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWhereThreads checks Where on outputs large enough to split over
// threads, for each form of X and Y (a run of each, or one value for a
// run) against the element-by-element definition, on 1 to 3 threads.
func TestWhereThreads(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	const b, s, k = 2, 300, 257
	cond := ir.NewTensor(ir.Bool, []int{1, s, k})
	for i := range cond.Bools() {
		cond.Bools()[i] = r.Intn(3) == 0
	}
	randF := func(shape ...int) *ir.Tensor {
		x := ir.NewTensor(ir.Float, shape)
		for i := range x.Float32s() {
			x.Float32s()[i] = r.Float32()
		}
		return x
	}
	// at reads t, broadcast to [b, s, k], at (n, i, j).
	at := func(x *ir.Tensor, n, i, j int) float32 {
		sh := append(make([]int, 3-len(x.Shape)), x.Shape...)
		for d := range sh {
			if sh[d] == 0 {
				sh[d] = 1
			}
		}
		idx := []int{n, i, j}
		off := 0
		for d := range 3 {
			off = off*sh[d] + min(idx[d], sh[d]-1)
		}
		return x.Float32s()[off]
	}
	n := &ir.Node{Name: "where", OpType: "Where", Inputs: []string{"c", "x", "y"}, Outputs: []string{"o"}}
	schema, err := Lookup("", "Where", 17)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		x, y *ir.Tensor
	}{
		{"runs of both", randF(b, s, k), randF(b, s, k)},
		{"scalar X", ir.Scalar(float32(-1)), randF(b, s, k)},
		{"scalar Y", randF(b, s, k), ir.Scalar(float32(-2))},
		{"both scalar", ir.Scalar(float32(-1)), randF(1)},
		{"X per query, Y per key", randF(s, 1), randF(b, 1, k)},
	} {
		for threads := 1; threads <= 3; threads++ {
			res, err := schema.Run(&Context{Opset: 17, Threads: threads}, n, []*ir.Tensor{cond, c.x, c.y})
			if err != nil {
				t.Fatal(err)
			}
			got := res[0].Float32s()
			for e := range got {
				nn, i, j := e/(s*k), e/k%s, e%k
				want := at(c.y, nn, i, j)
				if cond.Bools()[i*k+j] {
					want = at(c.x, nn, i, j)
				}
				if got[e] != want {
					t.Fatalf("%s, %d threads: element %d = %g, want %g", c.name, threads, e, got[e], want)
				}
			}
		}
	}
}
