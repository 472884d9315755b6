package ir

import (
	"unsafe"
)

// NativeLittleEndian reports whether this machine stores numbers
// little-endian, the byte order of ONNX raw data, .npy files and attnrun's
// wire: there a tensor's memory is its encoding, and is read and written
// without copies.
var NativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// BytesOf views a numeric or bool backing slice (as Tensor.Data holds) as
// its bytes, without copying; nil for strings or other types.
func BytesOf(data any) []byte {
	switch s := data.(type) {
	case []float32:
		return asBytes(s)
	case []float64:
		return asBytes(s)
	case []uint16:
		return asBytes(s)
	case []int64:
		return asBytes(s)
	case []int32:
		return asBytes(s)
	case []int16:
		return asBytes(s)
	case []int8:
		return asBytes(s)
	case []uint8:
		return s
	case []uint32:
		return asBytes(s)
	case []uint64:
		return asBytes(s)
	case []bool:
		return asBytes(s)
	}
	return nil
}

func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// AliasBytes returns raw, little-endian elements of dt, as a backing slice
// of n elements that shares raw's memory, when that is possible: a
// little-endian machine, raw aligned for dt and exactly n elements long, dt
// numeric (a bool byte may be neither 0 nor 1, which a Go bool must be).
func AliasBytes(dt DType, raw []byte, n int) (any, bool) {
	size := dt.Size()
	if !NativeLittleEndian || size <= 0 || dt == Bool || dt == String || len(raw) != n*size {
		return nil, false
	}
	if n == 0 {
		return MakeSlice(dt, 0), true
	}
	p := unsafe.Pointer(unsafe.SliceData(raw))
	if uintptr(p)%uintptr(size) != 0 {
		return nil, false
	}
	switch dt.Storage() {
	case Float:
		return unsafe.Slice((*float32)(p), n), true
	case Double:
		return unsafe.Slice((*float64)(p), n), true
	case Uint16:
		return unsafe.Slice((*uint16)(p), n), true
	case Int64:
		return unsafe.Slice((*int64)(p), n), true
	case Int32:
		return unsafe.Slice((*int32)(p), n), true
	case Int16:
		return unsafe.Slice((*int16)(p), n), true
	case Int8:
		return unsafe.Slice((*int8)(p), n), true
	case Uint8:
		return raw[:n:n], true
	case Uint32:
		return unsafe.Slice((*uint32)(p), n), true
	case Uint64:
		return unsafe.Slice((*uint64)(p), n), true
	}
	return nil, false
}
