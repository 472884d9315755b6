package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestSliceRun(t *testing.T) {
	x := mvIota(3, 4) // [[0 1 2 3] [4 5 6 7] [8 9 10 11]]
	big := int64(math.MaxInt64)
	cases := []struct {
		name                      string
		starts, ends, axes, steps []int64
		shape                     []int
		want                      []float32
	}{
		{"basic", []int64{1, 0}, []int64{2, 3}, nil, nil, []int{1, 3}, []float32{4, 5, 6}},
		{"axes and steps", []int64{0, 1}, []int64{3, 4}, []int64{0, 1}, []int64{2, 2}, []int{2, 2}, []float32{1, 3, 9, 11}},
		{"negative axes", []int64{1}, []int64{big}, []int64{-1}, nil, []int{3, 3}, []float32{1, 2, 3, 5, 6, 7, 9, 10, 11}},
		{"negative starts", []int64{-2}, []int64{-1}, []int64{1}, nil, []int{3, 1}, []float32{2, 6, 10}},
		{"end out of bounds", []int64{1}, []int64{1000}, []int64{0}, nil, []int{2, 4}, []float32{4, 5, 6, 7, 8, 9, 10, 11}},
		{"start out of bounds", []int64{1000}, []int64{1001}, []int64{1}, nil, []int{3, 0}, []float32{}},
		{"negative step", []int64{-1}, []int64{-big}, []int64{1}, []int64{-1}, []int{3, 4}, []float32{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}},
		{"negative step 2", []int64{20, 10}, []int64{0, 1}, []int64{0, 1}, []int64{-1, -2}, []int{2, 1}, []float32{11, 7}},
		{"negative step clamp", []int64{2, -1}, []int64{-5, 0}, []int64{0, 1}, []int64{-2, -3}, []int{2, 1}, []float32{11, 3}},
		{"empty range", []int64{2}, []int64{1}, []int64{0}, nil, []int{0, 4}, []float32{}},
		{"huge step", []int64{0}, []int64{big}, []int64{1}, []int64{big}, []int{3, 1}, []float32{0, 4, 8}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []*ir.Tensor{x, mvI64(c.starts...), mvI64(c.ends...)}
			if c.axes != nil || c.steps != nil {
				if c.axes == nil {
					c.axes = []int64{0, 1}[:len(c.starts)]
				}
				in = append(in, mvI64(c.axes...))
			}
			if c.steps != nil {
				in = append(in, mvI64(c.steps...))
			}
			out := mvRun(t, 13, mvNode("Slice", len(in), 1), in...)
			mvWant(t, out[0], c.shape, c.want)
		})
	}
	// Opset 1 form: attributes.
	out := mvRun(t, 7, mvNode("Slice", 1, 1, mvInts("starts", 1), mvInts("ends", 3), mvInts("axes", 1)), x)
	mvWant(t, out[0], []int{3, 2}, []float32{1, 2, 5, 6, 9, 10})
	// Omitted optional axes with steps given, int32 params, string data.
	s := ir.FromSlice([]int{5}, []string{"a", "b", "c", "d", "e"})
	out = mvRun(t, 10, mvNode("Slice", 3, 1), s, ir.FromSlice([]int{1}, []int32{1}), ir.FromSlice([]int{1}, []int32{4}))
	mvWant(t, out[0], []int{3}, []string{"b", "c", "d"})
	n := &ir.Node{Name: "n", OpType: "Slice", Inputs: []string{"x", "s", "e", "", "st"}, Outputs: []string{"y"}}
	out = mvRun(t, 13, n, s, mvI64(-1), mvI64(-6), nil, mvI64(-2))
	mvWant(t, out[0], []int{3}, []string{"e", "c", "a"})
}

func TestSliceErrors(t *testing.T) {
	x := mvIota(3, 4)
	mvErr(t, 13, mvNode("Slice", 5, 1), "contain 0", x, mvI64(0), mvI64(1), mvI64(0), mvI64(0))
	mvErr(t, 13, mvNode("Slice", 4, 1), "appears twice", x, mvI64(0, 0), mvI64(1, 1), mvI64(1, 1))
	mvErr(t, 13, mvNode("Slice", 3, 1), "differ in length", x, mvI64(0, 0), mvI64(1))
	mvErr(t, 10, mvNode("Slice", 4, 1), "needs opset 11", x, mvI64(0), mvI64(1), mvI64(-1))
	mvErr(t, 13, mvNode("Slice", 4, 1), "out of range", x, mvI64(0), mvI64(1), mvI64(2))
	mvErr(t, 7, mvNode("Slice", 1, 1, mvInts("starts", 0)), "attribute ends is required", x)
}

func TestSliceInfer(t *testing.T) {
	x := Typed(ir.Float, mvShape("batch", "seq", 192))
	big := int64(math.MaxInt64)
	cases := []struct {
		name string
		in   []Value
		want string
	}{
		{"whole symbolic axis kept", []Value{x, mvConst(mvI64(0, 64)), mvConst(mvI64(big, 128)), mvConst(mvI64(0, 2))}, "float32[batch, seq, 64]"},
		{"partial symbolic axis", []Value{x, mvConst(mvI64(1)), mvConst(mvI64(big)), mvConst(mvI64(1))}, "float32[batch, ?, 192]"},
		{"unknown starts", []Value{x, Typed(ir.Int64, mvShape(1)), mvConst(mvI64(big)), mvConst(mvI64(-1))}, "float32[batch, seq, ?]"},
		{"unknown axes", []Value{x, mvConst(mvI64(0)), mvConst(mvI64(1)), Typed(ir.Int64, mvShape(1))}, "float32[?, ?, ?]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := mvInfer(t, 13, mvNode("Slice", len(c.in), 1), c.in...)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Type.String(); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
	// Cutting a fixed causal-mask buffer to a symbolic length.
	mask := Typed(ir.Bool, mvShape(1, 1, 64, 64))
	seq := symValue(ir.Int64, mvShape("seq", "seq"), false)
	out, err := mvInfer(t, 13, mvNode("Slice", 4, 1), mask, mvConst(mvI64(0, 0)), seq, mvConst(mvI64(2, 3)))
	if err != nil || out[0].Type.String() != "bool[1, 1, seq, seq]" {
		t.Fatalf("mask slice: %v %v", out, err)
	}
	out, err = mvInfer(t, 13, mvNode("Slice", 4, 1), mask, mvConst(mvI64(1)), symValue(ir.Int64, mvShape("seq"), false), mvConst(mvI64(2)))
	if err != nil || out[0].Type.String() != "bool[1, 1, ?, 64]" {
		t.Fatalf("offset mask slice: %v %v", out, err)
	}
	// Slicing a Sym shape vector.
	sv := symValue(ir.Int64, mvShape("batch", "seq", 64), false)
	out, err = mvInfer(t, 13, mvNode("Slice", 3, 1), sv, mvConst(mvI64(-2)), mvConst(mvI64(big)))
	if err != nil || out[0].Sym.String() != "[seq, 64]" {
		t.Fatalf("sym slice: %v %v", out, err)
	}
}
