package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestGatherElements(t *testing.T) {
	data := mvF32([]int{3, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	cases := []struct {
		name  string
		axis  int64
		data  *ir.Tensor
		idx   *ir.Tensor
		shape []int
		want  any
	}{
		{"axis 0, negative index", 0, data, ir.FromSlice([]int{2, 3}, []int64{1, 2, 0, 2, 0, -1}), []int{2, 3}, []float32{4, 8, 3, 7, 2, 9}},
		{"axis 1, fewer rows", 1, data, ir.FromSlice([]int{2, 2}, []int32{0, 0, 1, 0}), []int{2, 2}, []float32{1, 1, 5, 4}},
		{"axis -1, strings", -1, ir.FromSlice([]int{1, 2}, []string{"a", "b"}), ir.FromSlice([]int{1, 3}, []int64{1, 1, 0}), []int{1, 3}, []string{"b", "b", "a"}},
		{"empty", 0, data, ir.FromSlice([]int{0, 3}, []int64{}), []int{0, 3}, []float32{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, 13, mvNode("GatherElements", 2, 1, mvInt("axis", c.axis)), c.data, c.idx)
			mvWant(t, out[0], c.shape, c.want)
		})
	}
	n := mvNode("GatherElements", 2, 1)
	mvErr(t, 13, n, "index 3 is out of range for axis 0 of size 3", data, ir.FromSlice([]int{1, 1}, []int64{3}))
	mvErr(t, 13, n, "rank 1, data rank 2", data, mvI64(0))
	mvErr(t, 13, n, "larger than data", data, ir.FromSlice([]int{1, 4}, []int64{0, 0, 0, 0}))
	mvErr(t, 13, n, "indices must be int32 or int64", data, mvF32([]int{1, 1}, 0))
}

func TestScatterElements(t *testing.T) {
	data := func() *ir.Tensor { return mvF32([]int{1, 5}, 1, 2, 3, 4, 5) }
	idx := ir.FromSlice([]int{1, 3}, []int64{1, 3, 1})
	upd := mvF32([]int{1, 3}, 1.1, 2.1, 3.1)
	red := func(r string) *ir.Attribute {
		return &ir.Attribute{Name: "reduction", Type: ir.AttrString, String: []byte(r)}
	}
	nan := float32(math.NaN())
	cases := []struct {
		name  string
		opset int
		attrs []*ir.Attribute
		in    []*ir.Tensor
		want  any
	}{
		{"none: the last duplicate wins", 11, nil, []*ir.Tensor{data(), idx, upd}, []float32{1, 3.1, 3, 2.1, 5}},
		{"add", 16, []*ir.Attribute{red("add")}, []*ir.Tensor{data(), idx, upd}, []float32{1, 2 + 1.1 + 3.1, 3, 4 + 2.1, 5}},
		{"mul", 16, []*ir.Attribute{red("mul")}, []*ir.Tensor{data(), idx, upd}, []float32{1, 2 * 1.1 * 3.1, 3, 4 * 2.1, 5}},
		{"max", 18, []*ir.Attribute{red("max")}, []*ir.Tensor{data(), idx, upd}, []float32{1, 3.1, 3, 4, 5}},
		{"min propagates NaN", 18, []*ir.Attribute{red("min")}, []*ir.Tensor{data(), idx, mvF32([]int{1, 3}, nan, 2.1, 3.1)}, []float32{1, nan, 3, 2.1, 5}},
		{"int64 add, negative index", 18, []*ir.Attribute{red("add")},
			[]*ir.Tensor{mvI64(10, 20), mvI64(-1, -1), mvI64(1, 2)}, []int64{10, 23}},
		{"bool max is or", 18, []*ir.Attribute{red("max")},
			[]*ir.Tensor{ir.FromSlice([]int{2}, []bool{false, true}), mvI64(0, 1), ir.FromSlice([]int{2}, []bool{true, false})}, []bool{true, true}},
		{"float16 add", 16, []*ir.Attribute{red("add")},
			[]*ir.Tensor{ewF16([]int{2}, 1, 2), mvI64(0, 0), ewF16([]int{2}, 0.5, 0.25)}, ewF16([]int{2}, 1.75, 2).Data},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("ScatterElements", 3, 1, append(c.attrs, mvInt("axis", -1))...), c.in...)
			if f, ok := c.want.([]float32); ok {
				got := out[0].Float32s()
				for i := range f {
					if got[i] != f[i] && !(got[i] != got[i] && f[i] != f[i]) {
						t.Fatalf("got %v, want %v", got, f)
					}
				}
				return
			}
			mvWant(t, out[0], c.in[0].Shape, c.want)
		})
	}
	// The input is not modified.
	d := data()
	mvRun(t, 11, mvNode("ScatterElements", 3, 1, mvInt("axis", 1)), d, idx, upd)
	mvWant(t, d, []int{1, 5}, []float32{1, 2, 3, 4, 5})
	mvErr(t, 13, mvNode("ScatterElements", 3, 1, red("add")), `reduction "add" needs a later opset (this node runs ScatterElements-13)`, data(), idx, upd)
	mvErr(t, 16, mvNode("ScatterElements", 3, 1, red("max")), `reduction "max" needs a later opset`, data(), idx, upd)
	mvErr(t, 18, mvNode("ScatterElements", 3, 1, red("sum")), `reduction "sum" is not none`, data(), idx, upd)
	mvErr(t, 18, mvNode("ScatterElements", 3, 1, mvInt("axis", 1)), "updates has shape [3], indices [1 3]", data(), idx, mvF32([]int{3}, 1, 2, 3))
	mvErr(t, 18, mvNode("ScatterElements", 3, 1, red("add")), `reduction "add" does not apply to string`,
		ir.FromSlice([]int{1}, []string{"a"}), mvI64(0), ir.FromSlice([]int{1}, []string{"b"}))
}

func TestScatterND(t *testing.T) {
	// ONNX's example 2: data 4×4×4, two slices replaced.
	data := func() *ir.Tensor {
		d := make([]float32, 64)
		for i := range d {
			d[i] = float32(i % 16 / 4)
		}
		return ir.FromSlice([]int{4, 4, 4}, d)
	}
	upd := make([]float32, 32)
	for i := range upd {
		upd[i] = 10 + float32(i/16)
	}
	out := mvRun(t, 11, mvNode("ScatterND", 3, 1), data(), ir.FromSlice([]int{2, 1}, []int64{0, -2}), ir.FromSlice([]int{2, 4, 4}, upd))
	got := out[0].Float32s()
	for i, v := range got {
		want := float32(i % 16 / 4)
		switch i / 16 {
		case 0:
			want = 10
		case 2:
			want = 11
		}
		if v != want {
			t.Fatalf("element %d = %g, want %g", i, v, want)
		}
	}
	// Element tuples with reduction, duplicates combined in order.
	red := &ir.Attribute{Name: "reduction", Type: ir.AttrString, String: []byte("mul")}
	out = mvRun(t, 16, mvNode("ScatterND", 3, 1, red), mvF32([]int{2, 2}, 1, 2, 3, 4), ir.FromSlice([]int{3, 2}, []int64{0, 1, 1, 0, 0, 1}), mvF32([]int{3}, 5, 6, 7))
	mvWant(t, out[0], []int{2, 2}, []float32{1, 70, 18, 4})
	n := mvNode("ScatterND", 3, 1)
	mvErr(t, 11, n, "updates has shape [3], want [2 4]", data(), ir.FromSlice([]int{2, 2}, []int64{0, 0, 1, 1}), mvF32([]int{3}, 1, 2, 3))
	mvErr(t, 11, n, "more than data's rank 1", mvF32([]int{2}, 1, 2), ir.FromSlice([]int{1, 2}, []int64{0, 0}), mvF32([]int{1}, 1))
	mvErr(t, 11, n, "index 2 is out of range for axis 0 of size 2", mvF32([]int{2}, 1, 2), ir.FromSlice([]int{1, 1}, []int64{2}), mvF32([]int{1}, 1))
}
