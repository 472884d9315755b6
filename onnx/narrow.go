package onnx

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// The wire format of the narrow types (see ir.DType.Narrow): float8 one
// element a byte; int4, uint4 and float4e2m1 two elements a byte, the first
// in the low 4 bits; int2 and uint2 four a byte, the first in the low 2
// bits. raw_data holds those bytes; int32_data holds one byte per entry.
// attnrun's tensors hold one element per byte, so decoding unpacks and
// encoding packs.

// narrowBits is the width of one element on the wire.
func narrowBits(dt ir.DType) int {
	switch dt {
	case ir.Int4, ir.Uint4, ir.Float4E2M1:
		return 4
	case ir.Int2, ir.Uint2:
		return 2
	}
	return 8
}

// packedLen is the number of wire bytes of n elements of a narrow type.
func packedLen(dt ir.DType, n int64) int64 {
	per := int64(8 / narrowBits(dt))
	return (n + per - 1) / per
}

// unpackNarrow expands packed wire bytes into n elements of storage.
func unpackNarrow(dt ir.DType, shape []int, packed []byte, n int) *ir.Tensor {
	t := ir.NewTensor(dt, shape)
	w := narrowBits(dt)
	per := 8 / w
	mask := byte(1)<<w - 1
	signed := dt == ir.Int4 || dt == ir.Int2
	u8, _ := t.Data.([]uint8)
	i8, _ := t.Data.([]int8)
	for i := 0; i < n; i++ {
		v := packed[i/per] >> (w * (i % per)) & mask
		if signed {
			i8[i] = int8(v<<(8-w)) >> (8 - w) // sign-extend
		} else {
			u8[i] = v
		}
	}
	return t
}

// packNarrow packs a narrow tensor's elements into wire bytes.
func packNarrow(t *ir.Tensor) []byte {
	w := narrowBits(t.DType)
	per := 8 / w
	mask := byte(1)<<w - 1
	n := t.Len()
	out := make([]byte, packedLen(t.DType, int64(n)))
	for i := 0; i < n; i++ {
		var v byte
		switch d := t.Data.(type) {
		case []uint8:
			v = d[i]
		case []int8:
			v = byte(d[i])
		}
		out[i/per] |= (v & mask) << (w * (i % per))
	}
	return out
}

// narrowFromProto decodes a narrow-typed TensorProto of n elements from
// raw_data, external data or int32_data.
func narrowFromProto(tp *onnxpb.TensorProto, dt ir.DType, shape []int, n int64, opts Options) (*ir.Tensor, error) {
	need := packedLen(dt, n)
	var packed []byte
	switch {
	case tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL:
		raw, err := readExternal(tp, opts, need)
		if err != nil {
			return nil, err
		}
		packed = raw
	case tp.RawData != nil:
		if int64(len(tp.RawData)) != need {
			return nil, fmt.Errorf("dims %v of %v need %d bytes, raw_data has %d", tp.Dims, dt, need, len(tp.RawData))
		}
		packed = tp.RawData
	default:
		if int64(len(tp.Int32Data)) != need {
			return nil, fmt.Errorf("dims %v of %v need %d int32_data entries (one byte each), int32_data has %d", tp.Dims, dt, need, len(tp.Int32Data))
		}
		packed = make([]byte, need)
		for i, v := range tp.Int32Data {
			if v < 0 || v > 0xff {
				return nil, fmt.Errorf("int32_data[%d] = %d does not fit in a byte", i, v)
			}
			packed[i] = byte(v)
		}
	}
	return unpackNarrow(dt, shape, packed, int(n)), nil
}
