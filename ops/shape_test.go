package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestShapeRun(t *testing.T) {
	x := mvIota(3, 4, 5)
	cases := []struct {
		name  string
		opset int
		attrs []*ir.Attribute
		want  []int64
	}{
		{"all", 13, nil, []int64{3, 4, 5}},
		{"opset7", 7, nil, []int64{3, 4, 5}},
		{"start1", 15, []*ir.Attribute{mvInt("start", 1)}, []int64{4, 5}},
		{"end-1", 15, []*ir.Attribute{mvInt("end", -1)}, []int64{3, 4}},
		{"start1end2", 15, []*ir.Attribute{mvInt("start", 1), mvInt("end", 2)}, []int64{4}},
		{"clip", 15, []*ir.Attribute{mvInt("start", -10), mvInt("end", 10)}, []int64{3, 4, 5}},
		{"empty", 15, []*ir.Attribute{mvInt("start", 2), mvInt("end", 1)}, []int64{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("Shape", 1, 1, c.attrs...), x)
			mvWant(t, out[0], []int{len(c.want)}, c.want)
		})
	}
	out := mvRun(t, 13, mvNode("Shape", 1, 1), ir.Scalar(float32(1)))
	mvWant(t, out[0], []int{0}, []int64{})
}

func TestShapeInferSym(t *testing.T) {
	x := Typed(ir.Float, mvShape("batch", "seq", 64))
	out, err := mvInfer(t, 15, mvNode("Shape", 1, 1, mvInt("start", 1)), x)
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Sym.String(); got != "[seq, 64]" {
		t.Errorf("Sym %s", got)
	}
	if got := out[0].Type.String(); got != "int64[2]" {
		t.Errorf("type %s", got)
	}
	if out[0].Const != nil {
		t.Error("Const set for a symbolic shape")
	}
	out, err = mvInfer(t, 13, mvNode("Shape", 1, 1), Typed(ir.Float, mvShape(2, 3)))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Const == nil || out[0].Const.Int64s()[1] != 3 {
		t.Errorf("known shape should give a Const, got %v", out[0].Const)
	}
	out, err = mvInfer(t, 13, mvNode("Shape", 1, 1), UnknownRank(ir.Float))
	if err != nil || out[0].Type.String() != "int64[?]" {
		t.Errorf("unknown rank: %v %v", out, err)
	}
}

func TestSize(t *testing.T) {
	cases := []struct {
		name  string
		opset int
		x     *ir.Tensor
		want  int64
	}{
		{"3x4x5", 13, mvIota(3, 4, 5), 60},
		{"opset 1", 1, mvIota(2, 3), 6},
		{"scalar", 13, ir.Scalar(float32(1)), 1},
		{"empty", 13, ir.FromSlice([]int{2, 0}, []bool{}), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("Size", 1, 1), c.x)
			mvWant(t, out[0], []int{}, []int64{c.want})
		})
	}
	out, err := mvInfer(t, 13, mvNode("Size", 1, 1), Typed(ir.Float, mvShape(2, 3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Const == nil || out[0].Const.Int64s()[0] != 24 || out[0].Type.String() != "int64[]" {
		t.Errorf("known shape: Const %v type %s, want 24 int64[]", out[0].Const, out[0].Type)
	}
	out, err = mvInfer(t, 13, mvNode("Size", 1, 1), Typed(ir.Float, mvShape("n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Const != nil || out[0].Sym.String() != "[n]" {
		t.Errorf("symbolic shape: Const %v Sym %s, want no Const and [n]", out[0].Const, out[0].Sym)
	}
}
