package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestMod(t *testing.T) {
	s6 := []int{6}
	fmod := []*ir.Attribute{cAttrInt("fmod", 1)}
	ewRunCases(t, []ewCase{
		{name: "int64 divisor's sign", op: "Mod", opset: 10, in: []*ir.Tensor{ewT(s6, []int64{-4, 7, 5, 4, -7, 8}), ewT(s6, []int64{2, -3, 8, -2, 3, 5})},
			want: ewT(s6, []int64{0, -2, 5, 0, 2, 3})},
		{name: "int64 fmod dividend's sign", op: "Mod", attrs: fmod, in: []*ir.Tensor{ewT(s6, []int64{-4, 7, 5, 4, -7, 8}), ewT(s6, []int64{2, -3, 8, -2, 3, 5})},
			want: ewT(s6, []int64{0, 1, 5, 0, -1, 3})},
		{name: "int8 extremes", op: "Mod", in: []*ir.Tensor{ewT([]int{3}, []int8{-128, -128, 127}), ewT([]int{3}, []int8{-1, 3, -128})},
			want: ewT([]int{3}, []int8{0, 1, -1})},
		{name: "uint8", op: "Mod", in: []*ir.Tensor{ewT([]int{3}, []uint8{4, 255, 9}), ewT([]int{3}, []uint8{3, 16, 9})},
			want: ewT([]int{3}, []uint8{1, 15, 0})},
		{name: "broadcast", op: "Mod", in: []*ir.Tensor{ewT([]int{2, 3}, []int32{0, 1, 2, 3, -4, 5}), ewT([]int{1}, []int32{3})},
			want: ewT([]int{2, 3}, []int32{0, 1, 2, 0, 2, 2})},
		{name: "float64 fmod", op: "Mod", attrs: fmod, in: []*ir.Tensor{ewT(s6, []float64{-4.3, 7.2, 5, 4.3, -7.2, 8}), ewT(s6, []float64{2.1, -3.4, 8, -2.1, 3.4, 5})},
			want: ewT(s6, []float64{-0.09999999999999964, 0.40000000000000036, 5, 0.09999999999999964, -0.40000000000000036, 3})},
		{name: "float32 by zero is NaN", op: "Mod", attrs: fmod, in: []*ir.Tensor{ewT([]int{2}, []float32{1, -2}), ewT([]int{2}, []float32{0, 1.5})},
			want: ewT([]int{2}, []float32{float32(math.NaN()), -0.5})},
		{name: "float16 fmod", op: "Mod", attrs: fmod, in: []*ir.Tensor{ewF16([]int{2}, 5.5, -5.5), ewF16([]int{2}, 2, 2)},
			want: ewF16([]int{2}, 1.5, -1.5)},
		{name: "float needs fmod", op: "Mod", in: []*ir.Tensor{ewT([]int{1}, []float32{1}), ewT([]int{1}, []float32{1})},
			wantErr: "fmod must be 1 for float32 inputs"},
		{name: "fmod 2", op: "Mod", attrs: []*ir.Attribute{cAttrInt("fmod", 2)}, in: []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []int32{1})},
			wantErr: "fmod must be 0 or 1"},
		{name: "integer by zero", op: "Mod", in: []*ir.Tensor{ewT([]int{2}, []int32{1, 2}), ewT([]int{2}, []int32{1, 0})},
			wantErr: "integer remainder by zero"},
		{name: "types differ", op: "Mod", in: []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []int64{1})},
			wantErr: "different element types"},
		{name: "not before opset 10", op: "Mod", opset: 9, in: []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []int32{1})},
			wantErr: "unsupported opset version"},
	})
}

func TestModInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "broadcast", op: "Mod", in: []Value{ewTyped(ir.Int64, "b", 3), ewTyped(ir.Int64, 1)}, want: ewTyped(ir.Int64, "b", 3)},
		{name: "float without fmod", op: "Mod", in: []Value{ewTyped(ir.Double, 2), ewTyped(ir.Double, 2)}, wantErr: "fmod must be 1"},
	})
}
