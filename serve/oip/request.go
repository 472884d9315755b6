package oip

import "github.com/attnrun/attnrun/ir"

// Request is one inference request, decoded from either transport and not
// yet checked against a model.
type Request struct {
	// ModelName and ModelVersion are the model the message names (gRPC;
	// HTTP takes them from the URL and fills these only when the JSON
	// body repeats them).
	ModelName, ModelVersion string
	// ID is the client's request id, echoed in the response.
	ID string
	// Inputs are the input tensors in request order, names unique.
	Inputs []NamedTensor
	// Outputs are the outputs asked for, names unique; none means all.
	Outputs []RequestedOutput
	// BinaryOutputs (HTTP) sends every output not asked for otherwise in
	// the binary data extension (the binary_data_output parameter).
	BinaryOutputs bool
	// RawOutputs (gRPC) answers with raw_output_contents; set when the
	// request came with raw_input_contents.
	RawOutputs bool
}

// NamedTensor is a tensor with its input or output name.
type NamedTensor struct {
	Name   string
	Tensor *ir.Tensor
}

// RequestedOutput is one output a request asks for.
type RequestedOutput struct {
	Name string
	// Binary (HTTP) is the output's binary_data parameter; nil when the
	// request did not set it.
	Binary *bool
}

// Response is the answer to a Request.
type Response struct {
	ModelName, ModelVersion, ID string
	Outputs                     []NamedTensor
	// Binary[i] (HTTP) sends Outputs[i] in the binary data extension.
	Binary []bool
	// Raw (gRPC) sends the outputs in raw_output_contents.
	Raw bool
}

// Limits bound what decoding a request may allocate.
type Limits struct {
	// MaxTensorBytes bounds each input tensor (≤ 0: no bound).
	MaxTensorBytes int64
}
