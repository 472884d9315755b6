package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestReshapeRun(t *testing.T) {
	x := mvIota(2, 3, 4)
	data := x.Float32s()
	cases := []struct {
		name  string
		opset int
		attrs []*ir.Attribute
		in    *ir.Tensor
		shape []int64
		want  []int
	}{
		{"reordered", 13, nil, x, []int64{4, 2, 3}, []int{4, 2, 3}},
		{"zero copies", 13, nil, x, []int64{0, 12}, []int{2, 12}},
		{"minus one", 13, nil, x, []int64{-1, 6}, []int{4, 6}},
		{"zero and minus one", 7, nil, x, []int64{0, -1, 2}, []int{2, 6, 2}},
		{"extended", 14, nil, x, []int64{2, 3, 2, 2}, []int{2, 3, 2, 2}},
		{"one dim", 14, nil, x, []int64{24}, []int{24}},
		{"scalar", 14, nil, mvIota(1, 1), []int64{}, []int{}},
		{"allowzero empty", 14, []*ir.Attribute{mvInt("allowzero", 1)}, ir.FromSlice([]int{0, 3, 4}, []float32{}), []int64{3, 4, 0}, []int{3, 4, 0}},
		{"allowzero=0 copy", 14, []*ir.Attribute{mvInt("allowzero", 0)}, ir.FromSlice([]int{0, 3, 4}, []float32{}), []int64{0, 12}, []int{0, 12}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("Reshape", 2, 1, c.attrs...), c.in, mvI64(c.shape...))
			if shapeProd(c.want) == 24 {
				mvWant(t, out[0], c.want, data)
			} else {
				mvWant(t, out[0], c.want, c.in.Data)
			}
		})
	}
	// The output is a copy.
	out := mvRun(t, 13, mvNode("Reshape", 2, 1), x, mvI64(24))
	out[0].Float32s()[0] = 99
	if data[0] != 0 {
		t.Error("output aliases input")
	}
}

func TestReshapeErrors(t *testing.T) {
	x := mvIota(2, 3, 4)
	n := mvNode("Reshape", 2, 1)
	mvErr(t, 13, n, "cannot reshape [2, 3, 4] to [5, -1]", x, mvI64(5, -1))
	mvErr(t, 13, n, "cannot reshape [2, 3, 4] to [5, 5]: element counts differ", x, mvI64(5, 5))
	mvErr(t, 13, n, "more than one -1", x, mvI64(-1, -1))
	mvErr(t, 13, n, "invalid dim -2", x, mvI64(-2, 12))
	mvErr(t, 14, mvNode("Reshape", 2, 1, mvInt("allowzero", 1)), "both 0 and -1", x, mvI64(0, -1))
	mvErr(t, 13, n, "shape must be int64", x, ir.FromSlice([]int{1}, []int32{24}))
	mvErr(t, 13, n, "the input [2, 3, 4] has rank 3", x, mvI64(24, 1, 1, 0))
	_, err := mvInfer(t, 13, n, Typed(ir.Float, mvShape("b", "s", 64)), mvConst(mvI64(0, 0, 5, 16)))
	if err == nil {
		t.Error("Infer should reject [b, s, 64] -> [b, s, 5, 16]")
	}
}

func TestReshapeInfer(t *testing.T) {
	x := Typed(ir.Float, mvShape("batch", "seq", 64))
	cases := []struct {
		name  string
		shape Value
		want  string
	}{
		{"sym", symValue(ir.Int64, mvShape("batch", "seq", 4, 16), false), "float32[batch, seq, 4, 16]"},
		{"const zeros", mvConst(mvI64(0, 0, 4, 16)), "float32[batch, seq, 4, 16]"},
		{"minus one inferred", symValue(ir.Int64, mvShape("batch", SymLiteral(-1).Param, 4, 16), false), "float32[batch, seq, 4, 16]"},
		{"minus one const", mvConst(mvI64(0, -1, 16)), "float32[batch, ?, 16]"},
		{"minus one merged", mvConst(mvI64(-1, 64)), "float32[?, 64]"},
		{"minus one to seq", mvConst(mvI64(0, -1, 64)), "float32[batch, seq, 64]"},
		{"unknown contents", Typed(ir.Int64, mvShape(3)), "float32[?, ?, ?]"},
		{"unknown length", Typed(ir.Int64, mvShape(nil)), "float32[…]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := mvInfer(t, 13, mvNode("Reshape", 2, 1), x, c.shape)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Type.String(); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

func TestFlatten(t *testing.T) {
	x := mvIota(2, 3, 4)
	cases := []struct {
		opset int
		axis  int64
		want  []int
	}{
		{13, 0, []int{1, 24}}, {13, 1, []int{2, 12}}, {9, 2, []int{6, 4}}, {13, 3, []int{24, 1}},
		{11, -1, []int{6, 4}}, {13, -3, []int{1, 24}},
	}
	for _, c := range cases {
		out := mvRun(t, c.opset, mvNode("Flatten", 1, 1, mvInt("axis", c.axis)), x)
		mvWant(t, out[0], c.want, x.Data)
	}
	out := mvRun(t, 13, mvNode("Flatten", 1, 1), x)
	mvWant(t, out[0], []int{2, 12}, x.Data)
	mvErr(t, 13, mvNode("Flatten", 1, 1, mvInt("axis", 4)), "axis 4 is out of range", x)
	mvErr(t, 9, mvNode("Flatten", 1, 1, mvInt("axis", -1)), "needs opset 11", x)
	v, err := mvInfer(t, 13, mvNode("Flatten", 1, 1, mvInt("axis", 2)), Typed(ir.Float, mvShape("batch", 1, "seq", 64)))
	if err != nil || v[0].Type.String() != "float32[batch, ?]" {
		t.Errorf("got %v %v", v, err)
	}
}

// TestSymbolicShapeChain follows a PyTorch export's shape subgraph:
// Shape -> Gather -> Unsqueeze -> Concat -> Reshape on x[batch, seq, 64].
func TestSymbolicShapeChain(t *testing.T) {
	x := Typed(ir.Float, mvShape("batch", "seq", 64))
	infer := func(op string, opset int, attrs []*ir.Attribute, in ...Value) Value {
		t.Helper()
		out, err := mvInfer(t, opset, mvNode(op, len(in), 1, attrs...), in...)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return out[0]
	}
	for _, opset := range []int{11, 13, 17} {
		shape := infer("Shape", opset, nil, x)
		var parts []Value
		for i := int64(0); i < 2; i++ {
			g := infer("Gather", opset, []*ir.Attribute{mvInt("axis", 0)}, shape, mvConst(ir.Scalar(i)))
			var u Value
			if opset >= 13 {
				u = infer("Unsqueeze", opset, nil, g, mvConst(mvI64(0)))
			} else {
				u = infer("Unsqueeze", opset, []*ir.Attribute{mvInts("axes", 0)}, g)
			}
			parts = append(parts, u)
		}
		parts = append(parts, mvConst(mvI64(4)), mvConst(mvI64(-1)))
		cat := infer("Concat", opset, []*ir.Attribute{mvInt("axis", 0)}, parts...)
		if cat.Sym.String() != "[batch, seq, 4, -1]" {
			t.Fatalf("opset %d: concat Sym %v", opset, cat.Sym)
		}
		r := infer("Reshape", opset, nil, x, cat)
		if got := r.Type.String(); got != "float32[batch, seq, 4, 16]" {
			t.Errorf("opset %d: reshape gave %s", opset, got)
		}
		tr := infer("Transpose", opset, []*ir.Attribute{mvInts("perm", 0, 2, 1, 3)}, r)
		if got := tr.Type.String(); got != "float32[batch, 4, seq, 16]" {
			t.Errorf("opset %d: transpose gave %s", opset, got)
		}
	}
}

func TestReshapeAllowZeroMismatch(t *testing.T) {
	empty := ir.FromSlice([]int{0, 3, 4}, []float32{})
	// Without allowzero the trailing 0 copies the input's 4: 48 elements, not 0.
	mvErr(t, 14, mvNode("Reshape", 2, 1), "element counts differ", empty, mvI64(3, 4, 0))
}

// TestReshapeOpset1 covers Reshape-1, whose target is attribute shape.
func TestReshapeOpset1(t *testing.T) {
	x := mvIota(2, 3, 4)
	out := mvRun(t, 1, mvNode("Reshape", 1, 1, mvInts("shape", 0, -1)), x)
	mvWant(t, out[0], []int{2, 12}, x.Data)
	mvErr(t, 4, mvNode("Reshape", 1, 1), `missing required attribute "shape"`, x)
}
