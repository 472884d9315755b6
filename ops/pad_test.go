package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestPad(t *testing.T) {
	// The spec's example data: 3×2.
	x := func() *ir.Tensor { return mvF32([]int{3, 2}, 1, 1.2, 2.3, 3.4, 4.5, 5.7) }
	mode := func(m string) *ir.Attribute {
		return &ir.Attribute{Name: "mode", Type: ir.AttrString, String: []byte(m)}
	}
	cases := []struct {
		name  string
		opset int
		attrs []*ir.Attribute
		in    []*ir.Tensor
		shape []int
		want  any
	}{
		{"constant (spec example 1)", 25, nil, []*ir.Tensor{x(), mvI64(0, 2, 0, 0), ir.Scalar(float32(0))},
			[]int{3, 4}, []float32{0, 0, 1, 1.2, 0, 0, 2.3, 3.4, 0, 0, 4.5, 5.7}},
		{"reflect (spec example 2)", 11, []*ir.Attribute{mode("reflect")}, []*ir.Tensor{x(), mvI64(0, 2, 0, 0)},
			[]int{3, 4}, []float32{1, 1.2, 1, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7}},
		{"edge (spec example 3)", 13, []*ir.Attribute{mode("edge")}, []*ir.Tensor{x(), mvI64(0, 2, 0, 0)},
			[]int{3, 4}, []float32{1, 1, 1, 1.2, 2.3, 2.3, 2.3, 3.4, 4.5, 4.5, 4.5, 5.7}},
		{"wrap (spec example 4)", 19, []*ir.Attribute{mode("wrap")}, []*ir.Tensor{x(), mvI64(2, 1, 1, 1)},
			[]int{6, 4}, []float32{3.4, 2.3, 3.4, 2.3, 5.7, 4.5, 5.7, 4.5, 1.2, 1, 1.2, 1, 3.4, 2.3, 3.4, 2.3, 5.7, 4.5, 5.7, 4.5, 1.2, 1, 1.2, 1}},
		{"constant value and axes", 18, nil, []*ir.Tensor{x(), mvI64(1, 1), ir.Scalar(float32(9)), mvI64(-2)},
			[]int{5, 2}, []float32{9, 9, 1, 1.2, 2.3, 3.4, 4.5, 5.7, 9, 9}},
		{"reflect wider than the axis repeats the mirror", 18, []*ir.Attribute{mode("reflect")},
			[]*ir.Tensor{mvF32([]int{3}, 1, 2, 3), mvI64(5, 0)}, []int{8}, []float32{2, 1, 2, 3, 2, 1, 2, 3}}, // numpy.pad([1, 2, 3], (5, 0), "reflect")
		{"negative pads crop", 13, nil, []*ir.Tensor{x(), mvI64(-1, 0, 0, -1)},
			[]int{2, 1}, []float32{2.3, 4.5}},
		{"int64 edge of a one-element axis", 13, []*ir.Attribute{mode("reflect")},
			[]*ir.Tensor{mvI64(7), mvI64(2, 1)}, []int{4}, []int64{7, 7, 7, 7}},
		{"strings", 13, nil, []*ir.Tensor{ir.FromSlice([]int{1}, []string{"a"}), mvI64(1, 1), ir.FromSlice(nil, []string{"_"})},
			[]int{3}, []string{"_", "a", "_"}},
		{"Pad-2 attributes", 2, []*ir.Attribute{mvInts("pads", 1, 0, 0, 0), {Name: "value", Type: ir.AttrFloat, Float: -1}},
			[]*ir.Tensor{x()}, []int{4, 2}, []float32{-1, -1, 1, 1.2, 2.3, 3.4, 4.5, 5.7}},
		{"Pad-1 paddings", 1, []*ir.Attribute{mvInts("paddings", 0, 0, 0, 1), mode("edge")},
			[]*ir.Tensor{x()}, []int{3, 3}, []float32{1, 1.2, 1.2, 2.3, 3.4, 3.4, 4.5, 5.7, 5.7}},
		{"int4 at opset 21", 21, nil, []*ir.Tensor{{DType: ir.Int4, Shape: []int{2}, Data: []int8{-8, 7}}, mvI64(1, 0), {DType: ir.Int4, Data: []int8{3}}},
			[]int{3}, []int8{3, -8, 7}},
		{"empty axis, constant", 13, nil, []*ir.Tensor{ir.NewTensor(ir.Float, []int{0, 2}), mvI64(1, 0, 0, 0)}, []int{1, 2}, []float32{0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("Pad", len(c.in), 1, c.attrs...), c.in...)
			mvWant(t, out[0], c.shape, c.want)
		})
	}
	mvErr(t, 18, mvNode("Pad", 2, 1, mode("wrap")), "mode wrap needs opset 19", x(), mvI64(0, 0, 0, 0))
	mvErr(t, 19, mvNode("Pad", 2, 1, mode("mirror")), `mode "mirror" is not constant`, x(), mvI64(0, 0, 0, 0))
	mvErr(t, 19, mvNode("Pad", 2, 1), "pads has 2 values, want 2 × 2", x(), mvI64(0, 0))
	mvErr(t, 19, mvNode("Pad", 2, 1), "negative size", x(), mvI64(-4, 0, 0, 0))
	mvErr(t, 19, mvNode("Pad", 2, 1, mode("edge")), "cannot edge-pad axis 0 of size 0", ir.NewTensor(ir.Float, []int{0, 2}), mvI64(1, 0, 0, 0))
	mvErr(t, 19, mvNode("Pad", 3, 1), "constant_value is float64, data is float32", x(), mvI64(0, 0, 0, 0), ir.Scalar(float64(1)))
	mvErr(t, 19, mvNode("Pad", 4, 1), "axis 2 is out of range", x(), mvI64(0, 0), nil, mvI64(2))
	// Infer: known pads give the shape; unknown pads keep the rank.
	v, err := mvInfer(t, 19, mvNode("Pad", 2, 1), Typed(ir.Float, mvShape("b", 4)), mvConst(mvI64(0, 1, 0, 2)))
	if err != nil || v[0].Type.String() != "float32[b, 7]" {
		t.Errorf("infer: %v %v", v, err)
	}
	v, err = mvInfer(t, 19, mvNode("Pad", 2, 1), Typed(ir.Float, mvShape("b", 4)), Typed(ir.Int64, mvShape(4)))
	if err != nil || v[0].Type.String() != "float32[?, ?]" {
		t.Errorf("infer with unknown pads: %v %v", v, err)
	}
}
