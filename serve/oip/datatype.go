// Package oip translates the Open Inference Protocol (KServe's "V2"
// inference protocol, shared by Triton, KServe, Seldon MLServer and ONNX
// Runtime Server) to and from attnrun's tensors: datatype names, JSON
// tensor data (flat or nested), raw little-endian bytes, the typed contents
// of gRPC messages, the HTTP binary tensor data extension, and the error
// classes the protocol maps to HTTP statuses and gRPC codes. It knows
// nothing about models; package serve checks requests against them.
package oip

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// datatypes maps the protocol's datatype names to attnrun's element types.
// BYTES (strings) has no entry: no attnrun model takes or makes strings.
var datatypes = map[string]ir.DType{
	"BOOL":  ir.Bool,
	"UINT8": ir.Uint8, "UINT16": ir.Uint16, "UINT32": ir.Uint32, "UINT64": ir.Uint64,
	"INT8": ir.Int8, "INT16": ir.Int16, "INT32": ir.Int32, "INT64": ir.Int64,
	"FP16": ir.Float16, "FP32": ir.Float, "FP64": ir.Double, "BF16": ir.BFloat16,
}

// datatypeNames is datatypes inverted.
var datatypeNames = func() map[ir.DType]string {
	m := make(map[ir.DType]string, len(datatypes))
	for name, dt := range datatypes {
		m[dt] = name
	}
	return m
}()

// Datatype is the protocol's name for an element type ("FP32" for
// float32), or "" when the protocol has none for it.
func Datatype(dt ir.DType) string { return datatypeNames[dt] }

// ParseDatatype is the element type a protocol datatype name stands for.
// Names are case-sensitive, as the protocol says.
func ParseDatatype(name string) (ir.DType, error) {
	if dt, ok := datatypes[name]; ok {
		return dt, nil
	}
	if name == "BYTES" {
		return ir.Undefined, Errorf(InvalidArgument, "datatype BYTES (strings) is not supported: attnrun models take numeric and bool tensors")
	}
	return ir.Undefined, Errorf(InvalidArgument, "unknown datatype %q (want one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16)", name)
}

// Shape converts a protocol shape to attnrun's, checking that every dim is
// non-negative and that the tensor's bytes stay within maxBytes (≤ 0: no
// bound), before anything is allocated.
func Shape(dims []int64, dt ir.DType, maxBytes int64) ([]int, error) {
	shape := make([]int, len(dims))
	for i, d := range dims {
		if d < 0 {
			return nil, Errorf(InvalidArgument, "shape %v has a negative dim", dims)
		}
		shape[i] = int(d)
	}
	n := ir.NumElements(shape)
	if n < 0 {
		return nil, Errorf(InvalidArgument, "shape %v overflows", dims)
	}
	size := int64(dt.Size())
	if maxBytes > 0 && size > 0 && n > maxBytes/size {
		return nil, Errorf(TooLarge, "shape %v of %s is %s, above the tensor size limit of %d bytes (--max-tensor-bytes)", dims, Datatype(dt), byteCount(n, size), maxBytes)
	}
	return shape, nil
}

// byteCount renders n·size bytes without overflowing.
func byteCount(n, size int64) string {
	if n > 0 && n > (1<<62)/size {
		return fmt.Sprintf("more than %d bytes", int64(1)<<62)
	}
	return fmt.Sprintf("%d bytes", n*size)
}
