package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestUnary(t *testing.T) {
	nan := math.NaN()
	inf := math.Inf(1)
	v3 := []int{3}
	ewRunCases(t, []ewCase{
		{name: "sqrt", op: "Sqrt", in: []*ir.Tensor{ewT(v3, []float32{4, 2, -1})},
			want: ewT(v3, []float32{2, float32(math.Sqrt2), float32(nan)})},
		{name: "sqrt float16", op: "Sqrt", in: []*ir.Tensor{ewF16([]int{2}, 9, 0.25)},
			want: ewF16([]int{2}, 3, 0.5)},
		{name: "sqrt int refused", op: "Sqrt", in: []*ir.Tensor{ewT(v3, []int32{4, 2, 1})},
			wantErr: "element type int32"},
		{name: "neg float", op: "Neg", in: []*ir.Tensor{ewT([]int{2, 2}, []float32{1, -2, 0, float32(inf)})},
			want: ewT([]int{2, 2}, []float32{-1, 2, 0, float32(-inf)})},
		{name: "neg int64 scalar", op: "Neg", in: []*ir.Tensor{ir.Scalar(int64(5))}, want: ir.Scalar(int64(-5))},
		{name: "neg int8 wraps", op: "Neg", in: []*ir.Tensor{ewT([]int{2}, []int8{-128, 3})},
			want: ewT([]int{2}, []int8{-128, -3})},
		{name: "neg float16", op: "Neg", in: []*ir.Tensor{ewF16([]int{2}, 1.5, -3)}, want: ewF16([]int{2}, -1.5, 3)},
		{name: "neg uint refused", op: "Neg", in: []*ir.Tensor{ewT(v3, []uint32{4, 2, 1})},
			wantErr: "element type uint32"},
		{name: "erf", op: "Erf", in: []*ir.Tensor{ewT([]int{4}, []float32{0, 1, -1, 3})},
			want: ewT([]int{4}, []float32{0, 0.8427007929497149, -0.8427007929497149, 0.9999779095030014})},
		{name: "erf int", op: "Erf", in: []*ir.Tensor{ewT([]int{2}, []int32{0, 2})},
			want: ewT([]int{2}, []int32{0, 0})},
		{name: "erf not before opset 9", op: "Erf", opset: 8, in: []*ir.Tensor{ewT([]int{1}, []float32{0})},
			wantErr: "unsupported opset version"},
		{name: "abs", op: "Abs", in: []*ir.Tensor{ewT([]int{4}, []float64{-1.5, 2, math.Copysign(0, -1), -inf})},
			want: ewT([]int{4}, []float64{1.5, 2, 0, inf})},
		{name: "abs float32", op: "Abs", in: []*ir.Tensor{ewT([]int{3}, []float32{-1.5, 2, float32(nan)})},
			want: ewT([]int{3}, []float32{1.5, 2, float32(nan)})},
		{name: "abs int16", op: "Abs", in: []*ir.Tensor{ewT([]int{2}, []int16{-7, 7})}, want: ewT([]int{2}, []int16{7, 7})},
		{name: "abs uint8", op: "Abs", in: []*ir.Tensor{ewT([]int{2}, []uint8{200, 7})}, want: ewT([]int{2}, []uint8{200, 7})},
		{name: "abs float16", op: "Abs", in: []*ir.Tensor{ewF16([]int{2}, -2.5, 1)}, want: ewF16([]int{2}, 2.5, 1)},
		{name: "exp", op: "Exp", in: []*ir.Tensor{ewT(v3, []float32{0, 1, -inf32()})},
			want: ewT(v3, []float32{1, float32(math.E), 0})},
		{name: "log", op: "Log", in: []*ir.Tensor{ewT(v3, []float64{1, math.E, 0})},
			want: ewT(v3, []float64{0, 1, -inf})},
		{name: "reciprocal", op: "Reciprocal", in: []*ir.Tensor{ewT(v3, []float32{2, -0.25, 0})},
			want: ewT(v3, []float32{0.5, -4, float32(inf)})},
		{name: "relu", op: "Relu", in: []*ir.Tensor{ewT([]int{4}, []float32{-1, 0, 2.5, float32(nan)})},
			want: ewT([]int{4}, []float32{0, 0, 2.5, float32(nan)})},
		{name: "relu float16", op: "Relu", in: []*ir.Tensor{ewF16([]int{3}, -1, 0, 2.5)},
			want: ewF16([]int{3}, 0, 0, 2.5)},
		{name: "relu int32 opset 14", op: "Relu", opset: 14, in: []*ir.Tensor{ewT([]int{2}, []int32{-3, 3})},
			want: ewT([]int{2}, []int32{0, 3})},
		{name: "relu int32 opset 13", op: "Relu", opset: 13, in: []*ir.Tensor{ewT([]int{2}, []int32{-3, 3})},
			wantErr: "element type int32"},
		{name: "sigmoid", op: "Sigmoid", in: []*ir.Tensor{ewT([]int{4}, []float64{0, 1, -1000, 1000})},
			want: ewT([]int{4}, []float64{0.5, 0.7310585786300049, 0, 1})},
		{name: "tanh", op: "Tanh", in: []*ir.Tensor{ewT(v3, []float32{0, 1, -20})},
			want: ewT(v3, []float32{0, 0.7615941559557649, -1})},
		{name: "ceil", op: "Ceil", in: []*ir.Tensor{ewT([]int{5}, []float32{-1.5, 1.2, 2, -0.5, float32(inf)})},
			want: ewT([]int{5}, []float32{-1, 2, 2, float32(math.Copysign(0, -1)), float32(inf)})},
		{name: "floor", op: "Floor", in: []*ir.Tensor{ewT([]int{4}, []float64{-1.5, 1.2, 2, -0.5})},
			want: ewT([]int{4}, []float64{-2, 1, 2, -1})},
		{name: "floor float16", op: "Floor", in: []*ir.Tensor{ewF16([]int{2}, 2.5, -2.5)}, want: ewF16([]int{2}, 2, -3)},
		{name: "ceil int refused", op: "Ceil", in: []*ir.Tensor{ewT([]int{1}, []int32{1})}, wantErr: "element type int32"},
		{name: "empty", op: "Exp", in: []*ir.Tensor{ewT([]int{0, 4}, []float32{})}, want: ewT([]int{0, 4}, []float32{})},
		{name: "bad data", op: "Exp", in: []*ir.Tensor{{DType: ir.Float, Shape: []int{2}, Data: []float64{1, 2}}},
			wantErr: "holds []float64"},
	})
}

func inf32() float32 { return float32(math.Inf(1)) }

func TestUnaryInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "symbolic", op: "Erf", in: []Value{ewTyped(ir.Float, "batch", "seq", 3072)},
			want: ewTyped(ir.Float, "batch", "seq", 3072)},
		{name: "unknown rank", op: "Sqrt", in: []Value{UnknownRank(ir.Double)}, want: UnknownRank(ir.Double)},
		{name: "type", op: "Exp", in: []Value{ewTyped(ir.Int64, 2)}, wantErr: "element type int64"},
		{name: "not", op: "Not", in: []Value{ewTyped(ir.Bool, "n")}, want: ewTyped(ir.Bool, "n")},
	})
}
