package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestClassify(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	x32 := func() *ir.Tensor {
		return ewT([]int{2, 3}, []float32{-1.2, float32(nan), float32(inf), 2.8, float32(-inf), float32(inf)})
	}
	ewRunCases(t, []ewCase{
		{name: "isnan", op: "IsNaN", opset: 9, in: []*ir.Tensor{x32()},
			want: ewT([]int{2, 3}, []bool{false, true, false, false, false, false})},
		{name: "isnan float64", op: "IsNaN", in: []*ir.Tensor{ewT([]int{3}, []float64{nan, 0, -inf})},
			want: ewT([]int{3}, []bool{true, false, false})},
		{name: "isnan float16", op: "IsNaN", opset: 13,
			in:   []*ir.Tensor{{DType: ir.Float16, Shape: []int{3}, Data: []uint16{0x7e00, 0x3c00, 0x7c00}}},
			want: ewT([]int{3}, []bool{true, false, false})},
		{name: "isnan int refused", op: "IsNaN", in: []*ir.Tensor{ewT([]int{1}, []int32{1})}, wantErr: "element type int32"},
		{name: "isnan not before opset 9", op: "IsNaN", opset: 8, in: []*ir.Tensor{x32()}, wantErr: "unsupported opset version"},
		{name: "isinf both", op: "IsInf", opset: 10, in: []*ir.Tensor{x32()},
			want: ewT([]int{2, 3}, []bool{false, false, true, false, true, true})},
		{name: "isinf positive only", op: "IsInf", attrs: []*ir.Attribute{cAttrInt("detect_negative", 0)}, in: []*ir.Tensor{x32()},
			want: ewT([]int{2, 3}, []bool{false, false, true, false, false, true})},
		{name: "isinf negative only", op: "IsInf", attrs: []*ir.Attribute{cAttrInt("detect_positive", 0)},
			in:   []*ir.Tensor{ewT([]int{4}, []float64{-inf, inf, nan, 1})},
			want: ewT([]int{4}, []bool{true, false, false, false})},
		{name: "isinf neither", op: "IsInf", attrs: []*ir.Attribute{cAttrInt("detect_positive", 0), cAttrInt("detect_negative", 0)},
			in: []*ir.Tensor{ewT([]int{2}, []float64{-inf, inf})}, want: ewT([]int{2}, []bool{false, false})},
		{name: "isinf scalar", op: "IsInf", in: []*ir.Tensor{ir.Scalar(float32(inf))}, want: ir.Scalar(true)},
		{name: "isinf float16 refused", op: "IsInf", in: []*ir.Tensor{ewF16([]int{1}, 1)}, wantErr: "element type float16"},
		{name: "isinf float attr refused", op: "IsInf", attrs: []*ir.Attribute{cAttrFloat("detect_positive", 0)},
			in: []*ir.Tensor{x32()}, wantErr: `attribute "detect_positive" is float, want int`},
	})
}

func TestClassifyInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "isnan symbolic", op: "IsNaN", in: []Value{ewTyped(ir.Float, "batch", 3)}, want: ewTyped(ir.Bool, "batch", 3)},
		{name: "isinf unknown rank", op: "IsInf", in: []Value{UnknownRank(ir.Double)}, want: UnknownRank(ir.Bool)},
		{name: "isinf type", op: "IsInf", in: []Value{ewTyped(ir.Int64, 2)}, wantErr: "element type int64"},
	})
}
