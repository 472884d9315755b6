package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func narrowT(dt ir.DType, shape []int, data any) *ir.Tensor {
	return &ir.Tensor{DType: dt, Shape: shape, Data: data}
}

// TestCastNarrow covers the versions of Cast that add the narrow types:
// float8 and saturate (19), int4 (21), float4 (23), float8e8m0 and
// round_mode (24), int2 (25), and the Cast-19/Cast-24 difference for ±Inf
// to the fnuz encodings.
func TestCastNarrow(t *testing.T) {
	to := func(dt ir.DType, more ...*ir.Attribute) []*ir.Attribute {
		return append([]*ir.Attribute{ewIntAttr("to", int64(dt))}, more...)
	}
	inf, nan, negZero := float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	x := ewT([]int{8}, []float32{0.4789, 448, 470, 1e6, -inf, nan, negZero, 1.0625})
	ewRunCases(t, []ewCase{
		{name: "e4m3fn saturates", op: "Cast", opset: 19, attrs: to(ir.Float8E4M3FN), in: []*ir.Tensor{x},
			want: narrowT(ir.Float8E4M3FN, []int{8}, []uint8{0x2f, 0x7e, 0x7e, 0x7e, 0xfe, 0x7f, 0x80, 0x38})},
		{name: "e4m3fn saturate=0", op: "Cast", opset: 19, attrs: to(ir.Float8E4M3FN, ewIntAttr("saturate", 0)), in: []*ir.Tensor{x},
			want: narrowT(ir.Float8E4M3FN, []int{8}, []uint8{0x2f, 0x7e, 0x7f, 0x7f, 0xff, 0x7f, 0x80, 0x38})},
		{name: "e5m2 saturate=0 keeps inf", op: "Cast", opset: 25, attrs: to(ir.Float8E5M2, ewIntAttr("saturate", 0)), in: []*ir.Tensor{x},
			want: narrowT(ir.Float8E5M2, []int{8}, []uint8{0x38, 0x5f, 0x5f, 0x7c, 0xfc, 0x7e, 0x80, 0x3c})},
		{name: "fnuz: Cast-19 -inf is NaN", op: "Cast", opset: 19, attrs: to(ir.Float8E4M3FNUZ), in: []*ir.Tensor{x},
			want: narrowT(ir.Float8E4M3FNUZ, []int{8}, []uint8{0x37, 0x7f, 0x7f, 0x7f, 0x80, 0x80, 0x00, 0x40})},
		{name: "fnuz: Cast-24 -inf is -max", op: "Cast", opset: 24, attrs: to(ir.Float8E4M3FNUZ), in: []*ir.Tensor{x},
			want: narrowT(ir.Float8E4M3FNUZ, []int{8}, []uint8{0x37, 0x7f, 0x7f, 0x7f, 0xff, 0x80, 0x00, 0x40})},
		{name: "from e4m3fn", op: "Cast", opset: 19, attrs: to(ir.Float),
			in:   []*ir.Tensor{narrowT(ir.Float8E4M3FN, []int{4}, []uint8{0x2f, 0x7e, 0x01, 0xff})},
			want: ewT([]int{4}, []float32{0.46875, 448, 1.0 / 512, nan})},
		{name: "int4 wraps", op: "Cast", opset: 21, attrs: to(ir.Int4),
			in:   []*ir.Tensor{ewT([]int{5}, []float32{-9, -8, 7, 8, 2.9})},
			want: narrowT(ir.Int4, []int{5}, []int8{7, -8, 7, -8, 2})},
		{name: "uint4 to uint8", op: "Cast", opset: 21, attrs: to(ir.Uint8),
			in: []*ir.Tensor{narrowT(ir.Uint4, []int{2}, []uint8{15, 3})}, want: ewT([]int{2}, []uint8{15, 3})},
		{name: "int2 wraps", op: "Cast", opset: 25, attrs: to(ir.Int2),
			in:   []*ir.Tensor{ewT([]int{4}, []int64{-3, -2, 1, 2})},
			want: narrowT(ir.Int2, []int{4}, []int8{1, -2, 1, -2})},
		{name: "float4 rounds to even and saturates", op: "Cast", opset: 23, attrs: to(ir.Float4E2M1),
			in:   []*ir.Tensor{ewT([]int{6}, []float32{0.25, -3.5, 9, nan, -inf, 1.05})},
			want: narrowT(ir.Float4E2M1, []int{6}, []uint8{0x0, 0xe, 0x7, 0x8, 0xf, 0x2})},
		{name: "e8m0 rounds up", op: "Cast", opset: 24, attrs: to(ir.Float8E8M0),
			in:   []*ir.Tensor{ewT([]int{4}, []float32{1, 1.5, 3, inf})},
			want: narrowT(ir.Float8E8M0, []int{4}, []uint8{127, 128, 129, 0xff})},
		{name: "e8m0 round_mode down", op: "Cast", opset: 24,
			attrs: to(ir.Float8E8M0, &ir.Attribute{Name: "round_mode", Type: ir.AttrString, String: []byte("down")}),
			in:    []*ir.Tensor{ewT([]int{3}, []float32{1, 1.5, 3})},
			want:  narrowT(ir.Float8E8M0, []int{3}, []uint8{127, 127, 128})},
		{name: "e8m0 round_mode nearest", op: "Cast", opset: 25,
			attrs: to(ir.Float8E8M0, &ir.Attribute{Name: "round_mode", Type: ir.AttrString, String: []byte("nearest")}),
			in:    []*ir.Tensor{ewT([]int{3}, []float32{1.4, 1.5, 3.5})},
			want:  narrowT(ir.Float8E8M0, []int{3}, []uint8{127, 128, 129})},
		{name: "bad round_mode", op: "Cast", opset: 24,
			attrs: to(ir.Float8E8M0, &ir.Attribute{Name: "round_mode", Type: ir.AttrString, String: []byte("even")}),
			in:    []*ir.Tensor{x}, wantErr: `round_mode = "even" is not up, down or nearest`},
		{name: "int4 before opset 21", op: "Cast", opset: 19, attrs: to(ir.Int4),
			in: []*ir.Tensor{x}, wantErr: "cannot cast to int4: Cast-19 does not define it"},
		{name: "float8 before opset 19", op: "Cast", opset: 18, attrs: to(ir.Float8E5M2),
			in: []*ir.Tensor{x}, wantErr: "Cast-13 does not define it"},
		{name: "bad saturate", op: "Cast", opset: 19, attrs: to(ir.Float8E5M2, ewIntAttr("saturate", 2)),
			in: []*ir.Tensor{x}, wantErr: "saturate = 2 must be 0 or 1"},
		{name: "castlike to float8e5m2fnuz", op: "CastLike", opset: 25,
			in:   []*ir.Tensor{ewT([]int{2}, []float64{-1e9, 0.5}), narrowT(ir.Float8E5M2FNUZ, []int{0}, []uint8{})},
			want: narrowT(ir.Float8E5M2FNUZ, []int{2}, []uint8{0xff, 0x3c})},
		{name: "Cast-1 takes a type name", op: "Cast", opset: 1,
			attrs: []*ir.Attribute{{Name: "to", Type: ir.AttrString, String: []byte("INT32")}},
			in:    []*ir.Tensor{ewT([]int{2}, []float32{1.5, -2.5})}, want: ewT([]int{2}, []int32{1, -2})},
		{name: "Cast-1 unknown name", op: "Cast", opset: 5,
			attrs: []*ir.Attribute{{Name: "to", Type: ir.AttrString, String: []byte("FLOAT8")}},
			in:    []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: `"FLOAT8" is not a type name Cast-1 knows`},
	})
}
