package oip

import (
	"encoding/binary"
	"reflect"
	"unsafe"

	"github.com/attnrun/attnrun/ir"
)

// nativeLittleEndian reports whether this machine stores numbers
// little-endian, the protocol's byte order for raw tensor data.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// FromRaw decodes a tensor from raw bytes: the flattened, row-major,
// little-endian elements with no padding (1 byte per BOOL, FP16 and BF16 as
// their 16-bit patterns), as the binary data extension and gRPC's
// raw_input_contents carry them. On a little-endian machine, when raw is
// aligned for the element type, the tensor aliases raw (the caller must
// own raw and not change it while the tensor lives); otherwise, and for
// BOOL, the bytes are copied.
func FromRaw(dt ir.DType, shape []int, raw []byte) (*ir.Tensor, error) {
	n := ir.NumElements(shape)
	size := int64(dt.Size())
	if size == 0 {
		return nil, Errorf(InvalidArgument, "%v has no raw form", dt)
	}
	if n < 0 || int64(len(raw)) != n*size {
		return nil, Errorf(InvalidArgument, "%s shape %v needs %s of raw data, got %d", Datatype(dt), shape, byteCount(max(n, 0), size), len(raw))
	}
	if data := aliasRaw(dt, raw, int(n)); data != nil {
		return &ir.Tensor{DType: dt, Shape: append([]int(nil), shape...), Data: data}, nil
	}
	t := ir.NewTensor(dt, shape)
	if dt == ir.Bool {
		b := t.Data.([]bool)
		for i, v := range raw {
			b[i] = v != 0
		}
		return t, nil
	}
	dst := rawView(t.Data)
	copy(dst, raw)
	if !nativeLittleEndian {
		swapBytes(dst, int(size))
	}
	return t, nil
}

// RawBytes returns a tensor's elements as the protocol's raw bytes. On a
// little-endian machine the result aliases t's data.
func RawBytes(t *ir.Tensor) []byte {
	b := rawView(t.Data)
	if !nativeLittleEndian && t.DType.Size() > 1 {
		b = append([]byte(nil), b...)
		swapBytes(b, t.DType.Size())
	}
	return b
}

// rawView views a numeric or bool backing slice as bytes (no copy); nil
// for anything else.
func rawView(data any) []byte {
	v := reflect.ValueOf(data)
	if v.Kind() != reflect.Slice || v.Type().Elem().Kind() == reflect.String {
		return nil
	}
	n := v.Len() * int(v.Type().Elem().Size())
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(v.UnsafePointer()), n)
}

// swapBytes reverses each size-byte element of b in place.
func swapBytes(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		for lo, hi := i, i+size-1; lo < hi; lo, hi = lo+1, hi-1 {
			b[lo], b[hi] = b[hi], b[lo]
		}
	}
}

// aliasRaw views raw as a backing slice of n elements of dt without
// copying, or returns nil where it cannot: a big-endian machine, BOOL (a
// Go bool must hold 0 or 1), raw not aligned for the type, no elements.
func aliasRaw(dt ir.DType, raw []byte, n int) any {
	size := dt.Size()
	if !nativeLittleEndian || dt == ir.Bool || n == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%uintptr(size) != 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(raw))
	switch dt {
	case ir.Float:
		return unsafe.Slice((*float32)(p), n)
	case ir.Double:
		return unsafe.Slice((*float64)(p), n)
	case ir.Float16, ir.BFloat16, ir.Uint16:
		return unsafe.Slice((*uint16)(p), n)
	case ir.Int64:
		return unsafe.Slice((*int64)(p), n)
	case ir.Int32:
		return unsafe.Slice((*int32)(p), n)
	case ir.Int16:
		return unsafe.Slice((*int16)(p), n)
	case ir.Int8:
		return unsafe.Slice((*int8)(p), n)
	case ir.Uint8:
		return raw[:n:n]
	case ir.Uint32:
		return unsafe.Slice((*uint32)(p), n)
	case ir.Uint64:
		return unsafe.Slice((*uint64)(p), n)
	}
	return nil
}
