package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestTopK(t *testing.T) {
	nan := float32(math.NaN())
	x := mvF32([]int{2, 4}, 3, 1, 3, 2, 0, nan, 5, 5)
	cases := []struct {
		name    string
		opset   int
		attrs   []*ir.Attribute
		in      []*ir.Tensor
		shape   []int
		values  []float32
		indices []int64
	}{
		{"largest, ties by lower index, NaN first", 11, nil, []*ir.Tensor{x, mvI64(3)}, []int{2, 3},
			[]float32{3, 3, 2, nan, 5, 5}, []int64{0, 2, 3, 1, 2, 3}},
		{"smallest, NaN last", 11, []*ir.Attribute{mvInt("largest", 0)}, []*ir.Tensor{x, mvI64(4)}, []int{2, 4},
			[]float32{1, 2, 3, 3, 0, 5, 5, nan}, []int64{1, 3, 0, 2, 0, 2, 3, 1}},
		{"axis 0", 11, []*ir.Attribute{mvInt("axis", 0)}, []*ir.Tensor{x, mvI64(1)}, []int{1, 4},
			[]float32{3, nan, 5, 5}, []int64{0, 1, 1, 1}},
		{"k = 0", 11, nil, []*ir.Tensor{x, mvI64(0)}, []int{2, 0}, []float32{}, []int64{}},
		{"TopK-1 attribute k", 1, []*ir.Attribute{mvInt("k", 1)}, []*ir.Tensor{x}, []int{2, 1}, []float32{3, nan}, []int64{0, 1}},
		{"TopK-10 input k", 10, nil, []*ir.Tensor{x, mvI64(2)}, []int{2, 2}, []float32{3, 3, nan, 5}, []int64{0, 2, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("TopK", len(c.in), 2, c.attrs...), c.in...)
			got := out[0].Float32s()
			if len(got) != len(c.values) {
				t.Fatalf("values %v, want %v", got, c.values)
			}
			for i, v := range c.values {
				if got[i] != v && !(got[i] != got[i] && v != v) {
					t.Fatalf("values %v, want %v", got, c.values)
				}
			}
			mvWant(t, out[1], c.shape, c.indices)
		})
	}
	ints := mvRun(t, 24, mvNode("TopK", 2, 2, mvInt("largest", 0)), ir.FromSlice([]int{5}, []int32{4, -1, 4, -1, 0}), mvI64(3))
	mvWant(t, ints[0], []int{3}, []int32{-1, -1, 0})
	mvWant(t, ints[1], []int{3}, []int64{1, 3, 4})
	mvErr(t, 11, mvNode("TopK", 2, 2), "k = 5 is larger than axis 1 of size 4", x, mvI64(5))
	mvErr(t, 11, mvNode("TopK", 2, 2), "k = -1 is negative", x, mvI64(-1))
	mvErr(t, 10, mvNode("TopK", 2, 2), "element type int32", ir.FromSlice([]int{1}, []int32{1}), mvI64(1))
	v, err := mvInfer(t, 11, mvNode("TopK", 2, 2), Typed(ir.Float, mvShape("b", 8)), Typed(ir.Int64, mvShape(1)))
	if err != nil || v[0].Type.String() != "float32[b, ?]" || v[1].Type.String() != "int64[b, ?]" {
		t.Errorf("infer with unknown k: %v %v", v, err)
	}
}
