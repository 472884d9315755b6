package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestLegacyBroadcast covers the opset-1 and 6 forms of the binary ops: B
// broadcasts against A only with broadcast=1, aligned at axis.
func TestLegacyBroadcast(t *testing.T) {
	a := mvIota(2, 3, 4)
	bc := mvInt("broadcast", 1)
	cases := []struct {
		name  string
		op    string
		opset int
		attrs []*ir.Attribute
		b     *ir.Tensor
		check func(i int) float32 // expected element i of A op B
	}{
		{"suffix", "Add", 6, []*ir.Attribute{bc}, mvF32([]int{4}, 0, 10, 20, 30), func(i int) float32 { return float32(i) + float32(10*(i%4)) }},
		{"axis 1", "Sub", 6, []*ir.Attribute{bc, mvInt("axis", 1)}, mvF32([]int{3}, 100, 200, 300), func(i int) float32 { return float32(i) - float32(100*(1+(i/4)%3)) }},
		{"axis 0 of 2-D", "Mul", 1, []*ir.Attribute{bc, mvInt("axis", 0), mvInts("consumed_inputs", 0, 0)}, mvF32([]int{2, 3}, 1, 2, 3, 4, 5, 6), func(i int) float32 { return float32(i) * float32(1+i/4) }},
		{"one element", "Div", 6, []*ir.Attribute{bc}, mvF32([]int{1, 1}, 2), func(i int) float32 { return float32(i) / 2 }},
		{"no broadcast, equal shapes", "Add", 6, nil, mvIota(2, 3, 4), func(i int) float32 { return 2 * float32(i) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode(c.op, 2, 1, c.attrs...), a, c.b)
			want := make([]float32, 24)
			for i := range want {
				want[i] = c.check(i)
			}
			mvWant(t, out[0], []int{2, 3, 4}, want)
		})
	}
	mvErr(t, 6, mvNode("Add", 2, 1), "before opset 7 they must be equal unless broadcast=1", a, mvF32([]int{4}, 1, 2, 3, 4))
	mvErr(t, 6, mvNode("Add", 2, 1, bc, mvInt("axis", 2)), "does not fit A's rank 3 at axis 2", a, mvIota(3, 4))
	mvErr(t, 6, mvNode("Add", 2, 1, bc), "does not match A", a, mvF32([]int{3}, 1, 2, 3))
	eq := mvRun(t, 1, mvNode("Equal", 2, 1, bc), ir.FromSlice([]int{2, 2}, []int64{1, 2, 3, 2}), mvI64(2))
	mvWant(t, eq[0], []int{2, 2}, []bool{false, true, false, true})
	and := mvRun(t, 1, mvNode("And", 2, 1, bc, mvInt("axis", 0)), ir.FromSlice([]int{2, 2}, []bool{true, true, true, false}), ir.FromSlice([]int{2}, []bool{false, true}))
	mvWant(t, and[0], []int{2, 2}, []bool{false, false, true, false})
	mvErr(t, 1, mvNode("Greater", 2, 1), "element type int64", mvI64(1), mvI64(2))
}

func TestLegacyGemmDropout(t *testing.T) {
	a, b := mvF32([]int{2, 2}, 1, 2, 3, 4), mvF32([]int{2, 2}, 1, 0, 0, 1)
	out := mvRun(t, 6, mvNode("Gemm", 3, 1, mvInt("broadcast", 1)), a, b, mvF32([]int{2}, 10, 20))
	mvWant(t, out[0], []int{2, 2}, []float32{11, 22, 13, 24})
	out = mvRun(t, 1, mvNode("Gemm", 3, 1), a, b, mvF32([]int{2, 2}, 1, 1, 1, 1))
	mvWant(t, out[0], []int{2, 2}, []float32{2, 3, 4, 5})
	mvErr(t, 6, mvNode("Gemm", 3, 1), "before opset 7 C must have the product's shape", a, b, mvF32([]int{2}, 10, 20))

	x := mvF32([]int{4}, 1, 2, 3, 4)
	out = mvRun(t, 6, mvNode("Dropout", 1, 2, mvInt("is_test", 1)), x)
	mvWant(t, out[0], []int{4}, []float32{1, 2, 3, 4})
	mvWant(t, out[1], []int{4}, []float32{1, 1, 1, 1})
	big := mvIota(1000)
	out = mvRun(t, 1, mvNode("Dropout", 1, 2, &ir.Attribute{Name: "ratio", Type: ir.AttrFloat, Float: 0.5}), big)
	kept := 0
	for i, m := range out[1].Float32s() {
		y := out[0].Float32s()[i]
		switch m {
		case 1:
			kept++
			if y != 2*float32(i) {
				t.Fatalf("kept element %d is %g, want %g", i, y, 2*float32(i))
			}
		case 0:
			if y != 0 {
				t.Fatalf("dropped element %d is %g", i, y)
			}
		default:
			t.Fatalf("mask %g", m)
		}
	}
	if kept < 400 || kept > 600 {
		t.Errorf("kept %d of 1000 at ratio 0.5", kept)
	}
}

func TestLegacyTileSplit(t *testing.T) {
	x := mvF32([]int{2, 2}, 1, 2, 3, 4)
	out := mvRun(t, 1, mvNode("Tile", 3, 1), x, ir.Scalar(int64(2)), ir.Scalar(int64(1)))
	mvWant(t, out[0], []int{2, 4}, []float32{1, 2, 1, 2, 3, 4, 3, 4})
	mvErr(t, 1, mvNode("Tile", 3, 1), "axis 2 is out of range", x, ir.Scalar(int64(2)), ir.Scalar(int64(2)))
	parts := mvRun(t, 1, mvNode("Split", 2, 2, mvInt("axis", 1)), mvIota(1, 3), mvF32([]int{2}, 1, 2))
	mvWant(t, parts[0], []int{1, 1}, []float32{0})
	mvWant(t, parts[1], []int{1, 2}, []float32{1, 2})
	parts = mvRun(t, 1, mvNode("Split", 1, 2, mvInts("split", 2, 1)), mvIota(3))
	mvWant(t, parts[0], []int{2}, []float32{0, 1})
	mvErr(t, 1, mvNode("Split", 2, 2), "holds a non-integer", mvIota(3), mvF32([]int{2}, 1.5, 1.5))
}
