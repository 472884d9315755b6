package onnx

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// wireTypeName names a TensorProto data type number for error messages.
func wireTypeName(dt int32) string {
	if s, ok := onnxpb.TensorProto_DataType_name[dt]; ok {
		return fmt.Sprintf("%s (%d)", s, dt)
	}
	return fmt.Sprintf("%d", dt)
}

// needBytes returns n*size as a decimal string and whether it fits in an int64.
func needBytes(n int64, size int) (int64, string, bool) {
	hi, lo := bits.Mul64(uint64(n), uint64(size))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, "more than 2^63", false
	}
	return int64(lo), strconv.FormatInt(int64(lo), 10), true
}

func tensorFromProto(tp *onnxpb.TensorProto, opts Options, limit int64) (*ir.Tensor, error) {
	if tp == nil {
		return nil, fmt.Errorf("missing tensor")
	}
	dims := tp.Dims
	dt := ir.DType(tp.GetDataType())
	if !dt.Known() {
		return nil, fmt.Errorf("unsupported data type %s", wireTypeName(tp.GetDataType()))
	}
	if tp.Segment != nil {
		return nil, fmt.Errorf("segmented tensors are not supported")
	}
	var shape []int // nil for a scalar, as ir.NewTensor makes it
	if len(dims) > 0 {
		shape = make([]int, len(dims))
	}
	for i, d := range dims {
		if d < 0 {
			return nil, fmt.Errorf("dims %v: dim %d is negative", dims, i)
		}
		if uint64(d) > uint64(math.MaxInt) {
			return nil, fmt.Errorf("dims %v: dim %d is too large", dims, i)
		}
		shape[i] = int(d)
	}
	n := ir.NumElements(shape)
	if n < 0 {
		return nil, fmt.Errorf("dims %v: element count overflows int64", dims)
	}
	if dt == ir.String {
		return stringTensor(tp, shape, n, limit)
	}
	if dt.Narrow() {
		if n > limit {
			return nil, fmt.Errorf("dims %v of %v need %d bytes, more than the limit of %d bytes (Options.MaxTensorBytes)", dims, dt, n, limit)
		}
		return narrowFromProto(tp, dt, shape, n, opts)
	}
	size := dt.Size()
	need, needS, ok := needBytes(n, size)
	if !ok || need > limit {
		return nil, fmt.Errorf("dims %v of %v need %s bytes, more than the limit of %d bytes (Options.MaxTensorBytes)", dims, dt, needS, limit)
	}
	if need > math.MaxInt {
		return nil, fmt.Errorf("dims %v of %v need %s bytes, more than this platform can address", dims, dt, needS)
	}
	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return externalTensor(tp, opts, dt, shape, need)
	}
	if tp.RawData != nil {
		if int64(len(tp.RawData)) != need {
			return nil, fmt.Errorf("dims %v of %v need %d bytes, raw_data has %d", dims, dt, need, len(tp.RawData))
		}
		return fromRaw(dt, shape, tp.RawData), nil
	}
	return fromTyped(tp, dt, shape, n)
}

func stringTensor(tp *onnxpb.TensorProto, shape []int, n int64, limit int64) (*ir.Tensor, error) {
	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || tp.RawData != nil {
		return nil, fmt.Errorf("string tensors must use string_data (not raw_data or external data)")
	}
	if int64(len(tp.StringData)) != n {
		return nil, fmt.Errorf("dims %v of string need %d elements, string_data has %d", tp.Dims, n, len(tp.StringData))
	}
	var total int64
	for _, s := range tp.StringData {
		total += int64(len(s))
	}
	if total > limit {
		return nil, fmt.Errorf("string data has %d bytes, more than the limit of %d bytes (Options.MaxTensorBytes)", total, limit)
	}
	data := make([]string, n)
	for i, s := range tp.StringData {
		data[i] = string(s)
	}
	return &ir.Tensor{DType: ir.String, Shape: shape, Data: data}, nil
}

// fromRaw decodes little-endian raw bytes whose length has been checked.
func fromRaw(dt ir.DType, shape []int, raw []byte) *ir.Tensor {
	le := binary.LittleEndian
	n := len(raw) / max(dt.Size(), 1)
	t := &ir.Tensor{DType: dt, Shape: shape}
	switch dt {
	case ir.Float:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		t.Data = s
	case ir.Double:
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		t.Data = s
	case ir.Float16, ir.BFloat16, ir.Uint16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = le.Uint16(raw[2*i:])
		}
		t.Data = s
	case ir.Int16:
		s := make([]int16, n)
		for i := range s {
			s[i] = int16(le.Uint16(raw[2*i:]))
		}
		t.Data = s
	case ir.Int32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(le.Uint32(raw[4*i:]))
		}
		t.Data = s
	case ir.Uint32:
		s := make([]uint32, n)
		for i := range s {
			s[i] = le.Uint32(raw[4*i:])
		}
		t.Data = s
	case ir.Int64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(le.Uint64(raw[8*i:]))
		}
		t.Data = s
	case ir.Uint64:
		s := make([]uint64, n)
		for i := range s {
			s[i] = le.Uint64(raw[8*i:])
		}
		t.Data = s
	case ir.Int8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(raw[i])
		}
		t.Data = s
	case ir.Uint8:
		t.Data = append(make([]uint8, 0, n), raw...)
	case ir.Bool:
		s := make([]bool, n)
		for i := range s {
			s[i] = raw[i] != 0
		}
		t.Data = s
	}
	return t
}

// typedField returns the name and length of the typed field that carries dt.
func typedField(tp *onnxpb.TensorProto, dt ir.DType) (string, int) {
	switch dt {
	case ir.Float:
		return "float_data", len(tp.FloatData)
	case ir.Double:
		return "double_data", len(tp.DoubleData)
	case ir.Int64:
		return "int64_data", len(tp.Int64Data)
	case ir.Uint32, ir.Uint64:
		return "uint64_data", len(tp.Uint64Data)
	}
	return "int32_data", len(tp.Int32Data)
}

func fromTyped(tp *onnxpb.TensorProto, dt ir.DType, shape []int, n int64) (*ir.Tensor, error) {
	field, have := typedField(tp, dt)
	if int64(have) != n {
		if have == 0 && n > 0 {
			return nil, fmt.Errorf("dims %v of %v need %d elements, but the tensor has no data (no raw_data and an empty %s)", tp.Dims, dt, n, field)
		}
		return nil, fmt.Errorf("dims %v of %v need %d elements, %s has %d", tp.Dims, dt, n, field, have)
	}
	t := &ir.Tensor{DType: dt, Shape: shape}
	switch dt {
	case ir.Float:
		t.Data = append(make([]float32, 0, n), tp.FloatData...)
	case ir.Double:
		t.Data = append(make([]float64, 0, n), tp.DoubleData...)
	case ir.Int64:
		t.Data = append(make([]int64, 0, n), tp.Int64Data...)
	case ir.Uint64:
		t.Data = append(make([]uint64, 0, n), tp.Uint64Data...)
	case ir.Uint32:
		s := make([]uint32, n)
		for i, v := range tp.Uint64Data {
			if v > math.MaxUint32 {
				return nil, fmt.Errorf("uint64_data[%d] = %d does not fit in uint32", i, v)
			}
			s[i] = uint32(v)
		}
		t.Data = s
	case ir.Int32:
		t.Data = append(make([]int32, 0, n), tp.Int32Data...)
	case ir.Int16:
		s := make([]int16, n)
		for i, v := range tp.Int32Data {
			if v < math.MinInt16 || v > math.MaxInt16 {
				return nil, fmt.Errorf("int32_data[%d] = %d does not fit in int16", i, v)
			}
			s[i] = int16(v)
		}
		t.Data = s
	case ir.Int8:
		s := make([]int8, n)
		for i, v := range tp.Int32Data {
			if v < math.MinInt8 || v > math.MaxInt8 {
				return nil, fmt.Errorf("int32_data[%d] = %d does not fit in int8", i, v)
			}
			s[i] = int8(v)
		}
		t.Data = s
	case ir.Uint8:
		s := make([]uint8, n)
		for i, v := range tp.Int32Data {
			if v < 0 || v > math.MaxUint8 {
				return nil, fmt.Errorf("int32_data[%d] = %d does not fit in uint8", i, v)
			}
			s[i] = uint8(v)
		}
		t.Data = s
	case ir.Uint16, ir.Float16, ir.BFloat16:
		s := make([]uint16, n)
		for i, v := range tp.Int32Data {
			if v < 0 || v > math.MaxUint16 {
				return nil, fmt.Errorf("int32_data[%d] = %d does not fit in 16 bits", i, v)
			}
			s[i] = uint16(v)
		}
		t.Data = s
	case ir.Bool:
		s := make([]bool, n)
		for i, v := range tp.Int32Data {
			s[i] = v != 0
		}
		t.Data = s
	default:
		return nil, fmt.Errorf("unsupported data type %v", dt)
	}
	return t, nil
}

// tensorToProto converts a tensor to a TensorProto, numeric data in raw_data
// (little endian, bool as one byte) and strings in string_data.
func tensorToProto(name string, t *ir.Tensor) (*onnxpb.TensorProto, error) {
	if t == nil {
		return nil, fmt.Errorf("nil tensor")
	}
	if !t.DType.Known() {
		return nil, fmt.Errorf("unsupported dtype %v", t.DType)
	}
	if t.Released() {
		return nil, fmt.Errorf("its data is not in memory (held by reference to %q at offset %d; restore it with a WeightStore, or encode with EncodeExternal)", t.External.Location, t.External.Offset)
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	tp := &onnxpb.TensorProto{DataType: ptr(int32(t.DType)), Dims: make([]int64, len(t.Shape))}
	if name != "" {
		tp.Name = ptr(name)
	}
	for i, d := range t.Shape {
		tp.Dims[i] = int64(d)
	}
	if t.DType == ir.String {
		for _, s := range t.Data.([]string) {
			tp.StringData = append(tp.StringData, []byte(s))
		}
		return tp, nil
	}
	if t.DType.Narrow() {
		tp.RawData = packNarrow(t)
		return tp, nil
	}
	raw := make([]byte, 0, t.Bytes())
	le := binary.LittleEndian
	switch d := t.Data.(type) {
	case []float32:
		for _, v := range d {
			raw = le.AppendUint32(raw, math.Float32bits(v))
		}
	case []float64:
		for _, v := range d {
			raw = le.AppendUint64(raw, math.Float64bits(v))
		}
	case []uint16:
		for _, v := range d {
			raw = le.AppendUint16(raw, v)
		}
	case []int16:
		for _, v := range d {
			raw = le.AppendUint16(raw, uint16(v))
		}
	case []int32:
		for _, v := range d {
			raw = le.AppendUint32(raw, uint32(v))
		}
	case []uint32:
		for _, v := range d {
			raw = le.AppendUint32(raw, v)
		}
	case []int64:
		for _, v := range d {
			raw = le.AppendUint64(raw, uint64(v))
		}
	case []uint64:
		for _, v := range d {
			raw = le.AppendUint64(raw, v)
		}
	case []int8:
		for _, v := range d {
			raw = append(raw, byte(v))
		}
	case []uint8:
		raw = append(raw, d...)
	case []bool:
		for _, v := range d {
			if v {
				raw = append(raw, 1)
			} else {
				raw = append(raw, 0)
			}
		}
	default:
		return nil, fmt.Errorf("unsupported tensor data %T", t.Data)
	}
	tp.RawData = raw
	return tp, nil
}

func ptr[T any](v T) *T { return &v }
