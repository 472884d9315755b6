// Package ir is attnrun's one intermediate representation: models, graphs,
// nodes, attributes and dense tensors. Every front end (the ONNX decoder)
// translates into it and every backend consumes it. It knows nothing about
// op semantics; those live in package ops.
package ir

import "fmt"

// DType is a tensor element type. Its values are ONNX's TensorProto.DataType
// numbers, so a DType converts to and from the wire format without a table.
type DType int32

// The element types attnrun knows. Not every op takes every type; the op
// registry says which.
const (
	Undefined DType = 0
	Float     DType = 1
	Uint8     DType = 2
	Int8      DType = 3
	Uint16    DType = 4
	Int16     DType = 5
	Int32     DType = 6
	Int64     DType = 7
	String    DType = 8
	Bool      DType = 9
	Float16   DType = 10
	Double    DType = 11
	Uint32    DType = 12
	Uint64    DType = 13
	BFloat16  DType = 16
	// The narrow types of IR versions 9 to 13 (see narrow.go): 8-, 4- and
	// 2-bit floats and integers. attnrun holds them one element per byte.
	Float8E4M3FN   DType = 17
	Float8E4M3FNUZ DType = 18
	Float8E5M2     DType = 19
	Float8E5M2FNUZ DType = 20
	Uint4          DType = 21
	Int4           DType = 22
	Float4E2M1     DType = 23
	Float8E8M0     DType = 24
	Uint2          DType = 25
	Int2           DType = 26
)

var dtypeNames = map[DType]string{
	Undefined: "undefined", Float: "float32", Uint8: "uint8", Int8: "int8",
	Uint16: "uint16", Int16: "int16", Int32: "int32", Int64: "int64",
	String: "string", Bool: "bool", Float16: "float16", Double: "float64",
	Uint32: "uint32", Uint64: "uint64", BFloat16: "bfloat16",
	Float8E4M3FN: "float8e4m3fn", Float8E4M3FNUZ: "float8e4m3fnuz", Float8E5M2: "float8e5m2",
	Float8E5M2FNUZ: "float8e5m2fnuz", Uint4: "uint4", Int4: "int4", Float4E2M1: "float4e2m1",
	Float8E8M0: "float8e8m0", Uint2: "uint2", Int2: "int2",
}

// String returns the numpy-style name of the type ("float32", "int64", ...).
func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// ParseDType is the inverse of DType.String.
func ParseDType(s string) (DType, error) {
	for d, n := range dtypeNames {
		if n == s && d != Undefined {
			return d, nil
		}
	}
	return Undefined, fmt.Errorf("unknown dtype %q", s)
}

// Size is the number of bytes one element occupies in memory (and in ONNX
// raw_data). Strings have no fixed size and report 0.
func (d DType) Size() int {
	if d.Narrow() {
		return 1
	}
	switch d {
	case Bool, Uint8, Int8:
		return 1
	case Uint16, Int16, Float16, BFloat16:
		return 2
	case Float, Int32, Uint32:
		return 4
	case Double, Int64, Uint64:
		return 8
	}
	return 0
}

// Known reports whether attnrun can hold tensors of this type.
func (d DType) Known() bool { return d != Undefined && dtypeNames[d] != "" }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float || d == Double || d == Float16 || d == BFloat16 }

// Storage returns the type whose Go slice holds elements of d (see
// Tensor.Data): Uint16 for float16 and bfloat16 bit patterns, Uint8 for the
// narrow floats' bit patterns and for uint4 and uint2 values, Int8 for int4
// and int2 values, d itself otherwise.
func (d DType) Storage() DType {
	switch d {
	case Float16, BFloat16:
		return Uint16
	case Int4, Int2:
		return Int8
	}
	if d.Narrow() {
		return Uint8
	}
	return d
}

// IsInt reports whether d is a signed or unsigned integer type. The narrow
// integers (int4, uint4, int2, uint2) are not: no arithmetic kernel takes
// them (see Narrow).
func (d DType) IsInt() bool {
	switch d {
	case Uint8, Int8, Uint16, Int16, Int32, Int64, Uint32, Uint64:
		return true
	}
	return false
}
