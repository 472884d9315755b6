package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestLogical(t *testing.T) {
	b := func(shape []int, v ...bool) *ir.Tensor { return ewT(shape, v) }
	p := b([]int{4}, true, true, false, false)
	q := b([]int{4}, true, false, true, false)
	ewRunCases(t, []ewCase{
		{name: "and", op: "And", in: []*ir.Tensor{p, q}, want: b([]int{4}, true, false, false, false)},
		{name: "or", op: "Or", in: []*ir.Tensor{p, q}, want: b([]int{4}, true, true, true, false)},
		{name: "xor", op: "Xor", in: []*ir.Tensor{p, q}, want: b([]int{4}, false, true, true, false)},
		{name: "not", op: "Not", in: []*ir.Tensor{p}, want: b([]int{4}, false, false, true, true)},
		{name: "and broadcast [2,1]&[3]", op: "And",
			in:   []*ir.Tensor{b([]int{2, 1}, true, false), b([]int{3}, true, false, true)},
			want: b([]int{2, 3}, true, false, true, false, false, false)},
		{name: "or scalar", op: "Or", opset: 7, in: []*ir.Tensor{b(nil, true), b([]int{2}, false, false)},
			want: b([]int{2}, true, true)},
		{name: "xor [2,1,2]^[2,1]", op: "Xor",
			in:   []*ir.Tensor{b([]int{2, 1, 2}, true, false, false, false), b([]int{2, 1}, true, false)},
			want: b([]int{2, 2, 2}, false, true, true, false, true, true, false, false)},
		{name: "not empty", op: "Not", in: []*ir.Tensor{b([]int{2, 0})}, want: b([]int{2, 0})},
		{name: "and int refused", op: "And", in: []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []int32{1})},
			wantErr: "element type int32"},
		{name: "not float refused", op: "Not", in: []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: "element type float32"},
	})
}
