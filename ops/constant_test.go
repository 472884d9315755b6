package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestConstant(t *testing.T) {
	val := mvF32([]int{2}, 1.5, 2.5)
	cases := []struct {
		name  string
		opset int
		attr  *ir.Attribute
		shape []int
		data  any
	}{
		{"value", 7, &ir.Attribute{Name: "value", Type: ir.AttrTensor, Tensor: val}, []int{2}, []float32{1.5, 2.5}},
		{"value_float", 12, &ir.Attribute{Name: "value_float", Type: ir.AttrFloat, Float: 3}, []int{}, []float32{3}},
		{"value_floats", 13, &ir.Attribute{Name: "value_floats", Type: ir.AttrFloats, Floats: []float32{1, 2}}, []int{2}, []float32{1, 2}},
		{"value_int", 13, mvInt("value_int", 7), []int{}, []int64{7}},
		{"value_ints", 18, mvInts("value_ints", 1, -1), []int{2}, []int64{1, -1}},
		{"value_string", 13, &ir.Attribute{Name: "value_string", Type: ir.AttrString, String: []byte("hi")}, []int{}, []string{"hi"}},
		{"value_strings", 13, &ir.Attribute{Name: "value_strings", Type: ir.AttrStrings, Strings: [][]byte{[]byte("a"), []byte("b")}}, []int{2}, []string{"a", "b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := mvNode("Constant", 0, 1, c.attr)
			out := mvRun(t, c.opset, n)
			mvWant(t, out[0], c.shape, c.data)
			v, err := mvInfer(t, c.opset, n)
			if err != nil || v[0].Const == nil {
				t.Fatalf("Infer: %v %v", v, err)
			}
		})
	}
	// Run returns a copy of the attribute tensor.
	out := mvRun(t, 13, mvNode("Constant", 0, 1, &ir.Attribute{Name: "value", Type: ir.AttrTensor, Tensor: val}))
	out[0].Float32s()[0] = 9
	if val.Float32s()[0] != 1.5 {
		t.Error("Constant output aliases its attribute")
	}
	mvErr(t, 13, mvNode("Constant", 0, 1, &ir.Attribute{Name: "sparse_value", Type: ir.AttrSparse}), "sparse_value constants are not supported")
	mvErr(t, 11, mvNode("Constant", 0, 1, mvInt("value_int", 1)), "needs opset 12")
	mvErr(t, 13, mvNode("Constant", 0, 1), "exactly one value attribute, got 0")
	mvErr(t, 13, mvNode("Constant", 0, 1, mvInt("value_int", 1), mvInts("value_ints", 1)), "exactly one value attribute, got 2")
	mvErr(t, 13, mvNode("Constant", 0, 1, mvInts("value_int", 1)), "is ints, want int")
}

func TestConstantOfShape(t *testing.T) {
	one := ir.FromSlice([]int{1}, []int64{1})
	cases := []struct {
		name  string
		attrs []*ir.Attribute
		shape []int64
		want  []int
		data  any
	}{
		{"default zeros", nil, []int64{2, 3}, []int{2, 3}, []float32{0, 0, 0, 0, 0, 0}},
		{"int ones", []*ir.Attribute{{Name: "value", Type: ir.AttrTensor, Tensor: one}}, []int64{4}, []int{4}, []int64{1, 1, 1, 1}},
		{"zero dim", []*ir.Attribute{{Name: "value", Type: ir.AttrTensor, Tensor: one}}, []int64{0}, []int{0}, []int64{}},
		{"scalar", nil, []int64{}, []int{}, []float32{0}},
		{"bool", []*ir.Attribute{{Name: "value", Type: ir.AttrTensor, Tensor: ir.FromSlice([]int{1}, []bool{true})}}, []int64{1, 2}, []int{1, 2}, []bool{true, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, 9, mvNode("ConstantOfShape", 1, 1, c.attrs...), mvI64(c.shape...))
			mvWant(t, out[0], c.want, c.data)
		})
	}
	n := mvNode("ConstantOfShape", 1, 1)
	mvErr(t, 13, n, "more than", mvI64(1<<16, 1<<16))
	mvErr(t, 13, n, "negative dimension", mvI64(2, -1))
	mvErr(t, 13, mvNode("ConstantOfShape", 1, 1, &ir.Attribute{Name: "value", Type: ir.AttrTensor, Tensor: mvI64(1, 2)}), "one element", mvI64(2))
	v, err := mvInfer(t, 17, n, symValue(ir.Int64, mvShape("batch", 1, "seq"), false))
	if err != nil || v[0].Type.String() != "float32[batch, 1, seq]" {
		t.Errorf("got %v %v", v, err)
	}
	v, err = mvInfer(t, 17, n, Typed(ir.Int64, mvShape(2)))
	if err != nil || v[0].Type.String() != "float32[?, ?]" {
		t.Errorf("got %v %v", v, err)
	}
}

func TestIdentity(t *testing.T) {
	x := mvI64(1, 2)
	for _, opset := range []int{7, 13, 14, 16, 18} {
		out := mvRun(t, opset, mvNode("Identity", 1, 1), x)
		mvWant(t, out[0], []int{2}, []int64{1, 2})
	}
	s := symValue(ir.Int64, mvShape("batch", 3), false)
	v, err := mvInfer(t, 13, mvNode("Identity", 1, 1), s)
	if err != nil || v[0].Sym.String() != "[batch, 3]" {
		t.Errorf("got %v %v", v, err)
	}
}

func TestRange(t *testing.T) {
	cases := []struct {
		name                string
		start, limit, delta *ir.Tensor
		shape               []int
		data                any
	}{
		{"float positive", ir.Scalar(float32(1)), ir.Scalar(float32(5)), ir.Scalar(float32(2)), []int{2}, []float32{1, 3}},
		{"float fraction", ir.Scalar(float64(0)), ir.Scalar(float64(1)), ir.Scalar(float64(0.25)), []int{4}, []float64{0, 0.25, 0.5, 0.75}},
		{"int32 negative", ir.Scalar(int32(10)), ir.Scalar(int32(6)), ir.Scalar(int32(-3)), []int{2}, []int32{10, 7}},
		{"int64 empty", ir.Scalar(int64(5)), ir.Scalar(int64(1)), ir.Scalar(int64(1)), []int{0}, []int64{}},
		{"int64 exact", ir.Scalar(int64(0)), ir.Scalar(int64(6)), ir.Scalar(int64(2)), []int{3}, []int64{0, 2, 4}},
		{"int16", ir.FromSlice(nil, []int16{-2}), ir.FromSlice(nil, []int16{1}), ir.FromSlice(nil, []int16{1}), []int{3}, []int16{-2, -1, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := mvRun(t, 11, mvNode("Range", 3, 1), c.start, c.limit, c.delta)
			mvWant(t, out[0], c.shape, c.data)
		})
	}
	n := mvNode("Range", 3, 1)
	mvErr(t, 11, n, "delta is 0", ir.Scalar(int64(0)), ir.Scalar(int64(3)), ir.Scalar(int64(0)))
	mvErr(t, 11, n, "more than", ir.Scalar(int64(0)), ir.Scalar(int64(math.MaxInt64)), ir.Scalar(int64(1)))
	mvErr(t, 11, n, "more than", ir.Scalar(float32(0)), ir.Scalar(float32(1e12)), ir.Scalar(float32(1e-3)))
	mvErr(t, 11, n, "no defined length", ir.Scalar(float32(0)), ir.Scalar(float32(math.NaN())), ir.Scalar(float32(1)))
	mvErr(t, 11, n, "input 1 is int32", ir.Scalar(int64(0)), ir.Scalar(int32(3)), ir.Scalar(int64(1)))
	// range(0, seq, 1) over a symbolic limit.
	v, err := mvInfer(t, 11, n, mvConst(ir.Scalar(int64(0))), symValue(ir.Int64, mvShape("seq"), true), mvConst(ir.Scalar(int64(1))))
	if err != nil || v[0].Type.String() != "int64[seq]" {
		t.Errorf("got %v %v", v, err)
	}
}

// TestRangeHalf covers Range-27's float16 and bfloat16, computed in
// stash_type.
func TestRangeHalf(t *testing.T) {
	h := func(dt ir.DType, v float32) *ir.Tensor {
		b := ir.Float32ToFloat16(v)
		if dt == ir.BFloat16 {
			b = ir.Float32ToBFloat16(v)
		}
		return &ir.Tensor{DType: dt, Data: []uint16{b}}
	}
	for _, dt := range []ir.DType{ir.Float16, ir.BFloat16} {
		for _, stash := range []int64{1, 11} {
			out := mvRun(t, 27, mvNode("Range", 3, 1, mvInt("stash_type", stash)), h(dt, 1), h(dt, 2.5), h(dt, 0.5))
			want := []uint16{h(dt, 1).Data.([]uint16)[0], h(dt, 1.5).Data.([]uint16)[0], h(dt, 2).Data.([]uint16)[0]}
			mvWant(t, out[0], []int{3}, want)
		}
	}
	mvErr(t, 27, mvNode("Range", 3, 1, mvInt("stash_type", 10)), "stash_type 10 is not float (1) or double (11)",
		h(ir.Float16, 0), h(ir.Float16, 1), h(ir.Float16, 1))
	s, err := Lookup("", "Range", 26)
	if err != nil || s.TakesDType(ir.Float16) {
		t.Errorf("Range-11 takes float16: %v", err)
	}
}

// TestConstantNarrowVersions: a narrow-typed constant needs the version
// that allows its type.
func TestConstantNarrowVersions(t *testing.T) {
	v := &ir.Tensor{DType: ir.Int4, Shape: []int{2}, Data: []int8{-8, 7}}
	n := mvNode("Constant", 0, 1, &ir.Attribute{Name: "value", Type: ir.AttrTensor, Tensor: v})
	out := mvRun(t, 21, n)
	mvWant(t, out[0], []int{2}, []int8{-8, 7})
	mvErr(t, 19, n, "value has element type int4, which Constant-19 does not allow")
	f8 := &ir.Tensor{DType: ir.Float8E5M2, Shape: []int{1}, Data: []uint8{0x3c}}
	cos := mvNode("ConstantOfShape", 1, 1, &ir.Attribute{Name: "value", Type: ir.AttrTensor, Tensor: f8})
	out = mvRun(t, 20, cos, mvI64(2))
	mvWant(t, out[0], []int{2}, []uint8{0x3c, 0x3c})
	mvErr(t, 19, cos, "ConstantOfShape-9 does not allow", mvI64(2))
}
