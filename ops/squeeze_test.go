package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestSqueezeUnsqueezeRun(t *testing.T) {
	x := mvIota(1, 3, 1, 2)
	data := x.Float32s()
	cases := []struct {
		name  string
		op    string
		opset int
		attrs []*ir.Attribute
		axes  *ir.Tensor // input form (opset 13)
		in    *ir.Tensor
		shape []int
	}{
		{"squeeze all", "Squeeze", 13, nil, nil, x, []int{3, 2}},
		{"squeeze attr", "Squeeze", 11, []*ir.Attribute{mvInts("axes", 2)}, nil, x, []int{1, 3, 2}},
		{"squeeze attr negative", "Squeeze", 11, []*ir.Attribute{mvInts("axes", -4, -2)}, nil, x, []int{3, 2}},
		{"squeeze attr opset7", "Squeeze", 7, []*ir.Attribute{mvInts("axes", 0)}, nil, x, []int{3, 1, 2}},
		{"squeeze input", "Squeeze", 13, nil, mvI64(0), x, []int{3, 1, 2}},
		{"squeeze empty axes input", "Squeeze", 13, nil, ir.FromSlice([]int{0}, []int64{}), x, []int{3, 2}},
		{"squeeze input negative", "Squeeze", 13, nil, mvI64(-2, 0), x, []int{3, 2}},
		{"unsqueeze attr", "Unsqueeze", 11, []*ir.Attribute{mvInts("axes", 0, 5)}, nil, x, []int{1, 1, 3, 1, 2, 1}},
		{"unsqueeze attr negative", "Unsqueeze", 11, []*ir.Attribute{mvInts("axes", -1)}, nil, x, []int{1, 3, 1, 2, 1}},
		{"unsqueeze input", "Unsqueeze", 13, nil, mvI64(1), x, []int{1, 1, 3, 1, 2}},
		{"unsqueeze input unsorted", "Unsqueeze", 13, nil, mvI64(5, 4), x, []int{1, 3, 1, 2, 1, 1}},
		{"unsqueeze input negative", "Unsqueeze", 18, nil, mvI64(-1, -6), x, []int{1, 1, 3, 1, 2, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nIn := 1
			in := []*ir.Tensor{c.in}
			if c.axes != nil {
				nIn = 2
				in = append(in, c.axes)
			}
			out := mvRun(t, c.opset, mvNode(c.op, nIn, 1, c.attrs...), in...)
			mvWant(t, out[0], c.shape, data)
		})
	}
	out := mvRun(t, 13, mvNode("Unsqueeze", 2, 1), ir.Scalar(int64(7)), mvI64(0))
	mvWant(t, out[0], []int{1}, []int64{7})
	out = mvRun(t, 13, mvNode("Squeeze", 1, 1), mvI64(7))
	mvWant(t, out[0], []int{}, []int64{7})
}

func TestSqueezeUnsqueezeErrors(t *testing.T) {
	x := mvIota(1, 3)
	mvErr(t, 13, mvNode("Squeeze", 2, 1), "its size is 3, not 1", x, mvI64(1))
	mvErr(t, 11, mvNode("Squeeze", 1, 1, mvInts("axes", 2)), "axis 2 is out of range for rank 2", x)
	mvErr(t, 7, mvNode("Squeeze", 1, 1, mvInts("axes", -2)), "needs opset 11", x)
	mvErr(t, 11, mvNode("Unsqueeze", 1, 1, mvInts("axes", 0, 0)), "appears twice", x)
	mvErr(t, 11, mvNode("Unsqueeze", 1, 1), "axes are required", x)
	mvErr(t, 13, mvNode("Unsqueeze", 2, 1), "axes must be int32 or int64", x, mvF32([]int{1}, 0))
	mvErr(t, 13, mvNode("Unsqueeze", 2, 1), "axis 4 is out of range for rank 3", x, mvI64(4))
	if _, err := mvInfer(t, 13, mvNode("Squeeze", 2, 1), Typed(ir.Float, mvShape("b", 3)), mvConst(mvI64(1))); err == nil {
		t.Error("Infer should reject squeezing a size-3 axis")
	}
}

func TestSqueezeUnsqueezeInfer(t *testing.T) {
	x := Typed(ir.Float, mvShape("batch", 1, "seq"))
	cases := []struct {
		name  string
		op    string
		opset int
		attrs []*ir.Attribute
		in    []Value
		want  string
	}{
		{"squeeze const axes", "Squeeze", 13, nil, []Value{x, mvConst(mvI64(1))}, "float32[batch, seq]"},
		{"squeeze symbolic axis", "Squeeze", 13, nil, []Value{x, mvConst(mvI64(0))}, "float32[1, seq]"},
		{"squeeze no axes symbolic", "Squeeze", 13, nil, []Value{x}, "float32[…]"},
		{"squeeze unknown axes", "Squeeze", 13, nil, []Value{x, Typed(ir.Int64, mvShape(2))}, "float32[?]"},
		{"unsqueeze attr", "Unsqueeze", 11, []*ir.Attribute{mvInts("axes", -1)}, []Value{x}, "float32[batch, 1, seq, 1]"},
		{"unsqueeze unknown axes", "Unsqueeze", 13, nil, []Value{x, Typed(ir.Int64, mvShape(1))}, "float32[?, ?, ?, ?]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := mvInfer(t, c.opset, mvNode(c.op, len(c.in), 1, c.attrs...), c.in...)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Type.String(); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
	// Sym passes through Unsqueeze of a scalar and Squeeze to a scalar.
	s := symValue(ir.Int64, mvShape("seq"), true)
	out, err := mvInfer(t, 13, mvNode("Unsqueeze", 2, 1), s, mvConst(mvI64(0)))
	if err != nil || out[0].Type.String() != "int64[1]" || out[0].Sym.String() != "[seq]" {
		t.Fatalf("unsqueeze sym: %v %v", out, err)
	}
	out, err = mvInfer(t, 13, mvNode("Squeeze", 2, 1), out[0], mvConst(mvI64(0)))
	if err != nil || out[0].Type.String() != "int64[]" || out[0].Sym.String() != "[seq]" {
		t.Fatalf("squeeze sym: %v %v", out, err)
	}
}
