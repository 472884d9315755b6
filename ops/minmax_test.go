package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestMinMaxSumMean(t *testing.T) {
	nan := float32(math.NaN())
	a := ewT([]int{3}, []float32{3, 2, 1})
	b := ewT([]int{3}, []float32{1, 4, 4})
	c := ewT([]int{3}, []float32{2, 5, 3})
	ewRunCases(t, []ewCase{
		// The ONNX max/min/sum/mean examples.
		{name: "max 3 inputs", op: "Max", in: []*ir.Tensor{a, b, c}, want: ewT([]int{3}, []float32{3, 5, 4})},
		{name: "min 3 inputs", op: "Min", in: []*ir.Tensor{a, b, c}, want: ewT([]int{3}, []float32{1, 2, 1})},
		{name: "sum 3 inputs", op: "Sum", in: []*ir.Tensor{a, b, c}, want: ewT([]int{3}, []float32{6, 11, 8})},
		{name: "mean 3 inputs", op: "Mean", in: []*ir.Tensor{a, b, c}, want: ewT([]int{3}, []float32{2, 11.0 / 3, 8.0 / 3})},
		{name: "max one input", op: "Max", in: []*ir.Tensor{a}, want: a},
		{name: "mean one input", op: "Mean", in: []*ir.Tensor{a}, want: a},
		{name: "max NaN propagates", op: "Max",
			in:   []*ir.Tensor{ewT([]int{3}, []float32{nan, 1, 2}), ewT([]int{3}, []float32{1, nan, 3})},
			want: ewT([]int{3}, []float32{nan, nan, 3})},
		{name: "min NaN propagates", op: "Min",
			in:   []*ir.Tensor{ewT([]int{3}, []float32{nan, 1, 2}), ewT([]int{3}, []float32{1, nan, 3})},
			want: ewT([]int{3}, []float32{nan, nan, 2})},
		{name: "max broadcast [2,1],[3],scalar", op: "Max",
			in:   []*ir.Tensor{ewT([]int{2, 1}, []float64{0, 10}), ewT([]int{3}, []float64{-1, 5, 20}), ir.Scalar(1.0)},
			want: ewT([]int{2, 3}, []float64{1, 5, 20, 10, 10, 20})},
		{name: "sum broadcast first input smaller", op: "Sum",
			in:   []*ir.Tensor{ewT([]int{1}, []float32{1}), ewT([]int{2, 2}, []float32{1, 2, 3, 4})},
			want: ewT([]int{2, 2}, []float32{2, 3, 4, 5})},
		{name: "min int64 opset 12", op: "Min", opset: 12,
			in:   []*ir.Tensor{ewT([]int{3}, []int64{math.MinInt64, 5, 0}), ewT([]int{3}, []int64{0, 4, 0})},
			want: ewT([]int{3}, []int64{math.MinInt64, 4, 0})},
		{name: "max uint8", op: "Max",
			in:   []*ir.Tensor{ewT([]int{2}, []uint8{200, 1}), ewT([]int{2}, []uint8{3, 255})},
			want: ewT([]int{2}, []uint8{200, 255})},
		{name: "max int at opset 11", op: "Max", opset: 11,
			in: []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []int32{1})}, wantErr: "element type int32"},
		{name: "max float16", op: "Max",
			in:   []*ir.Tensor{ewF16([]int{2}, 1, -2), ewF16([]int{2}, 0.5, -1)},
			want: ewF16([]int{2}, 1, -1)},
		{name: "sum int refused", op: "Sum",
			in: []*ir.Tensor{ewT([]int{1}, []int32{1})}, wantErr: "element type int32"},
		{name: "mixed types", op: "Max",
			in: []*ir.Tensor{ewT([]int{1}, []float32{1}), ewT([]int{1}, []float64{1})}, wantErr: "inputs have different element types float32 and float64"},
		{name: "empty", op: "Min",
			in: []*ir.Tensor{ewT([]int{0, 3}, []float32{}), ewT([]int{3}, []float32{1, 2, 3})}, want: ewT([]int{0, 3}, []float32{})},
	})
	if _, err := ewRun(t, "Max", 13, nil); err == nil {
		t.Error("Max with no inputs succeeded")
	}
}

func TestMinMaxInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "variadic symbolic", op: "Max",
			in:   []Value{ewTyped(ir.Float, "batch", 1), ewTyped(ir.Float, 1, "seq"), ewTyped(ir.Float, 1)},
			want: ewTyped(ir.Float, "batch", "seq")},
		{name: "one unknown rank", op: "Sum",
			in:   []Value{ewTyped(ir.Float, 2), UnknownRank(ir.Float)},
			want: UnknownRank(ir.Float)},
	})
}
