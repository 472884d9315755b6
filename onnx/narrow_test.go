package onnx

import (
	"reflect"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestNarrowTensors decodes the packed wire forms of the narrow types (two
// 4-bit or four 2-bit elements a byte, first element in the low bits; in
// raw_data or int32_data) and encodes them back.
func TestNarrowTensors(t *testing.T) {
	cases := []struct {
		dt     ir.DType
		dims   []int64
		packed []byte
		want   any
	}{
		// ONNX's test_cast_FLOAT_to_INT4 output: -9..15 as int4, 25 elements in 13 bytes.
		{ir.Int4, []int64{5, 5}, []byte{0x87, 0xa9, 0xcb, 0xed, 0x0f, 0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb, 0xed, 0x0f},
			[]int8{7, -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1}},
		{ir.Uint4, []int64{3}, []byte{0x21, 0x0f}, []uint8{1, 2, 15}},
		{ir.Float4E2M1, []int64{2}, []byte{0xe1}, []uint8{0x1, 0xe}},
		// ONNX's test_cast_FLOAT_to_INT2 output: -3..3 as int2.
		{ir.Int2, []int64{7, 1}, []byte{0x39, 0x39}, []int8{1, -2, -1, 0, 1, -2, -1}},
		{ir.Uint2, []int64{5}, []byte{0xe4, 0x03}, []uint8{0, 1, 2, 3, 3}},
		{ir.Float8E4M3FN, []int64{2}, []byte{0x2f, 0xfe}, []uint8{0x2f, 0xfe}},
		{ir.Float8E8M0, []int64{1}, []byte{0x7f}, []uint8{0x7f}},
	}
	for _, c := range cases {
		t.Run(c.dt.String(), func(t *testing.T) {
			ints := make([]int32, len(c.packed))
			for i, b := range c.packed {
				ints[i] = int32(b)
			}
			for what, tp := range map[string]*onnxpb.TensorProto{
				"raw_data":   {DataType: ptr32(int32(c.dt)), Dims: c.dims, RawData: c.packed},
				"int32_data": {DataType: ptr32(int32(c.dt)), Dims: c.dims, Int32Data: ints},
			} {
				b, err := proto.Marshal(tp)
				if err != nil {
					t.Fatal(err)
				}
				_, got, err := DecodeTensor(b)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if got.DType != c.dt || !reflect.DeepEqual(got.Data, c.want) {
					t.Fatalf("%s: got %v %v, want %v", what, got.DType, got.Data, c.want)
				}
				enc, err := EncodeTensor("x", got)
				if err != nil {
					t.Fatal(err)
				}
				var back onnxpb.TensorProto
				if err := proto.Unmarshal(enc, &back); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(back.RawData, c.packed) {
					t.Fatalf("%s: encoded %x, want %x", what, back.RawData, c.packed)
				}
			}
		})
	}
	short := &onnxpb.TensorProto{DataType: ptr32(int32(ir.Int4)), Dims: []int64{5}, RawData: []byte{0, 0}}
	b, _ := proto.Marshal(short)
	if _, _, err := DecodeTensor(b); err == nil || !strings.Contains(err.Error(), "need 3 bytes, raw_data has 2") {
		t.Errorf("short int4 raw_data: %v", err)
	}
}

// TestIRVersion: IR versions up to 13 decode; a newer one is refused.
func TestIRVersion(t *testing.T) {
	g := &onnxpb.GraphProto{Name: proto.String("g")}
	for v, ok := range map[int64]bool{3: true, 10: true, 13: true, 14: false} {
		b, err := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(v), Graph: g})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Decode(b, Options{})
		if ok != (err == nil) {
			t.Errorf("IR %d: err %v", v, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "IR version 14 is newer than attnrun reads (up to 13")) {
			t.Errorf("IR %d: err %v", v, err)
		}
	}
}
