package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestQuantizeLinear(t *testing.T) {
	x := mvF32([]int{2, 3}, 0, 2, 3, -1000, 2.5, 1e9)
	nan := float32(math.NaN())
	cases := []struct {
		name  string
		opset int
		attrs []*ir.Attribute
		in    []*ir.Tensor
		want  *ir.Tensor
	}{
		{"uint8 default, half to even, saturate", 10, nil, []*ir.Tensor{x, ir.Scalar(float32(2)), ir.FromSlice(nil, []uint8{128})},
			ir.FromSlice([]int{2, 3}, []uint8{128, 129, 130, 0, 129, 255})},
		{"no zero point: uint8", 13, nil, []*ir.Tensor{mvF32([]int{3}, -1, 1, nan), ir.Scalar(float32(1))},
			ir.FromSlice([]int{3}, []uint8{0, 1, 0})},
		{"int8 per axis", 13, []*ir.Attribute{mvInt("axis", 0)},
			[]*ir.Tensor{x, mvF32([]int{2}, 1, 10), ir.FromSlice([]int{2}, []int8{0, -10})},
			ir.FromSlice([]int{2, 3}, []int8{0, 2, 3, -110, -10, 127})},
		{"blocked int4", 21, []*ir.Attribute{mvInt("axis", 1), mvInt("block_size", 2)},
			[]*ir.Tensor{mvF32([]int{1, 4}, 1, 2, 30, -40), mvF32([]int{1, 2}, 1, 10), &ir.Tensor{DType: ir.Int4, Shape: []int{1, 2}, Data: []int8{1, 0}}},
			&ir.Tensor{DType: ir.Int4, Shape: []int{1, 4}, Data: []int8{2, 3, 3, -4}}},
		{"output_dtype uint16", 21, []*ir.Attribute{mvInt("output_dtype", int64(ir.Uint16))},
			[]*ir.Tensor{mvF32([]int{2}, 70000, 1.5), ir.Scalar(float32(1))}, ir.FromSlice([]int{2}, []uint16{65535, 2})},
		{"float8 ignores the zero point and saturates", 19, nil,
			[]*ir.Tensor{mvF32([]int{3}, 1, 1000, -1e9), ir.Scalar(float32(2)), &ir.Tensor{DType: ir.Float8E4M3FN, Data: []uint8{0x38}}},
			&ir.Tensor{DType: ir.Float8E4M3FN, Shape: []int{3}, Data: []uint8{0x30, 0x7e, 0xfe}}},
		{"float8 saturate=0", 19, []*ir.Attribute{mvInt("saturate", 0)},
			[]*ir.Tensor{mvF32([]int{1}, 1000), ir.Scalar(float32(1)), &ir.Tensor{DType: ir.Float8E4M3FN, Data: []uint8{0}}},
			&ir.Tensor{DType: ir.Float8E4M3FN, Shape: []int{1}, Data: []uint8{0x7f}}},
		{"int32 x and scale (QuantizeLinear-19: the scale has x's type)", 19, nil,
			[]*ir.Tensor{ir.FromSlice([]int{2}, []int32{3, 5}), ir.FromSlice(nil, []int32{2}), ir.FromSlice(nil, []int8{0})},
			ir.FromSlice([]int{2}, []int8{2, 2})},
		{"int16 needs opset 21", 19, nil,
			[]*ir.Tensor{ewF16([]int{1}, 2049), ewF16(nil, 16), ir.FromSlice(nil, []int16{0})}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := mvCall(t, c.opset, mvNode("QuantizeLinear", len(c.in), 1, c.attrs...), c.in...)
			if c.want == nil { // the version refuses the type
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mvWant(t, out[0], c.want.Shape, c.want.Data)
			if out[0].DType != c.want.DType {
				t.Errorf("dtype %v, want %v", out[0].DType, c.want.DType)
			}
		})
	}
	// int32 x at opset 13 (scale float32): 5/2 = 2.5 rounds to even.
	out := mvRun(t, 13, mvNode("QuantizeLinear", 3, 1), ir.FromSlice([]int{2}, []int32{5, 7}), ir.Scalar(float32(2)), ir.FromSlice(nil, []int8{0}))
	mvWant(t, out[0], []int{2}, []int8{2, 4})
	// float16 at 21: 2049 is 2048 in float16, and 2048/16 = 128, saturating int16 not needed.
	out = mvRun(t, 21, mvNode("QuantizeLinear", 3, 1), ewF16([]int{1}, 2049), ewF16(nil, 16), ir.FromSlice(nil, []int16{0}))
	mvWant(t, out[0], []int{1}, []int16{128})
	mvErr(t, 13, mvNode("QuantizeLinear", 3, 1), "cannot quantize to int16", x, ir.Scalar(float32(1)), ir.FromSlice(nil, []int16{0}))
	mvErr(t, 13, mvNode("QuantizeLinear", 3, 1, mvInt("axis", 1)), "scale has 2 elements, axis 1 of the input [2 3] has 3", x, mvF32([]int{2}, 1, 1), ir.FromSlice([]int{2}, []uint8{0, 0}))
	mvErr(t, 21, mvNode("QuantizeLinear", 2, 1, mvInt("axis", 1), mvInt("block_size", 2)), "needs 2 there", x, mvF32([]int{2, 3}, 1, 1, 1, 1, 1, 1))
	mvErr(t, 21, mvNode("QuantizeLinear", 3, 1, mvInt("output_dtype", int64(ir.Int8))), "output_dtype int8 differs from y_zero_point's type uint8",
		x, ir.Scalar(float32(1)), ir.FromSlice(nil, []uint8{0}))
}

func TestDequantizeLinear(t *testing.T) {
	cases := []struct {
		name  string
		opset int
		attrs []*ir.Attribute
		in    []*ir.Tensor
		want  *ir.Tensor
	}{
		{"uint8 per tensor", 10, nil, []*ir.Tensor{ir.FromSlice([]int{3}, []uint8{0, 3, 128}), ir.Scalar(float32(2)), ir.FromSlice(nil, []uint8{128})},
			mvF32([]int{3}, -256, -250, 0)},
		{"int32 without zero point", 10, nil, []*ir.Tensor{ir.FromSlice([]int{2}, []int32{-5, 7}), ir.Scalar(float32(0.5))}, mvF32([]int{2}, -2.5, 3.5)},
		{"int8 per axis", 13, []*ir.Attribute{mvInt("axis", 0)},
			[]*ir.Tensor{ir.FromSlice([]int{2, 2}, []int8{1, 2, 3, 4}), mvF32([]int{2}, 1, 10), ir.FromSlice([]int{2}, []int8{0, 1})},
			mvF32([]int{2, 2}, 1, 2, 20, 30)},
		{"float16 scale gives float16", 19, nil, []*ir.Tensor{ir.FromSlice([]int{1}, []int8{3}), ewF16(nil, 0.5)}, ewF16([]int{1}, 1.5)},
		{"blocked uint4", 21, []*ir.Attribute{mvInt("axis", 0), mvInt("block_size", 2)},
			[]*ir.Tensor{{DType: ir.Uint4, Shape: []int{3}, Data: []uint8{15, 1, 2}}, mvF32([]int{2}, 1, 3), {DType: ir.Uint4, Shape: []int{2}, Data: []uint8{1, 0}}},
			mvF32([]int{3}, 14, 0, 6)},
		{"float8 x", 19, nil, []*ir.Tensor{{DType: ir.Float8E5M2, Shape: []int{2}, Data: []uint8{0x3c, 0xc0}}, ir.Scalar(float32(3))}, mvF32([]int{2}, 3, -6)},
		{"output_dtype float16", 23, []*ir.Attribute{mvInt("output_dtype", int64(ir.Float16))},
			[]*ir.Tensor{ir.FromSlice([]int{1}, []int8{5}), ir.Scalar(float32(0.25))}, ewF16([]int{1}, 1.25)},
		{"float8e8m0 scale", 24, []*ir.Attribute{mvInt("output_dtype", int64(ir.Float))},
			[]*ir.Tensor{ir.FromSlice([]int{1}, []int8{5}), {DType: ir.Float8E8M0, Data: []uint8{125}}}, mvF32([]int{1}, 1.25)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, c.opset, mvNode("DequantizeLinear", len(c.in), 1, c.attrs...), c.in...)
			mvWant(t, out[0], c.want.Shape, c.want.Data)
			if out[0].DType != c.want.DType {
				t.Errorf("dtype %v, want %v", out[0].DType, c.want.DType)
			}
		})
	}
	n := mvNode("DequantizeLinear", 3, 1)
	mvErr(t, 19, n, "must have a zero zero point", &ir.Tensor{DType: ir.Float8E5M2, Shape: []int{1}, Data: []uint8{0x3c}}, ir.Scalar(float32(1)),
		&ir.Tensor{DType: ir.Float8E5M2, Data: []uint8{0x3c}})
	mvErr(t, 13, n, "zero point is int8, want uint8", ir.FromSlice([]int{1}, []uint8{1}), ir.Scalar(float32(1)), ir.FromSlice(nil, []int8{0}))
	mvErr(t, 24, mvNode("DequantizeLinear", 2, 1), "cannot dequantize to float8e8m0", ir.FromSlice([]int{1}, []int8{5}), &ir.Tensor{DType: ir.Float8E8M0, Data: []uint8{125}})
	mvErr(t, 13, mvNode("DequantizeLinear", 2, 1), "element type int16", ir.FromSlice([]int{1}, []int16{5}), ir.Scalar(float32(1)))
}

func TestDynamicQuantizeLinear(t *testing.T) {
	// ONNX's example: x = [0, 2, -3, -2.5, 1.34, 0.5].
	out := mvRun(t, 11, mvNode("DynamicQuantizeLinear", 1, 3), mvF32([]int{6}, 0, 2, -3, -2.5, 1.34, 0.5))
	mvWant(t, out[0], []int{6}, []uint8{153, 255, 0, 26, 221, 179})
	mvWant(t, out[1], []int{}, []float32{float32(5) / 255})
	mvWant(t, out[2], []int{}, []uint8{153})
	// All positive: the range still includes 0 (zero point 0).
	out = mvRun(t, 11, mvNode("DynamicQuantizeLinear", 1, 3), mvF32([]int{2}, 1, 255))
	mvWant(t, out[0], []int{2}, []uint8{1, 255})
	mvWant(t, out[2], []int{}, []uint8{0})
	mvErr(t, 11, mvNode("DynamicQuantizeLinear", 1, 3), "cannot quantize an empty tensor", ir.NewTensor(ir.Float, []int{0}))
}

func TestMatMulInteger(t *testing.T) {
	// ONNX's example: A uint8 4×3 with zero point 12, B uint8 3×2 with 0.
	a := ir.FromSlice([]int{4, 3}, []uint8{11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0})
	b := ir.FromSlice([]int{3, 2}, []uint8{1, 4, 2, 5, 3, 6})
	out := mvRun(t, 10, mvNode("MatMulInteger", 4, 1), a, b, ir.FromSlice(nil, []uint8{12}), ir.FromSlice(nil, []uint8{0}))
	mvWant(t, out[0], []int{4, 2}, []int32{-38, -83, -44, -98, -50, -113, -56, -128})
	// Per-row A and per-column B zero points, int8.
	out = mvRun(t, 10, mvNode("MatMulInteger", 4, 1), ir.FromSlice([]int{2, 2}, []int8{1, 2, 3, 4}), ir.FromSlice([]int{2, 2}, []int8{1, 0, 0, 1}),
		ir.FromSlice([]int{2}, []int8{1, 3}), ir.FromSlice([]int{2}, []int8{0, 1}))
	mvWant(t, out[0], []int{2, 2}, []int32{0, 0, 0, 0})
	mvErr(t, 10, mvNode("MatMulInteger", 2, 1), "B has element type float32", a, mvF32([]int{3, 2}, 1, 2, 3, 4, 5, 6))
	mvErr(t, 10, mvNode("MatMulInteger", 3, 1), "a_zero_point is int8, its input uint8", a, b, ir.FromSlice(nil, []int8{1}))
}
