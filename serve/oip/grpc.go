package oip

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/serve/v2pb"
)

// DecodeGRPCRequest decodes a ModelInferRequest. Input data comes either
// all in raw_input_contents (one entry per input, in order) or all in
// typed contents, as the protocol says; the response takes the same form.
func DecodeGRPCRequest(m *v2pb.ModelInferRequest, lim Limits) (*Request, error) {
	req := &Request{ModelName: m.GetModelName(), ModelVersion: m.GetModelVersion(), ID: m.GetId()}
	if err := checkParams("request", m.GetParameters()); err != nil {
		return nil, err
	}
	raw := m.GetRawInputContents()
	req.RawOutputs = len(raw) > 0
	if len(m.GetInputs()) == 0 {
		return nil, Errorf(InvalidArgument, "the request has no inputs")
	}
	if req.RawOutputs && len(raw) != len(m.GetInputs()) {
		return nil, Errorf(InvalidArgument, "raw_input_contents has %d entries for %d inputs", len(raw), len(m.GetInputs()))
	}
	seen := map[string]bool{}
	for i, in := range m.GetInputs() {
		name := in.GetName()
		if name == "" {
			return nil, Errorf(InvalidArgument, "inputs[%d] has no name", i)
		}
		if seen[name] {
			return nil, Errorf(InvalidArgument, "input %q is given twice", name)
		}
		seen[name] = true
		t, err := decodeGRPCInput(in, raw, i, lim)
		if err != nil {
			return nil, Wrap(InvalidArgument, err, "input %q", name)
		}
		req.Inputs = append(req.Inputs, NamedTensor{Name: name, Tensor: t})
	}
	clear(seen)
	for i, out := range m.GetOutputs() {
		name := out.GetName()
		if name == "" {
			return nil, Errorf(InvalidArgument, "outputs[%d] has no name", i)
		}
		if seen[name] {
			return nil, Errorf(InvalidArgument, "output %q is requested twice", name)
		}
		seen[name] = true
		if err := checkParams("output "+name, out.GetParameters()); err != nil {
			return nil, err
		}
		req.Outputs = append(req.Outputs, RequestedOutput{Name: name})
	}
	return req, nil
}

func decodeGRPCInput(in *v2pb.ModelInferRequest_InferInputTensor, raw [][]byte, i int, lim Limits) (*ir.Tensor, error) {
	if in.GetDatatype() == "" {
		return nil, Errorf(InvalidArgument, "no datatype")
	}
	dt, err := ParseDatatype(in.GetDatatype())
	if err != nil {
		return nil, err
	}
	shape, err := Shape(in.GetShape(), dt, lim.MaxTensorBytes)
	if err != nil {
		return nil, err
	}
	if err := checkParams("", in.GetParameters()); err != nil {
		return nil, err
	}
	if len(raw) > 0 {
		if in.GetContents() != nil && len(filledFields(in.GetContents())) > 0 {
			return nil, Errorf(InvalidArgument, "has typed contents, but the request uses raw_input_contents (one or the other for all inputs)")
		}
		return FromRaw(dt, shape, raw[i])
	}
	if in.GetContents() == nil {
		return nil, Errorf(InvalidArgument, "no contents (and no raw_input_contents)")
	}
	return FromContents(dt, shape, in.GetContents())
}

// EncodeGRPCResponse builds a ModelInferResponse: outputs in
// raw_output_contents when resp.Raw is set or an output has no typed field
// (FP16, BF16; the protocol forbids mixing the two forms), in typed
// contents otherwise. Raw contents alias the tensors' data.
func EncodeGRPCResponse(resp *Response) *v2pb.ModelInferResponse {
	m := &v2pb.ModelInferResponse{ModelName: resp.ModelName, ModelVersion: resp.ModelVersion, Id: resp.ID}
	raw := resp.Raw
	for _, o := range resp.Outputs {
		if contentsField(o.Tensor.DType) == "" {
			raw = true
		}
	}
	for _, o := range resp.Outputs {
		shape := make([]int64, len(o.Tensor.Shape))
		for k, d := range o.Tensor.Shape {
			shape[k] = int64(d)
		}
		out := &v2pb.ModelInferResponse_InferOutputTensor{Name: o.Name, Datatype: Datatype(o.Tensor.DType), Shape: shape}
		if raw {
			m.RawOutputContents = append(m.RawOutputContents, RawBytes(o.Tensor))
		} else {
			out.Contents, _ = ToContents(o.Tensor)
		}
		m.Outputs = append(m.Outputs, out)
	}
	return m
}
