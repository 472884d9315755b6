package ops

import (
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestGatherRun(t *testing.T) {
	x32 := mvF32([]int{3, 2}, 1, 2, 3, 4, 5, 6)
	x23 := mvF32([]int{2, 3}, 1, 2, 3, 4, 5, 6)
	cases := []struct {
		name  string
		opset int
		axis  int64
		data  *ir.Tensor
		idx   *ir.Tensor
		shape []int
		want  any
	}{
		{"axis0 2d indices", 13, 0, x32, ir.FromSlice([]int{2, 2}, []int64{0, 1, 1, 2}), []int{2, 2, 2}, []float32{1, 2, 3, 4, 3, 4, 5, 6}},
		{"axis1 negative", 13, 1, x23, mvI64(0, -1), []int{2, 2}, []float32{1, 3, 4, 6}},
		{"axis -1 scalar", 11, -1, x23, ir.Scalar(int64(2)), []int{2}, []float32{3, 6}},
		{"int32 indices", 7, 0, x32, ir.FromSlice([]int{1}, []int32{2}), []int{1, 2}, []float32{5, 6}},
		{"strings", 13, 0, ir.FromSlice([]int{3}, []string{"a", "b", "c"}), mvI64(2, 0, 2), []int{3}, []string{"c", "a", "c"}},
		{"empty indices", 13, 0, x32, ir.FromSlice([]int{0}, []int64{}), []int{0, 2}, []float32{}},
		{"int64 data", 13, 0, mvI64(10, 20, 30), ir.Scalar(int64(-3)), []int{}, []int64{10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("Gather", 2, 1, mvInt("axis", c.axis)), c.data, c.idx)
			mvWant(t, out[0], c.shape, c.want)
		})
	}
}

func TestGatherErrors(t *testing.T) {
	x := mvF32([]int{3, 2}, 1, 2, 3, 4, 5, 6)
	n := mvNode("Gather", 2, 1)
	mvErr(t, 13, n, "index 3 is out of range for a dimension of size 3", x, mvI64(0, 3))
	mvErr(t, 13, n, "index -4 is out of range", x, mvI64(-4))
	mvErr(t, 13, n, "indices must be int32 or int64", x, mvF32([]int{1}, 0))
	mvErr(t, 13, mvNode("Gather", 2, 1, mvInt("axis", 2)), "axis 2 is out of range for rank 2", x, mvI64(0))
	mvErr(t, 13, n, "input 1 is missing", x, nil)
	// Infer validates constant indices against a known dim.
	_, err := mvInfer(t, 13, n, Typed(ir.Float, mvShape("batch", 3)), mvConst(mvI64(5)))
	if err != nil {
		t.Errorf("axis 0 is symbolic, no bound check expected: %v", err)
	}
	_, err = mvInfer(t, 13, mvNode("Gather", 2, 1, mvInt("axis", 1)), Typed(ir.Float, mvShape("batch", 3)), mvConst(mvI64(5)))
	if err == nil {
		t.Error("want an out-of-range error from Infer")
	}
}

func TestGatherInfer(t *testing.T) {
	n := mvNode("Gather", 2, 1, mvInt("axis", 1))
	out, err := mvInfer(t, 13, n, Typed(ir.Float, mvShape("batch", 10, 64)), Typed(ir.Int64, mvShape("b2", "s2")))
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Type.String(); got != "float32[batch, b2, s2, 64]" {
		t.Errorf("got %s", got)
	}
	// Gather from a Sym shape vector: scalar and vector indices.
	shape := symValue(ir.Int64, mvShape("batch", "seq", 64), false)
	out, err = mvInfer(t, 13, mvNode("Gather", 2, 1), shape, mvConst(ir.Scalar(int64(-2))))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Type.String() != "int64[]" || out[0].Sym.String() != "[seq]" {
		t.Errorf("scalar gather: %v sym %v", out[0].Type, out[0].Sym)
	}
	out, err = mvInfer(t, 13, mvNode("Gather", 2, 1), shape, mvConst(mvI64(2, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Type.String() != "int64[2]" || out[0].Sym.String() != "[64, batch]" {
		t.Errorf("vector gather: %v sym %v", out[0].Type, out[0].Sym)
	}
	if _, err := mvInfer(t, 13, mvNode("Gather", 2, 1), shape, mvConst(mvI64(3))); err == nil {
		t.Error("want an out-of-range error for the Sym vector")
	}
}

// TestGatherThreads checks Gathers big enough to split over threads against
// the element-by-element definition: rows of 4 (T5's position bias: a row
// of H values per (query, key) pair) and of 7, on axis 0 and axis 1, rows
// of one element under 12 outer rows (the same table gathered transposed),
// with negative indices.
func TestGatherThreads(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	schema, err := Lookup("", "Gather", 13)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		data []int
		axis int
	}{{[]int{50, 4}, 0}, {[]int{50, 7}, 0}, {[]int{3, 50, 4}, 1}, {[]int{12, 50}, 1}} {
		data := randTensor(r, c.data...)
		idx := ir.NewTensor(ir.Int64, []int{300, 170})
		for i := range idx.Int64s() {
			idx.Int64s()[i] = r.Int63n(100) - 50 // [-50, 50)
		}
		n := &ir.Node{Name: "g", OpType: "Gather", Inputs: []string{"d", "i"}, Outputs: []string{"y"},
			Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: int64(c.axis)}}}
		dim := c.data[c.axis]
		outer := shapeProd(c.data[:c.axis])
		inner := shapeProd(c.data[c.axis+1:])
		for threads := 1; threads <= 3; threads++ {
			got, err := schema.Run(&Context{Opset: 13, Threads: threads}, n, []*ir.Tensor{data, idx})
			if err != nil {
				t.Fatal(err)
			}
			y := got[0].Float32s()
			for o := range outer {
				for k, x := range idx.Int64s() {
					if x < 0 {
						x += int64(dim)
					}
					for j := range inner {
						if w := data.Float32s()[(o*dim+int(x))*inner+j]; y[(o*len(idx.Int64s())+k)*inner+j] != w {
							t.Fatalf("data %v axis %d, %d threads: row %d of %d differs", c.data, c.axis, threads, k, o)
						}
					}
				}
			}
		}
	}
}
