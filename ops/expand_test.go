package ops

import (
	"fmt"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestExpandRun(t *testing.T) {
	col := mvF32([]int{3, 1}, 1, 2, 3)
	cases := []struct {
		name  string
		in    *ir.Tensor
		shape []int64
		want  []int
		data  any
	}{
		{"dim changed", col, []int64{2, 1, 6}, []int{2, 3, 6}, []float32{
			1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
			1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3}},
		{"dim unchanged", col, []int64{3, 4}, []int{3, 4}, []float32{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}},
		{"bidirectional smaller shape", col, []int64{2}, []int{3, 2}, []float32{1, 1, 2, 2, 3, 3}},
		{"shape of ones", col, []int64{1, 1}, []int{3, 1}, []float32{1, 2, 3}},
		{"row to matrix", mvI64(1, 2), []int64{2, 2}, []int{2, 2}, []int64{1, 2, 1, 2}},
		{"scalar", ir.Scalar(true), []int64{3}, []int{3}, []bool{true, true, true}},
		{"to empty", col, []int64{0, 3, 1}, []int{0, 3, 1}, []float32{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, 13, mvNode("Expand", 2, 1), c.in, mvI64(c.shape...))
			mvWant(t, out[0], c.want, c.data)
		})
	}
	mvErr(t, 8, mvNode("Expand", 2, 1), "cannot expand", col, mvI64(2, 2))
	mvErr(t, 13, mvNode("Expand", 2, 1), "invalid dim -1", col, mvI64(-1, 2))
	mvErr(t, 13, mvNode("Expand", 2, 1), "more than", ir.Scalar(int64(1)), mvI64(1<<20, 1<<20))
}

func TestExpandInfer(t *testing.T) {
	x := Typed(ir.Float, mvShape("batch", 1, "seq"))
	cases := []struct {
		name  string
		shape Value
		want  string
	}{
		{"sym", symValue(ir.Int64, mvShape("batch", 4, 1), false), "float32[batch, 4, seq]"},
		{"const bigger rank", mvConst(mvI64(2, 1, 1, 1)), "float32[2, batch, 1, seq]"},
		{"unknown contents", Typed(ir.Int64, mvShape(3)), "float32[?, ?, ?]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := mvInfer(t, 13, mvNode("Expand", 2, 1), x, c.shape)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Type.String(); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
	if _, err := mvInfer(t, 13, mvNode("Expand", 2, 1), Typed(ir.Float, mvShape(3)), mvConst(mvI64(4))); err == nil {
		t.Error("Infer should reject [3] -> [4]")
	}
}

func TestTileRun(t *testing.T) {
	x := mvF32([]int{2, 2}, 0, 1, 2, 3)
	cases := []struct {
		name string
		in   *ir.Tensor
		reps []int64
		want []int
		data any
	}{
		{"2x2", x, []int64{2, 2}, []int{4, 4}, []float32{0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3}},
		{"rows", x, []int64{1, 3}, []int{2, 6}, []float32{0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3}},
		{"cols", x, []int64{2, 1}, []int{4, 2}, []float32{0, 1, 2, 3, 0, 1, 2, 3}},
		{"zero", x, []int64{0, 1}, []int{0, 2}, []float32{}},
		{"1d strings", ir.FromSlice([]int{2}, []string{"a", "b"}), []int64{3}, []int{6}, []string{"a", "b", "a", "b", "a", "b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, 13, mvNode("Tile", 2, 1), c.in, mvI64(c.reps...))
			mvWant(t, out[0], c.want, c.data)
		})
	}
	mvErr(t, 7, mvNode("Tile", 2, 1), "has 1 elements for input rank 2", x, mvI64(2))
	mvErr(t, 13, mvNode("Tile", 2, 1), "invalid value -1", x, mvI64(-1, 1))
	mvErr(t, 13, mvNode("Tile", 2, 1), "more than", x, mvI64(1<<20, 1<<20))
	out, err := mvInfer(t, 13, mvNode("Tile", 2, 1), Typed(ir.Float, mvShape("b", 1, 3)), symValue(ir.Int64, mvShape(1, "h", 2), false))
	if err != nil || out[0].Type.String() != "float32[b, h, 6]" {
		t.Errorf("got %v %v", out, err)
	}
}

// TestExpandInferTorchPattern follows PyTorch's export of x.expand(b, h,
// n, s, d) with sizes read from shapes: Concat of the sizes, Reshape to
// [-1], Where(Equal(sizes, -1·ones), ones, sizes), Expand. The symbolic
// sizes (including a KV cache's "past + seq") must reach Expand's output.
func TestExpandInferTorchPattern(t *testing.T) {
	sizes := symValue(ir.Int64, mvShape("batch", 2, 2, "past + seq", 16), false)
	flat, err := mvInfer(t, 17, mvNode("Reshape", 2, 1), sizes, mvConst(mvI64(-1)))
	if err != nil || flat[0].Sym.String() != "[batch, 2, 2, past + seq, 16]" {
		t.Fatalf("Reshape: %v %v", flat, err)
	}
	negOnes := mvConst(mvI64(-1, -1, -1, -1, -1))
	eq, err := mvInfer(t, 17, mvNode("Equal", 2, 1), flat[0], negOnes)
	if err != nil || eq[0].Const == nil || fmt.Sprint(eq[0].Const.Bools()) != "[false false false false false]" {
		t.Fatalf("Equal: %v %v", eq, err)
	}
	ones := mvConst(mvI64(1, 1, 1, 1, 1))
	sel, err := mvInfer(t, 17, mvNode("Where", 3, 1), eq[0], ones, flat[0])
	if err != nil || sel[0].Sym.String() != "[batch, 2, 2, past + seq, 16]" {
		t.Fatalf("Where: %v %v", sel, err)
	}
	x := Typed(ir.Float, mvShape("batch", 2, 1, "past + seq", 16))
	out, err := mvInfer(t, 17, mvNode("Expand", 2, 1), x, sel[0])
	if err != nil || out[0].Type.String() != "float32[batch, 2, 2, past + seq, 16]" {
		t.Fatalf("Expand: %v %v", out, err)
	}
	// Equal stays undecided where a symbol meets a non-negative literal,
	// and the same symbol equals itself.
	u, err := mvInfer(t, 17, mvNode("Equal", 2, 1), flat[0], mvConst(mvI64(1)))
	if err != nil || u[0].Const != nil {
		t.Fatalf("Equal with 1: %v %v", u, err)
	}
	same, err := mvInfer(t, 17, mvNode("Equal", 2, 1), symValue(ir.Int64, mvShape("seq"), true), symValue(ir.Int64, mvShape("seq"), true))
	if err != nil || same[0].Const == nil || !same[0].Const.Bools()[0] || same[0].Const.Rank() != 0 {
		t.Fatalf("Equal of a symbol with itself: %v %v", same, err)
	}
}
