package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestHardmax(t *testing.T) {
	// x is 2×2×3; by axis:
	//   [[3 1 2] [0 5 5]]
	//   [[4 4 -1] [2 0 7]]
	x := func() *ir.Tensor { return ewT([]int{2, 2, 3}, []float32{3, 1, 2, 0, 5, 5, 4, 4, -1, 2, 0, 7}) }
	axis := func(a int64) *ir.Attribute { return cAttrInt("axis", a) }
	nan := float32(math.NaN())
	ewRunCases(t, []ewCase{
		{name: "opset 13 default last axis", op: "Hardmax", opset: 13, in: []*ir.Tensor{x()},
			want: ewT([]int{2, 2, 3}, []float32{1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1})},
		{name: "opset 13 axis 0", op: "Hardmax", attrs: []*ir.Attribute{axis(0)}, in: []*ir.Tensor{x()},
			want: ewT([]int{2, 2, 3}, []float32{0, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1})},
		{name: "opset 13 axis 1", op: "Hardmax", attrs: []*ir.Attribute{axis(-2)}, in: []*ir.Tensor{x()},
			want: ewT([]int{2, 2, 3}, []float32{1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1})},
		{name: "opset 11 default axis 1 flattens", op: "Hardmax", opset: 11, in: []*ir.Tensor{x()},
			want: ewT([]int{2, 2, 3}, []float32{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1})},
		{name: "opset 1 axis 0 flattens all", op: "Hardmax", opset: 1, attrs: []*ir.Attribute{axis(0)}, in: []*ir.Tensor{x()},
			want: ewT([]int{2, 2, 3}, []float32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})},
		{name: "opset 11 axis 2", op: "Hardmax", opset: 12, attrs: []*ir.Attribute{axis(-1)}, in: []*ir.Tensor{x()},
			want: ewT([]int{2, 2, 3}, []float32{1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1})},
		{name: "negative axis before 11", op: "Hardmax", opset: 10, attrs: []*ir.Attribute{axis(-1)}, in: []*ir.Tensor{x()},
			wantErr: "negative axis -1 needs opset 11"},
		{name: "NaN counts as the maximum", op: "Hardmax", in: []*ir.Tensor{ewT([]int{4}, []float64{1, float64(nan), 9, float64(nan)})},
			want: ewT([]int{4}, []float64{0, 1, 0, 0})},
		{name: "float16", op: "Hardmax", in: []*ir.Tensor{ewF16([]int{1, 3}, -1, -0.5, -2)}, want: ewF16([]int{1, 3}, 0, 1, 0)},
		{name: "empty", op: "Hardmax", in: []*ir.Tensor{ewT([]int{2, 0}, []float32{})}, want: ewT([]int{2, 0}, []float32{})},
		{name: "int refused", op: "Hardmax", in: []*ir.Tensor{ewT([]int{2}, []int32{1, 2})}, wantErr: "element type int32"},
		{name: "axis out of range", op: "Hardmax", attrs: []*ir.Attribute{axis(3)}, in: []*ir.Tensor{x()}, wantErr: "axis 3 is out of range"},
	})
}

func TestHardmaxInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "symbolic", op: "Hardmax", in: []Value{ewTyped(ir.Float, "b", 7)}, want: ewTyped(ir.Float, "b", 7)},
		{name: "unknown rank", op: "Hardmax", in: []Value{UnknownRank(ir.Double)}, want: UnknownRank(ir.Double)},
		{name: "opset 12 default axis needs rank 2", op: "Hardmax", opset: 12, in: []Value{ewTyped(ir.Float, 3)}, wantErr: "axis 1 is out of range for rank 1"},
	})
}
