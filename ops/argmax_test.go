package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestArgMaxMin(t *testing.T) {
	nan := float32(math.NaN())
	ex := func() *ir.Tensor { return ewT([]int{2, 2}, []float32{2, 1, 3, 10}) }
	ties := func() *ir.Tensor { return ewT([]int{2, 3}, []int32{4, 1, 4, 7, 7, -2}) }
	idx := func(shape []int, v ...int64) *ir.Tensor { return ewT(shape, v) }
	axis := func(v int64) *ir.Attribute { return cAttrInt("axis", v) }
	keep0 := cAttrInt("keepdims", 0)
	last := cAttrInt("select_last_index", 1)
	ewRunCases(t, []ewCase{
		{name: "max default axis 0", op: "ArgMax", opset: 1, in: []*ir.Tensor{ex()}, want: idx([]int{1, 2}, 1, 1)},
		{name: "max axis 1", op: "ArgMax", opset: 13, attrs: []*ir.Attribute{axis(1)}, in: []*ir.Tensor{ex()},
			want: idx([]int{2, 1}, 0, 1)},
		{name: "max no keepdims", op: "ArgMax", attrs: []*ir.Attribute{axis(1), keep0}, in: []*ir.Tensor{ex()},
			want: idx([]int{2}, 0, 1)},
		{name: "max negative axis", op: "ArgMax", opset: 11, attrs: []*ir.Attribute{axis(-1)}, in: []*ir.Tensor{ex()},
			want: idx([]int{2, 1}, 0, 1)},
		{name: "negative axis before 11", op: "ArgMax", opset: 10, attrs: []*ir.Attribute{axis(-1)}, in: []*ir.Tensor{ex()},
			wantErr: "negative axis -1 needs opset 11"},
		{name: "max ties first", op: "ArgMax", attrs: []*ir.Attribute{axis(1)}, in: []*ir.Tensor{ties()},
			want: idx([]int{2, 1}, 0, 0)},
		{name: "max ties last", op: "ArgMax", opset: 12, attrs: []*ir.Attribute{axis(1), last}, in: []*ir.Tensor{ties()},
			want: idx([]int{2, 1}, 2, 1)},
		{name: "min ties first", op: "ArgMin", attrs: []*ir.Attribute{axis(0), keep0},
			in: []*ir.Tensor{ewT([]int{2, 3}, []float64{1, 5, -2, 1, 0, -2})}, want: idx([]int{3}, 0, 1, 0)},
		{name: "min ties last", op: "ArgMin", attrs: []*ir.Attribute{axis(0), keep0, last},
			in: []*ir.Tensor{ewT([]int{2, 3}, []float64{1, 5, -2, 1, 0, -2})}, want: idx([]int{3}, 1, 1, 1)},
		{name: "select_last_index before 12", op: "ArgMax", opset: 11, attrs: []*ir.Attribute{last}, in: []*ir.Tensor{ex()},
			wantErr: "select_last_index needs opset 12"},
		{name: "max middle axis", op: "ArgMax", attrs: []*ir.Attribute{axis(1), keep0},
			in:   []*ir.Tensor{ewT([]int{2, 3, 2}, []uint8{1, 9, 5, 2, 3, 4, 7, 0, 7, 8, 6, 8})},
			want: idx([]int{2, 2}, 1, 0, 0, 1)},
		{name: "max NaN wins first", op: "ArgMax", in: []*ir.Tensor{ewT([]int{4}, []float32{1, nan, 3, nan})},
			want: idx([]int{1}, 1)},
		{name: "max NaN wins last", op: "ArgMax", attrs: []*ir.Attribute{last}, in: []*ir.Tensor{ewT([]int{4}, []float32{1, nan, 3, nan})},
			want: idx([]int{1}, 3)},
		{name: "min NaN wins", op: "ArgMin", in: []*ir.Tensor{ewT([]int{3}, []float32{1, nan, -3})}, want: idx([]int{1}, 1)},
		{name: "min float16", op: "ArgMin", attrs: []*ir.Attribute{keep0}, in: []*ir.Tensor{ewF16([]int{3}, 2, -0.5, 1)},
			want: ir.Scalar(int64(1))},
		{name: "min int64", op: "ArgMin", attrs: []*ir.Attribute{axis(1), keep0},
			in: []*ir.Tensor{ewT([]int{2, 2}, []int64{math.MinInt64, math.MaxInt64, 5, -5})}, want: idx([]int{2}, 0, 1)},
		{name: "axis out of range", op: "ArgMax", attrs: []*ir.Attribute{axis(2)}, in: []*ir.Tensor{ex()},
			wantErr: "axis 2 is out of range for rank 2"},
		{name: "empty axis", op: "ArgMax", in: []*ir.Tensor{ewT([]int{0, 2}, []float32{})}, wantErr: "size 0"},
		{name: "empty other dim", op: "ArgMax", attrs: []*ir.Attribute{axis(1)}, in: []*ir.Tensor{ewT([]int{0, 2}, []float32{})},
			want: idx([]int{0, 1})},
		{name: "bool refused", op: "ArgMax", in: []*ir.Tensor{ewT([]int{1}, []bool{true})}, wantErr: "element type bool"},
	})
}

func TestArgMaxInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "keepdims", op: "ArgMax", attrs: []*ir.Attribute{cAttrInt("axis", -1)}, in: []Value{ewTyped(ir.Float, "b", "s", 8)},
			want: ewTyped(ir.Int64, "b", "s", 1)},
		{name: "no keepdims", op: "ArgMin", attrs: []*ir.Attribute{cAttrInt("axis", 1), cAttrInt("keepdims", 0)},
			in: []Value{ewTyped(ir.Float16, "b", "s", 8)}, want: ewTyped(ir.Int64, "b", 8)},
		{name: "unknown rank", op: "ArgMax", in: []Value{UnknownRank(ir.Int32)}, want: UnknownRank(ir.Int64)},
		{name: "unknown rank bad attr", op: "ArgMax", opset: 11, attrs: []*ir.Attribute{cAttrInt("select_last_index", 1)},
			in: []Value{UnknownRank(ir.Int32)}, wantErr: "needs opset 12"},
		{name: "scalar", op: "ArgMax", in: []Value{ewTyped(ir.Float)}, wantErr: "out of range for rank 0"},
	})
}
