package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// naivePRelu computes PRelu element by element, finding each element's
// slope by numpy's broadcasting rule (slope aligned to X's trailing dims,
// size-1 dims repeated).
func naivePRelu(x []float64, xShape []int, slope []float64, sShape []int) []float64 {
	y := make([]float64, len(x))
	idx := make([]int, len(xShape))
	for i, v := range x {
		rem := i
		for d := len(xShape) - 1; d >= 0; d-- {
			idx[d] = rem % xShape[d]
			rem /= xShape[d]
		}
		s := 0
		off := len(xShape) - len(sShape)
		for d, n := range sShape {
			s *= n
			if n != 1 {
				s += idx[off+d]
			}
		}
		y[i] = v
		if v < 0 {
			y[i] = v * slope[s]
		}
	}
	return y
}

func TestPReluByHand(t *testing.T) {
	nan := math.NaN()
	out, err := cRun(t, 16, cNode("PRelu", 2, 1), cF32([]int{5}, -2, -1, 0, 3, float32(nan)), cF32([]int{1}, 0.25))
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "scalar slope", out[0], []int{5}, []float64{-0.5, -0.25, 0, 3, nan}, 0)

	// Per channel, as nn.PReLU(num_parameters=C) on [N, C, L] exports: slope [C, 1].
	x := cF32([]int{1, 2, 3}, -1, 2, -3, -1, 2, -3)
	out, err = cRun(t, 9, cNode("PRelu", 2, 1), x, cF32([]int{2, 1}, 0.5, 2))
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "per channel", out[0], []int{1, 2, 3}, []float64{-0.5, 2, -1.5, -2, 2, -6}, 0)

	// Integers from opset 9.
	out, err = cRun(t, 9, cNode("PRelu", 2, 1), ir.FromSlice([]int{3}, []int64{-4, 0, 5}), ir.FromSlice([]int{3}, []int64{3, 3, 3}))
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "int64", out[0], []int{3}, []float64{-12, 0, 5}, 0)
	out, err = cRun(t, 16, cNode("PRelu", 2, 1), ir.FromSlice([]int{2}, []uint32{7, 0}), ir.FromSlice([]int{1}, []uint32{3}))
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Data.([]uint32); got[0] != 7 || got[1] != 0 {
		t.Errorf("uint32: %v, want [7 0]", got)
	}
}

func TestPReluVsNaive(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	xShape := []int{2, 3, 4, 5}
	x := cRand(r, xShape...)
	xs := cF64s(x.Float32s())
	for _, sShape := range [][]int{{1}, {5}, {4, 5}, {3, 1, 1}, {3, 4, 1}, {2, 3, 4, 5}, {1, 3, 1, 5}, {}} {
		slope := cRand(r, sShape...)
		want := naivePRelu(xs, xShape, cF64s(slope.Float32s()), sShape)
		for _, opset := range []int{1, 6, 7, 9, 16} {
			out, err := cRun(t, opset, cNode("PRelu", 2, 1), x, slope)
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, "float32", out[0], xShape, want, 1e-7) // the product rounds to float32
		}
		out, err := cRun(t, 16, cNode("PRelu", 2, 1), ir.FromSlice(xShape, xs), ir.FromSlice(sShape, cF64s(slope.Float32s())))
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, "float64", out[0], xShape, want, 0)
		h, hs := convertFloats(x, ir.Float16), convertFloats(slope, ir.Float16)
		hw := naivePRelu(cF64s(floatsOf(h)), xShape, cF64s(floatsOf(hs)), sShape)
		out, err = cRun(t, 16, cNode("PRelu", 2, 1), h, hs)
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, "float16", out[0], xShape, hw, 1e-3)
	}
}

func TestPReluErrors(t *testing.T) {
	f := func(shape ...int) Value { return Value{Type: Known(ir.Float, shape)} }
	i32 := Value{Type: Known(ir.Int32, []int{3})}
	for _, tc := range []struct {
		name  string
		opset int
		in    []Value
		want  string
	}{
		{"bidirectional", 16, []Value{f(3), f(2, 3)}, "slope of shape [2 3] does not broadcast to X [3]"},
		{"mismatch", 9, []Value{f(2, 3), f(2)}, "slope of shape [2] does not broadcast to X [2 3]"},
		{"types differ", 9, []Value{f(3), {Type: Known(ir.Double, []int{3})}}, "float64"},
		{"int before 9", 7, []Value{i32, i32}, "int32"},
	} {
		wantNodeError(t, tc.name, cNode("PRelu", 2, 1), tc.opset, tc.in, tc.want)
	}
	// Symbolic X: the output keeps its dims.
	s, _ := Lookup("", "PRelu", 16)
	out, err := s.Infer(cNode("PRelu", 2, 1), 16, []Value{Typed(ir.Float, sym("b", 8, "t")), Typed(ir.Float, sym(8, 1))})
	if err != nil || out[0].Type.String() != "float32[b, 8, t]" {
		t.Errorf("symbolic: %v, %v", out, err)
	}
}
