package oip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/attnrun/attnrun/ir"
)

// HeaderContentLength is the HTTP header of the binary tensor data
// extension: the length of the JSON part of a body that binary tensor data
// follows.
const HeaderContentLength = "Inference-Header-Content-Length"

// The parameters of the binary tensor data extension.
const (
	// ParamBinaryDataSize on an input or output: its data is this many
	// bytes of the binary part instead of a JSON "data" member.
	ParamBinaryDataSize = "binary_data_size"
	// ParamBinaryData on a requested output asks for it in binary.
	ParamBinaryData = "binary_data"
	// ParamBinaryDataOutput on a request asks for every output in binary.
	ParamBinaryDataOutput = "binary_data_output"
)

// unsupportedParams are parameters other servers define that attnrun does
// not implement; a request that uses one is refused rather than answered
// as if it had not asked.
var unsupportedParams = map[string]string{
	"classification":              "the classification extension is not supported",
	"shared_memory_region":        "the shared memory extensions are not supported",
	"shared_memory_byte_size":     "the shared memory extensions are not supported",
	"shared_memory_offset":        "the shared memory extensions are not supported",
	"sequence_id":                 "sequence batching is not supported",
	"sequence_start":              "sequence batching is not supported",
	"sequence_end":                "sequence batching is not supported",
	"binary_data_output_compress": "compressed binary outputs are not supported",
}

type httpRequest struct {
	ID           string                     `json:"id"`
	ModelName    string                     `json:"model_name"`
	ModelVersion string                     `json:"model_version"`
	Parameters   map[string]json.RawMessage `json:"parameters"`
	Inputs       []httpInput                `json:"inputs"`
	Outputs      []httpOutput               `json:"outputs"`
}

type httpInput struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   string                     `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Data       json.RawMessage            `json:"data"`
}

type httpOutput struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// DecodeHTTPRequest decodes the body of a POST .../infer. headerLength is
// the Inference-Header-Content-Length header (-1 when absent): the JSON
// object is the body's first headerLength bytes and the binary data of the
// inputs with a binary_data_size parameter follows, in input order.
// Without the header the body is all JSON.
func DecodeHTTPRequest(body []byte, headerLength int64, lim Limits) (*Request, error) {
	js, bin := body, []byte(nil)
	if headerLength >= 0 {
		if headerLength > int64(len(body)) {
			return nil, Errorf(InvalidArgument, "%s is %d, but the body has only %d bytes", HeaderContentLength, headerLength, len(body))
		}
		js, bin = body[:headerLength], body[headerLength:]
	}
	var hr httpRequest
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hr); err != nil {
		return nil, Errorf(InvalidArgument, "malformed inference request JSON: %s", jsonError(err))
	}
	if dec.More() {
		return nil, Errorf(InvalidArgument, "malformed inference request JSON: more than one JSON value (binary data needs the %s header)", HeaderContentLength)
	}
	req := &Request{ID: hr.ID, ModelName: hr.ModelName, ModelVersion: hr.ModelVersion}
	if err := checkParams("request", hr.Parameters); err != nil {
		return nil, err
	}
	var err error
	if req.BinaryOutputs, err = boolParam("request", hr.Parameters, ParamBinaryDataOutput); err != nil {
		return nil, err
	}
	if len(hr.Inputs) == 0 {
		return nil, Errorf(InvalidArgument, "the request has no inputs")
	}
	seen := map[string]bool{}
	for i, in := range hr.Inputs {
		t, rest, err := decodeHTTPInput(in, bin, lim)
		if err != nil {
			if in.Name == "" {
				return nil, Wrap(InvalidArgument, err, "inputs[%d]", i)
			}
			return nil, Wrap(InvalidArgument, err, "input %q", in.Name)
		}
		if seen[in.Name] {
			return nil, Errorf(InvalidArgument, "input %q is given twice", in.Name)
		}
		seen[in.Name] = true
		bin = rest
		req.Inputs = append(req.Inputs, NamedTensor{Name: in.Name, Tensor: t})
	}
	if len(bin) > 0 {
		return nil, Errorf(InvalidArgument, "%d bytes of binary data follow the JSON that no input's %s claims", len(bin), ParamBinaryDataSize)
	}
	clear(seen)
	for i, out := range hr.Outputs {
		if out.Name == "" {
			return nil, Errorf(InvalidArgument, "outputs[%d] has no name", i)
		}
		if seen[out.Name] {
			return nil, Errorf(InvalidArgument, "output %q is requested twice", out.Name)
		}
		seen[out.Name] = true
		what := fmt.Sprintf("output %q", out.Name)
		if err := checkParams(what, out.Parameters); err != nil {
			return nil, err
		}
		ro := RequestedOutput{Name: out.Name}
		if _, ok := out.Parameters[ParamBinaryData]; ok {
			b, err := boolParam(what, out.Parameters, ParamBinaryData)
			if err != nil {
				return nil, err
			}
			ro.Binary = &b
		}
		req.Outputs = append(req.Outputs, ro)
	}
	return req, nil
}

// decodeHTTPInput decodes one input, taking its binary data from the front
// of bin; it returns the rest of bin.
func decodeHTTPInput(in httpInput, bin []byte, lim Limits) (_ *ir.Tensor, rest []byte, _ error) {
	if in.Name == "" {
		return nil, nil, errors.New("no name")
	}
	if in.Shape == nil {
		return nil, nil, errors.New("no shape")
	}
	if in.Datatype == "" {
		return nil, nil, errors.New("no datatype")
	}
	dt, err := ParseDatatype(in.Datatype)
	if err != nil {
		return nil, nil, err
	}
	shape, err := Shape(in.Shape, dt, lim.MaxTensorBytes)
	if err != nil {
		return nil, nil, err
	}
	if err := checkParams("", in.Parameters); err != nil {
		return nil, nil, err
	}
	size, binary, err := intParam(in.Parameters, ParamBinaryDataSize)
	if err != nil {
		return nil, nil, err
	}
	if binary {
		if len(in.Data) > 0 {
			return nil, nil, fmt.Errorf("has both %s and data", ParamBinaryDataSize)
		}
		if size < 0 || size > int64(len(bin)) {
			return nil, nil, fmt.Errorf("%s is %d, but %d bytes of binary data are left", ParamBinaryDataSize, size, len(bin))
		}
		t, err := FromRaw(dt, shape, bin[:size])
		return t, bin[size:], err
	}
	if len(in.Data) == 0 || string(in.Data) == "null" {
		return nil, nil, fmt.Errorf("no data (give \"data\" or a %s parameter)", ParamBinaryDataSize)
	}
	t, err := ParseJSONData(dt, shape, in.Data)
	return t, bin, err
}

// checkParams refuses parameters of extensions attnrun does not implement.
func checkParams[V any](what string, params map[string]V) error {
	for name := range params {
		if why, ok := unsupportedParams[name]; ok {
			if what == "" {
				return Errorf(InvalidArgument, "parameter %q: %s", name, why)
			}
			return Errorf(InvalidArgument, "%s parameter %q: %s", what, name, why)
		}
	}
	return nil
}

func boolParam(what string, params map[string]json.RawMessage, name string) (bool, error) {
	raw, ok := params[name]
	if !ok {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, Errorf(InvalidArgument, "%s parameter %q must be true or false, not %s", what, name, clip(raw))
	}
	return b, nil
}

func intParam(params map[string]json.RawMessage, name string) (int64, bool, error) {
	raw, ok := params[name]
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("parameter %q must be an integer, not %s", name, clip(raw))
	}
	return v, true, nil
}

// jsonError makes encoding/json's errors name where the problem is.
func jsonError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if errors.Is(err, io.EOF) {
		return "empty body"
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of JSON"
	}
	return err.Error()
}

// EncodeHTTPResponse renders a response body. When any output is binary
// (resp.Binary), the body is the JSON object followed by those outputs'
// raw bytes in output order, and headerLength is the JSON's length for the
// Inference-Header-Content-Length header; otherwise headerLength is -1.
func EncodeHTTPResponse(resp *Response) (body []byte, headerLength int) {
	parts, headerLength := EncodeHTTPResponseParts(resp)
	return bytes.Join(parts, nil), headerLength
}

// EncodeHTTPResponseParts is EncodeHTTPResponse without the copy of the
// binary outputs: the body is the concatenation of parts, the JSON header
// first, then each binary output's raw data aliasing its tensor (on a
// little-endian machine), for a server to write one after the other.
func EncodeHTTPResponseParts(resp *Response) (parts [][]byte, headerLength int) {
	size := 128
	for i, o := range resp.Outputs {
		if i >= len(resp.Binary) || !resp.Binary[i] {
			size += 4 * o.Tensor.Len() * max(o.Tensor.DType.Size(), 1) // about 8 characters per float32 element
		}
	}
	b := make([]byte, 0, size)
	b = append(b, `{"model_name":`...)
	b = appendString(b, resp.ModelName)
	if resp.ModelVersion != "" {
		b = append(b, `,"model_version":`...)
		b = appendString(b, resp.ModelVersion)
	}
	if resp.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, resp.ID)
	}
	b = append(b, `,"outputs":[`...)
	anyBinary := false
	for i, o := range resp.Outputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, o.Name)
		b = append(b, `,"datatype":"`...)
		b = append(b, Datatype(o.Tensor.DType)...)
		b = append(b, `","shape":[`...)
		for k, d := range o.Tensor.Shape {
			if k > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, ']')
		if i < len(resp.Binary) && resp.Binary[i] {
			anyBinary = true
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(RawBytes(o.Tensor))), 10)
			b = append(b, '}')
		} else {
			b = append(b, `,"data":`...)
			b = AppendJSONData(b, o.Tensor)
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	if !anyBinary {
		return [][]byte{b}, -1
	}
	parts = [][]byte{b}
	for i, o := range resp.Outputs {
		if i < len(resp.Binary) && resp.Binary[i] {
			parts = append(parts, RawBytes(o.Tensor))
		}
	}
	return parts, len(b)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
