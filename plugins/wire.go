package plugins

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins/backendpb"
)

// toWire encodes a tensor. On a little-endian machine raw aliases t's data:
// the message must not outlive t's contents.
func toWire(t *ir.Tensor) (*backendpb.Tensor, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	w := &backendpb.Tensor{Dtype: int32(t.DType), Dims: make([]int64, len(t.Shape))}
	for i, d := range t.Shape {
		w.Dims[i] = int64(d)
	}
	if t.DType == ir.String {
		s := t.Data.([]string)
		w.Strings = make([][]byte, len(s))
		for i, v := range s {
			w.Strings[i] = []byte(v)
		}
		return w, nil
	}
	raw := bytesOf(t.Data)
	if raw == nil && t.Len() > 0 {
		return nil, fmt.Errorf("tensor of dtype %v holds %T", t.DType, t.Data)
	}
	if !nativeLittleEndian {
		raw = swapCopy(raw, t.DType.Size())
	}
	w.Raw = raw
	return w, nil
}

// bytesOf views a numeric or bool backing slice as bytes (no copy).
func bytesOf(data any) []byte { return ir.BytesOf(data) }

// nativeLittleEndian is ir.NativeLittleEndian.
var nativeLittleEndian = ir.NativeLittleEndian

// swapCopy returns a copy of raw with each size-byte element reversed.
func swapCopy(raw []byte, size int) []byte {
	out := make([]byte, len(raw))
	for i := 0; i+size <= len(raw); i += size {
		for k := 0; k < size; k++ {
			out[i+k] = raw[i+size-1-k]
		}
	}
	return out
}

// fromWire decodes and validates a tensor. Numeric data aliases w.Raw when
// it is suitably aligned (it always is for gRPC-decoded messages).
// maxBytes bounds the tensor's size (0: no bound beyond the message's).
func fromWire(w *backendpb.Tensor, maxBytes int64) (*ir.Tensor, error) {
	if w == nil {
		return nil, fmt.Errorf("missing tensor")
	}
	dt := ir.DType(w.Dtype)
	if !dt.Known() {
		return nil, fmt.Errorf("unsupported dtype %v", dt)
	}
	shape := make([]int, len(w.Dims))
	for i, d := range w.Dims {
		if d < 0 || uint64(d) > math.MaxInt {
			return nil, fmt.Errorf("invalid dims %v", w.Dims)
		}
		shape[i] = int(d)
	}
	n := ir.NumElements(shape)
	if n < 0 {
		return nil, fmt.Errorf("dims %v overflow", w.Dims)
	}
	if dt == ir.String {
		if int64(len(w.Strings)) != n {
			return nil, fmt.Errorf("dims %v need %d strings, got %d", w.Dims, n, len(w.Strings))
		}
		s := make([]string, n)
		for i, b := range w.Strings {
			s[i] = string(b)
		}
		return &ir.Tensor{DType: dt, Shape: shape, Data: s}, nil
	}
	size := int64(dt.Size())
	if n > math.MaxInt64/size || int64(len(w.Raw)) != n*size {
		return nil, fmt.Errorf("%v dims %v need %d bytes, got %d", dt, w.Dims, n*size, len(w.Raw))
	}
	if maxBytes > 0 && n*size > maxBytes {
		return nil, fmt.Errorf("%v dims %v is %d bytes, over the %d-byte limit", dt, w.Dims, n*size, maxBytes)
	}
	raw := w.Raw
	if !nativeLittleEndian {
		raw = swapCopy(raw, int(size))
	}
	data, err := sliceOf(dt, raw, int(n))
	if err != nil {
		return nil, err
	}
	return &ir.Tensor{DType: dt, Shape: shape, Data: data}, nil
}

// wireDims is w's dims as ints, unchecked: its callers compare the
// element count with the bytes the tensor occupies.
func wireDims(w *backendpb.Tensor) []int {
	dims := make([]int, len(w.Dims))
	for i, d := range w.Dims {
		dims[i] = int(d)
	}
	return dims
}

// sliceOf returns raw as a typed backing slice of n elements, aliasing raw
// when it is aligned and copying otherwise. Bool bytes other than 0 and 1
// are normalized (a Go bool must be 0 or 1).
func sliceOf(dt ir.DType, raw []byte, n int) (any, error) {
	if n == 0 {
		return ir.MakeSlice(dt, 0), nil
	}
	if data, ok := ir.AliasBytes(dt, raw, n); ok {
		return data, nil
	}
	if dt == ir.Bool {
		out := make([]bool, n)
		for i, b := range raw[:n] {
			out[i] = b != 0
		}
		return out, nil
	}
	if dt.Known() && dt != ir.String {
		cp := ir.MakeSlice(dt, n)
		copy(bytesOf(cp), raw)
		return cp, nil
	}
	return nil, fmt.Errorf("unsupported dtype %v", dt)
}
