package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestCumSum(t *testing.T) {
	x := func() *ir.Tensor { return ewT([]int{2, 3}, []float64{1, 2, 3, 4, 5, 6}) }
	v := func() *ir.Tensor { return ewT([]int{5}, []int32{1, 2, 3, 4, 5}) }
	ax := func(a int64) *ir.Tensor { return ir.Scalar(a) }
	excl, rev := cAttrInt("exclusive", 1), cAttrInt("reverse", 1)
	cases := []ewCase{
		{name: "1-D", op: "CumSum", opset: 11, in: []*ir.Tensor{v(), ax(0)}, want: ewT([]int{5}, []int32{1, 3, 6, 10, 15})},
		{name: "exclusive", op: "CumSum", attrs: []*ir.Attribute{excl}, in: []*ir.Tensor{v(), ax(0)},
			want: ewT([]int{5}, []int32{0, 1, 3, 6, 10})},
		{name: "reverse", op: "CumSum", attrs: []*ir.Attribute{rev}, in: []*ir.Tensor{v(), ax(0)},
			want: ewT([]int{5}, []int32{15, 14, 12, 9, 5})},
		{name: "reverse exclusive", op: "CumSum", attrs: []*ir.Attribute{rev, excl}, in: []*ir.Tensor{v(), ax(0)},
			want: ewT([]int{5}, []int32{14, 12, 9, 5, 0})},
		{name: "axis 0", op: "CumSum", in: []*ir.Tensor{x(), ax(0)}, want: ewT([]int{2, 3}, []float64{1, 2, 3, 5, 7, 9})},
		{name: "axis 1", op: "CumSum", in: []*ir.Tensor{x(), ax(1)}, want: ewT([]int{2, 3}, []float64{1, 3, 6, 4, 9, 15})},
		{name: "negative axis int32", op: "CumSum", in: []*ir.Tensor{x(), ir.Scalar(int32(-1))},
			want: ewT([]int{2, 3}, []float64{1, 3, 6, 4, 9, 15})},
		{name: "one-element axis", op: "CumSum", in: []*ir.Tensor{x(), ewT([]int{1}, []int64{-2})},
			want: ewT([]int{2, 3}, []float64{1, 2, 3, 5, 7, 9})},
		{name: "middle axis reverse exclusive", op: "CumSum", attrs: []*ir.Attribute{rev, excl},
			in:   []*ir.Tensor{ewT([]int{1, 3, 2}, []float32{1, 10, 2, 20, 3, 30}), ax(1)},
			want: ewT([]int{1, 3, 2}, []float32{5, 50, 3, 30, 0, 0})},
		{name: "uint32 wraps", op: "CumSum", in: []*ir.Tensor{ewT([]int{2}, []uint32{1 << 31, 1 << 31}), ax(0)},
			want: ewT([]int{2}, []uint32{1 << 31, 0})},
		{name: "float16 at 14", op: "CumSum", opset: 14, in: []*ir.Tensor{ewF16([]int{3}, 0.5, 1.5, -4), ax(0)},
			want: ewF16([]int{3}, 0.5, 2, -2)},
		{name: "float16 before 14", op: "CumSum", opset: 13, in: []*ir.Tensor{ewF16([]int{1}, 1), ax(0)},
			wantErr: "element type float16"},
		{name: "int8 refused", op: "CumSum", in: []*ir.Tensor{ewT([]int{1}, []int8{1}), ax(0)}, wantErr: "element type int8"},
		{name: "empty axis", op: "CumSum", in: []*ir.Tensor{ewT([]int{2, 0}, []float32{}), ax(1)}, want: ewT([]int{2, 0}, []float32{})},
		{name: "axis out of range", op: "CumSum", in: []*ir.Tensor{x(), ax(2)}, wantErr: "axis 2 is out of range for rank 2"},
		{name: "float axis", op: "CumSum", in: []*ir.Tensor{x(), ir.Scalar(float32(0))}, wantErr: "axis must be int32 or int64"},
		{name: "vector axis", op: "CumSum", in: []*ir.Tensor{x(), ewT([]int{2}, []int64{0, 1})}, wantErr: "axis must be a scalar"},
		{name: "not before opset 11", op: "CumSum", opset: 10, in: []*ir.Tensor{x(), ax(0)}, wantErr: "unsupported opset version"},
	}
	cRunCases(t, cases)
}

func TestCumSumInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "symbolic", op: "CumSum", in: []Value{ewTyped(ir.Float, "b", "s"), ewTyped(ir.Int64)}, want: ewTyped(ir.Float, "b", "s")},
		{name: "unknown rank", op: "CumSum", in: []Value{UnknownRank(ir.Int64), ewTyped(ir.Int32)}, want: UnknownRank(ir.Int64)},
		{name: "const axis out of range", op: "CumSum",
			in: []Value{ewTyped(ir.Float, 2), {Type: Known(ir.Int64, nil), Const: ir.Scalar(int64(1))}}, wantErr: "axis 1 is out of range"},
		{name: "axis type", op: "CumSum", in: []Value{ewTyped(ir.Float, 2), ewTyped(ir.Float)}, wantErr: "axis must be int32 or int64"},
		{name: "axis shape", op: "CumSum", in: []Value{ewTyped(ir.Float, 2), ewTyped(ir.Int64, 1, 1)}, wantErr: "axis must be a scalar"},
	})
}
