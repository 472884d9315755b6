package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestWhere(t *testing.T) {
	b := func(shape []int, v ...bool) *ir.Tensor { return ewT(shape, v) }
	negInf := float32(-1e9)
	ewRunCases(t, []ewCase{
		{name: "same shape", op: "Where",
			in:   []*ir.Tensor{b([]int{2, 2}, true, false, true, true), ewT([]int{2, 2}, []float32{1, 2, 3, 4}), ewT([]int{2, 2}, []float32{9, 8, 7, 6})},
			want: ewT([]int{2, 2}, []float32{1, 8, 3, 4})},
		{name: "onnx where_long_example", op: "Where",
			in:   []*ir.Tensor{b([]int{2, 2}, true, false, true, true), ewT([]int{2, 2}, []int64{1, 2, 3, 4}), ewT([]int{2, 2}, []int64{9, 8, 7, 6})},
			want: ewT([]int{2, 2}, []int64{1, 8, 3, 4})},
		{name: "masked fill: mask [s,s], scalar fill, scores [b,s,s]", op: "Where",
			in: []*ir.Tensor{b([]int{2, 2}, false, true, false, false), ir.Scalar(negInf),
				ewT([]int{2, 2, 2}, []float32{1, 2, 3, 4, 5, 6, 7, 8})},
			want: ewT([]int{2, 2, 2}, []float32{1, negInf, 3, 4, 5, negInf, 7, 8})},
		{name: "three-way [2,1]?[1,3]:[3]", op: "Where",
			in:   []*ir.Tensor{b([]int{2, 1}, true, false), ewT([]int{1, 3}, []int32{1, 2, 3}), ewT([]int{3}, []int32{-1, -2, -3})},
			want: ewT([]int{2, 3}, []int32{1, 2, 3, -1, -2, -3})},
		{name: "row condition [3] with x [2,1], y scalar", op: "Where",
			in:   []*ir.Tensor{b([]int{3}, true, false, true), ewT([]int{2, 1}, []float64{5, 6}), ir.Scalar(0.0)},
			want: ewT([]int{2, 3}, []float64{5, 0, 5, 6, 0, 6})},
		{name: "strings", op: "Where",
			in:   []*ir.Tensor{b([]int{2}, false, true), ewT([]int{2}, []string{"a", "b"}), ewT([]int{1}, []string{"z"})},
			want: ewT([]int{2}, []string{"z", "b"})},
		{name: "bool values", op: "Where",
			in:   []*ir.Tensor{b([]int{2}, false, true), b([]int{2}, true, true), b(nil, false)},
			want: b([]int{2}, false, true)},
		{name: "float16", op: "Where",
			in:   []*ir.Tensor{b([]int{2}, true, false), ewF16([]int{2}, 1.5, 2.5), ewF16(nil, -1)},
			want: ewF16([]int{2}, 1.5, -1)},
		{name: "empty", op: "Where",
			in:   []*ir.Tensor{b([]int{0, 2}), ewT([]int{2}, []float32{1, 2}), ewT([]int{1}, []float32{3})},
			want: ewT([]int{0, 2}, []float32{})},
		{name: "condition not bool", op: "Where",
			in:      []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []float32{1}), ewT([]int{1}, []float32{1})},
			wantErr: "condition has element type int32"},
		{name: "x and y differ", op: "Where",
			in:      []*ir.Tensor{b([]int{1}, true), ewT([]int{1}, []float32{1}), ewT([]int{1}, []int64{1})},
			wantErr: "inputs have different element types float32 and int64"},
		{name: "not broadcastable", op: "Where",
			in:      []*ir.Tensor{b([]int{2}, true, true), ewT([]int{3}, []float32{1, 2, 3}), ewT([]int{1}, []float32{1})},
			wantErr: "not broadcastable"},
		{name: "before opset 9", op: "Where", opset: 8,
			in:      []*ir.Tensor{b([]int{1}, true), ewT([]int{1}, []float32{1}), ewT([]int{1}, []float32{1})},
			wantErr: "unsupported opset version"},
	})
}

func TestWhereInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "three-way symbolic", op: "Where",
			in:   []Value{ewTyped(ir.Bool, "seq", "seq"), ewTyped(ir.Float, "batch", 12, "seq", "seq"), ewTyped(ir.Float)},
			want: ewTyped(ir.Float, "batch", 12, "seq", "seq")},
		{name: "unknown rank condition", op: "Where",
			in:   []Value{UnknownRank(ir.Bool), ewTyped(ir.Int64, 2), ewTyped(ir.Int64, 2)},
			want: UnknownRank(ir.Int64)},
		{name: "condition type", op: "Where",
			in:      []Value{ewTyped(ir.Float, 2), ewTyped(ir.Float, 2), ewTyped(ir.Float, 2)},
			wantErr: "condition has element type float32, want bool"},
	})
}
