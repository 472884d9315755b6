package ops

import (
	"math"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestClip(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	x := func() *ir.Tensor { return ewT([]int{5}, []float32{-2, -1, 0, 1, 2}) }
	f32 := func(v float32) *ir.Tensor { return ir.Scalar(v) }
	minMax := []*ir.Attribute{cAttrFloat("min", -1), cAttrFloat("max", 1)}
	cases := []ewCase{
		{name: "inputs", op: "Clip", opset: 11, in: []*ir.Tensor{x(), f32(-1), f32(1)},
			want: ewT([]int{5}, []float32{-1, -1, 0, 1, 1})},
		{name: "min only", op: "Clip", opset: 13, in: []*ir.Tensor{x(), f32(0.5)},
			want: ewT([]int{5}, []float32{0.5, 0.5, 0.5, 1, 2})},
		{name: "no bounds", op: "Clip", in: []*ir.Tensor{ewT([]int{3}, []float32{-inf, nan, inf})},
			want: ewT([]int{3}, []float32{-inf, nan, inf})},
		{name: "min above max gives max", op: "Clip", in: []*ir.Tensor{x(), f32(1), f32(-1)},
			want: ewT([]int{5}, []float32{-1, -1, -1, -1, -1})},
		{name: "one-element 1-D bound", op: "Clip", in: []*ir.Tensor{x(), ewT([]int{1}, []float32{0})},
			want: ewT([]int{5}, []float32{0, 0, 0, 1, 2})},
		{name: "int8", op: "Clip", opset: 12, in: []*ir.Tensor{ewT([]int{2, 2}, []int8{-128, -5, 5, 127}), ir.FromSlice(nil, []int8{-6}), ir.FromSlice(nil, []int8{6})},
			want: ewT([]int{2, 2}, []int8{-6, -5, 5, 6})},
		{name: "uint64 max only", op: "Clip", in: []*ir.Tensor{ewT([]int{2}, []uint64{1 << 63, 3}), nil, ir.FromSlice(nil, []uint64{1 << 62})},
			want: ewT([]int{2}, []uint64{1 << 62, 3})},
		{name: "int64 at opset 11 refused", op: "Clip", opset: 11, in: []*ir.Tensor{ewT([]int{1}, []int64{1})},
			wantErr: "element type int64"},
		{name: "float16", op: "Clip", in: []*ir.Tensor{ewF16([]int{3}, -3, 0.5, 3), ewF16(nil, -1), ewF16(nil, 1)},
			want: ewF16([]int{3}, -1, 0.5, 1)},
		{name: "float64", op: "Clip", in: []*ir.Tensor{ewT([]int{2}, []float64{-1e300, 1e300}), ir.Scalar(float64(-1)), ir.Scalar(float64(2))},
			want: ewT([]int{2}, []float64{-1, 2})},
		{name: "bound type mismatch", op: "Clip", in: []*ir.Tensor{x(), ir.Scalar(float64(0))},
			wantErr: "min has element type float64, the input float32"},
		{name: "bound not scalar", op: "Clip", in: []*ir.Tensor{x(), nil, ewT([]int{2}, []float32{0, 1})},
			wantErr: "max must be a scalar"},
		{name: "attributes at opset 6", op: "Clip", opset: 6, attrs: minMax, in: []*ir.Tensor{x()},
			want: ewT([]int{5}, []float32{-1, -1, 0, 1, 1})},
		{name: "default attributes are ±FLT_MAX", op: "Clip", opset: 10, in: []*ir.Tensor{ewT([]int{3}, []float64{-inf64(), 5, math.Inf(1)})},
			want: ewT([]int{3}, []float64{-math.MaxFloat32, 5, math.MaxFloat32})},
		{name: "attribute max only", op: "Clip", opset: 6, attrs: []*ir.Attribute{cAttrFloat("max", 0)},
			in: []*ir.Tensor{ewF16([]int{2}, -2, 2)}, want: ewF16([]int{2}, -2, 0)},
		{name: "attribute at opset 11 refused", op: "Clip", opset: 11, attrs: minMax, in: []*ir.Tensor{x()},
			wantErr: "min is an input from opset 11"},
		{name: "input at opset 10 refused", op: "Clip", opset: 10, in: []*ir.Tensor{x(), f32(0)},
			wantErr: "takes 1 inputs, got 2"},
		{name: "Clip-1 is Clip-6", op: "Clip", opset: 1, attrs: append(minMax, cAttrInts("consumed_inputs", 0)), in: []*ir.Tensor{x()},
			want: ewT([]int{5}, []float32{-1, -1, 0, 1, 1})},
	}
	cRunCases(t, cases)
}

// cRunCases runs single-output cases through cRun rather than ewRun: cRun
// takes omitted (nil) optional inputs.
func cRunCases(t *testing.T, cases []ewCase) {
	t.Helper()
	runCasesWith(t, cases, func(t *testing.T, c ewCase, opset int) (*ir.Tensor, error) {
		out, err := cRun(t, opset, cNode(c.op, len(c.in), 1, c.attrs...), c.in...)
		if err != nil {
			return nil, err
		}
		return out[0], nil
	})
}

func inf64() float64 { return math.Inf(1) }

func TestClipInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "symbolic", op: "Clip", in: []Value{ewTyped(ir.Float, "b", 4), ewTyped(ir.Float), ewTyped(ir.Float)},
			want: ewTyped(ir.Float, "b", 4)},
		{name: "omitted min", op: "Clip", in: []Value{ewTyped(ir.Int32, 2), {}, ewTyped(ir.Int32, 1)}, want: ewTyped(ir.Int32, 2)},
		{name: "bound type", op: "Clip", in: []Value{ewTyped(ir.Float, 2), ewTyped(ir.Double)}, wantErr: "min has element type float64"},
		{name: "bound shape", op: "Clip", in: []Value{ewTyped(ir.Float, 2), ewTyped(ir.Float, 3)}, wantErr: "min must be a scalar"},
		{name: "opset 6 float attr", op: "Clip", opset: 6, attrs: []*ir.Attribute{cAttrInt("min", 0)},
			in: []Value{ewTyped(ir.Float, 2)}, wantErr: `attribute "min" is int, want float`},
	})
}

func TestClipIntoInPlace(t *testing.T) {
	s, err := Lookup(DomainONNX, "Clip", 13)
	if err != nil {
		t.Fatal(err)
	}
	if s.RunInto == nil || len(s.InPlace) != 1 || s.InPlace[0] != 0 {
		t.Fatalf("Clip-13 RunInto %v InPlace %v", s.RunInto != nil, s.InPlace)
	}
	x := ewT([]int{2, 2}, []float64{-3, 0.5, 3, -0.25})
	in := []*ir.Tensor{x, ir.Scalar(float64(-1)), ir.Scalar(float64(1))}
	if err := s.RunInto(&Context{Opset: 13}, cNode("Clip", 3, 1), in, []*ir.Tensor{x}); err != nil {
		t.Fatal(err)
	}
	ewCheck(t, x, ewT([]int{2, 2}, []float64{-1, 0.5, 1, -0.25}))
	err = s.RunInto(&Context{Opset: 13}, cNode("Clip", 1, 1), []*ir.Tensor{x}, []*ir.Tensor{ewT([]int{4}, make([]float64, 4))})
	if err == nil || !strings.Contains(err.Error(), "output buffer is not float64[2 2]") {
		t.Fatalf("wrong-shape output: error %v", err)
	}
}
