// Package onnxpb holds Go bindings generated from ONNX's onnx.proto (ONNX
// 1.12). The proto package is renamed from "onnx" to "attnrun.onnx" so that
// these types do not clash in the protobuf registry with other copies of the
// same schema (onnx-go's) linked into one binary. Run gen.sh to regenerate.
package onnxpb

//go:generate sh gen.sh
