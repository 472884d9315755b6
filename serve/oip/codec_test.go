package oip

import (
	"encoding/binary"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/serve/v2pb"
)

func TestDatatypes(t *testing.T) {
	for name, dt := range datatypes {
		got, err := ParseDatatype(name)
		if err != nil || got != dt || Datatype(dt) != name {
			t.Errorf("%s: ParseDatatype=%v,%v Datatype=%q", name, got, err, Datatype(dt))
		}
	}
	for _, bad := range []string{"BYTES", "fp32", "FLOAT", ""} {
		if _, err := ParseDatatype(bad); err == nil || ClassOf(err) != InvalidArgument {
			t.Errorf("ParseDatatype(%q) = %v", bad, err)
		}
	}
}

func TestShapeLimits(t *testing.T) {
	if _, err := Shape([]int64{2, -1}, ir.Float, 0); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("negative dim: %v", err)
	}
	if _, err := Shape([]int64{1 << 40, 1 << 40}, ir.Float, 0); err == nil || !strings.Contains(err.Error(), "overflows") {
		t.Fatalf("overflow: %v", err)
	}
	_, err := Shape([]int64{1024, 1024}, ir.Float, 1<<20)
	if err == nil || ClassOf(err) != TooLarge || !strings.Contains(err.Error(), "4194304 bytes, above the tensor size limit of 1048576 bytes") {
		t.Fatalf("limit: %v", err)
	}
	if s, err := Shape([]int64{512, 512}, ir.Float, 1<<20); err != nil || !reflect.DeepEqual(s, []int{512, 512}) {
		t.Fatalf("at the limit: %v %v", s, err)
	}
}

func TestRaw(t *testing.T) {
	raw := make([]byte, 12)
	for i, v := range []float32{1, -2, 0.5} {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	got, err := FromRaw(ir.Float, []int{3}, raw[:12])
	if err != nil || !reflect.DeepEqual(got.Data, []float32{1, -2, 0.5}) {
		t.Fatalf("%v %v", got, err)
	}
	// Unaligned source bytes.
	un := append([]byte{0}, raw...)[1:]
	if got, err = FromRaw(ir.Float, []int{3}, un); err != nil || !reflect.DeepEqual(got.Data, []float32{1, -2, 0.5}) {
		t.Fatalf("unaligned: %v %v", got, err)
	}
	if string(RawBytes(got)) != string(raw) {
		t.Fatal("RawBytes does not round-trip")
	}
	// Aligned bytes are aliased, not copied.
	aligned := make([]byte, 12)
	copy(aligned, raw)
	a, err := FromRaw(ir.Float, []int{3}, aligned)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(aligned, math.Float32bits(7))
	if a.Data.([]float32)[0] != 7 {
		t.Fatal("aligned raw data was copied")
	}
	b, err := FromRaw(ir.Bool, []int{3}, []byte{0, 1, 7})
	if err != nil || !reflect.DeepEqual(b.Data, []bool{false, true, true}) {
		t.Fatalf("bool: %v %v", b, err)
	}
	if _, err := FromRaw(ir.Float, []int{2, 2}, raw); err == nil || !strings.Contains(err.Error(), "needs 16 bytes of raw data, got 12") {
		t.Fatalf("size mismatch: %v", err)
	}
}

func TestContents(t *testing.T) {
	c := &v2pb.InferTensorContents{IntContents: []int32{1, -2, 300}}
	got, err := FromContents(ir.Int16, []int{3}, c)
	if err != nil || !reflect.DeepEqual(got.Data, []int16{1, -2, 300}) {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := FromContents(ir.Int8, []int{3}, c); err == nil || !strings.Contains(err.Error(), "int_contents value 2 is out of range for INT8") {
		t.Fatalf("range: %v", err)
	}
	if _, err := FromContents(ir.Int32, []int{2}, c); err == nil || !strings.Contains(err.Error(), "int_contents has 3 values for shape [2]") {
		t.Fatalf("count: %v", err)
	}
	if _, err := FromContents(ir.Float, []int{3}, c); err == nil || !strings.Contains(err.Error(), "FP32 data belongs in fp32_contents, but int_contents is set") {
		t.Fatalf("field: %v", err)
	}
	if _, err := FromContents(ir.Float16, []int{3}, c); err == nil || !strings.Contains(err.Error(), "raw_input_contents") {
		t.Fatalf("fp16: %v", err)
	}
	for _, in := range []*ir.Tensor{
		ir.FromSlice([]int{2}, []uint8{0, 255}), ir.FromSlice([]int{1}, []bool{true}),
		ir.FromSlice([]int{2}, []float64{1, 2}), ir.FromSlice([]int{2}, []uint16{9, 65535}),
	} {
		c, ok := ToContents(in)
		if !ok {
			t.Fatalf("%v: no contents", in.DType)
		}
		back, err := FromContents(in.DType, in.Shape, c)
		if err != nil || !reflect.DeepEqual(back.Data, in.Data) {
			t.Fatalf("%v: %v %v", in.DType, back, err)
		}
	}
}

func TestDecodeHTTPRequestJSON(t *testing.T) {
	body := `{"id":"42","parameters":{"binary_data_output":true,"custom":1},
	  "inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]},
	            {"name":"m","shape":[2],"datatype":"BOOL","data":[true,false]}],
	  "outputs":[{"name":"y","parameters":{"binary_data":false}}]}`
	req, err := DecodeHTTPRequest([]byte(body), -1, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if req.ID != "42" || !req.BinaryOutputs || len(req.Inputs) != 2 || len(req.Outputs) != 1 {
		t.Fatalf("%+v", req)
	}
	if !reflect.DeepEqual(req.Inputs[0].Tensor.Data, []float32{1, 2, 3, 4}) || req.Outputs[0].Binary == nil || *req.Outputs[0].Binary {
		t.Fatalf("%+v %+v", req.Inputs[0].Tensor, req.Outputs[0])
	}
}

func TestDecodeHTTPRequestBinary(t *testing.T) {
	js := `{"inputs":[{"name":"a","shape":[2],"datatype":"INT64","parameters":{"binary_data_size":16}},` +
		`{"name":"b","shape":[1],"datatype":"FP32","data":[0.5]},` +
		`{"name":"c","shape":[3],"datatype":"UINT8","parameters":{"binary_data_size":3}}]}`
	bin := make([]byte, 19)
	binary.LittleEndian.PutUint64(bin, 7)
	binary.LittleEndian.PutUint64(bin[8:], math.MaxUint64) // -1
	copy(bin[16:], []byte{1, 2, 3})
	req, err := DecodeHTTPRequest(append([]byte(js), bin...), int64(len(js)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req.Inputs[0].Tensor.Data, []int64{7, -1}) || !reflect.DeepEqual(req.Inputs[2].Tensor.Data, []uint8{1, 2, 3}) {
		t.Fatalf("%v %v", req.Inputs[0].Tensor.Data, req.Inputs[2].Tensor.Data)
	}
}

func TestDecodeHTTPRequestErrors(t *testing.T) {
	x := func(extra string) string {
		return `{"inputs":[{"name":"x","shape":[2],"datatype":"FP32"` + extra + `}]}`
	}
	cases := []struct {
		name, body string
		header     int64
		class      Class
		want       string
	}{
		{"empty", ``, -1, InvalidArgument, "empty body"},
		{"not json", `{"inputs":[`, -1, InvalidArgument, "malformed inference request JSON"},
		{"syntax", `{"inputs":]}`, -1, InvalidArgument, "at byte"},
		{"unknown field", `{"input":[]}`, -1, InvalidArgument, `unknown field "input"`},
		{"two values", x(`,"data":[1,2]`) + `{}`, -1, InvalidArgument, "more than one JSON value"},
		{"no inputs", `{"inputs":[]}`, -1, InvalidArgument, "no inputs"},
		{"no name", `{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}`, -1, InvalidArgument, "inputs[0]: no name"},
		{"no shape", `{"inputs":[{"name":"x","datatype":"FP32","data":[1]}]}`, -1, InvalidArgument, `input "x": no shape`},
		{"no datatype", `{"inputs":[{"name":"x","shape":[1],"data":[1]}]}`, -1, InvalidArgument, "no datatype"},
		{"bad datatype", x(`,"datatype2":1`), -1, InvalidArgument, "unknown field"},
		{"shape not ints", `{"inputs":[{"name":"x","shape":[1.5],"datatype":"FP32","data":[1]}]}`, -1, InvalidArgument, "cannot unmarshal"},
		{"negative shape", `{"inputs":[{"name":"x","shape":[-2],"datatype":"FP32","data":[1]}]}`, -1, InvalidArgument, "negative dim"},
		{"no data", x(``), -1, InvalidArgument, "no data"},
		{"null data", x(`,"data":null`), -1, InvalidArgument, "no data"},
		{"bad data", x(`,"data":[1,"a"]`), -1, InvalidArgument, `element 1`},
		{"duplicate", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]},{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`, -1, InvalidArgument, "given twice"},
		{"too large", `{"inputs":[{"name":"x","shape":[1000000],"datatype":"FP32","data":[1]}]}`, -1, TooLarge, "above the tensor size limit"},
		{"header beyond body", x(`,"data":[1,2]`), 10000, InvalidArgument, "has only"},
		{"binary short", x(`,"parameters":{"binary_data_size":8}`), -1, InvalidArgument, "8, but 0 bytes of binary data are left"},
		{"binary and data", x(`,"parameters":{"binary_data_size":8},"data":[1,2]`), -1, InvalidArgument, "both"},
		{"binary size not int", x(`,"parameters":{"binary_data_size":"8"}`), -1, InvalidArgument, "must be an integer"},
		{"binary size mismatch", x(`,"parameters":{"binary_data_size":4}`) + "abcd", int64(len(x(`,"parameters":{"binary_data_size":4}`))), InvalidArgument, "needs 8 bytes of raw data, got 4"},
		{"leftover binary", x(`,"data":[1,2]`) + "zz", int64(len(x(`,"data":[1,2]`))), InvalidArgument, "2 bytes of binary data follow"},
		{"classification", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{"name":"y","parameters":{"classification":3}}]}`, -1, InvalidArgument, "classification extension"},
		{"shm", x(`,"parameters":{"shared_memory_region":"r"}`), -1, InvalidArgument, "shared memory"},
		{"output twice", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{"name":"y"},{"name":"y"}]}`, -1, InvalidArgument, "requested twice"},
		{"binary_data not bool", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{"name":"y","parameters":{"binary_data":1}}]}`, -1, InvalidArgument, "must be true or false"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeHTTPRequest([]byte(c.body), c.header, Limits{MaxTensorBytes: 1 << 20})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if ClassOf(err) != c.class {
				t.Fatalf("class %v, want %v", ClassOf(err), c.class)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
		})
	}
}

func TestEncodeHTTPResponse(t *testing.T) {
	resp := &Response{ModelName: "m", ModelVersion: "2", ID: "r\"1", Outputs: []NamedTensor{
		{Name: "y", Tensor: ir.FromSlice([]int{1, 2}, []float32{0.5, -1})},
		{Name: "z", Tensor: ir.FromSlice([]int{2}, []int32{3, 4})},
	}}
	body, hl := EncodeHTTPResponse(resp)
	want := `{"model_name":"m","model_version":"2","id":"r\"1","outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"data":[0.5,-1]},{"name":"z","datatype":"INT32","shape":[2],"data":[3,4]}]}`
	if hl != -1 || string(body) != want {
		t.Fatalf("%d %s", hl, body)
	}
	resp.Binary = []bool{false, true}
	body, hl = EncodeHTTPResponse(resp)
	js := `{"model_name":"m","model_version":"2","id":"r\"1","outputs":[{"name":"y","datatype":"FP32","shape":[1,2],"data":[0.5,-1]},{"name":"z","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}}]}`
	if hl != len(js) || string(body[:hl]) != js || string(body[hl:]) != "\x03\x00\x00\x00\x04\x00\x00\x00" {
		t.Fatalf("%d %q", hl, body)
	}
}

func TestGRPCRequestRoundTrip(t *testing.T) {
	raw := make([]byte, 8)
	binary.LittleEndian.PutUint32(raw, math.Float32bits(1.5))
	binary.LittleEndian.PutUint32(raw[4:], math.Float32bits(-2))
	m := &v2pb.ModelInferRequest{ModelName: "m", Id: "7",
		Inputs:           []*v2pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}}},
		RawInputContents: [][]byte{raw},
		Outputs:          []*v2pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y"}},
	}
	req, err := DecodeGRPCRequest(m, Limits{})
	if err != nil || !req.RawOutputs || !reflect.DeepEqual(req.Inputs[0].Tensor.Data, []float32{1.5, -2}) || req.Outputs[0].Name != "y" {
		t.Fatalf("%+v %v", req, err)
	}
	resp := EncodeGRPCResponse(&Response{ModelName: "m", ID: "7", Raw: true, Outputs: req.Inputs})
	if len(resp.RawOutputContents) != 1 || string(resp.RawOutputContents[0]) != string(raw) || resp.Outputs[0].Contents != nil {
		t.Fatalf("%v", resp)
	}
	// Typed in, typed out, except FP16 which forces raw for every output.
	m.RawInputContents = nil
	m.Inputs[0].Contents = &v2pb.InferTensorContents{Fp32Contents: []float32{1.5, -2}}
	if req, err = DecodeGRPCRequest(m, Limits{}); err != nil || req.RawOutputs {
		t.Fatal(err)
	}
	resp = EncodeGRPCResponse(&Response{Outputs: req.Inputs})
	if resp.Outputs[0].GetContents().GetFp32Contents()[1] != -2 || resp.RawOutputContents != nil {
		t.Fatalf("%v", resp)
	}
	resp = EncodeGRPCResponse(&Response{Outputs: append(req.Inputs, NamedTensor{Name: "h", Tensor: &ir.Tensor{DType: ir.Float16, Shape: []int{1}, Data: []uint16{0x3c00}}})})
	if len(resp.RawOutputContents) != 2 || resp.Outputs[0].Contents != nil {
		t.Fatalf("fp16 forces raw: %v", resp)
	}
}

func TestDecodeGRPCRequestErrors(t *testing.T) {
	in := func(name, dt string, shape ...int64) *v2pb.ModelInferRequest_InferInputTensor {
		return &v2pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape}
	}
	cases := []struct {
		name string
		m    *v2pb.ModelInferRequest
		want string
	}{
		{"no inputs", &v2pb.ModelInferRequest{}, "no inputs"},
		{"raw count", &v2pb.ModelInferRequest{Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in("x", "FP32", 1), in("y", "FP32", 1)}, RawInputContents: [][]byte{{0, 0, 0, 0}}}, "1 entries for 2 inputs"},
		{"raw size", &v2pb.ModelInferRequest{Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in("x", "FP32", 2)}, RawInputContents: [][]byte{{0, 0, 0, 0}}}, `input "x": FP32 shape [2] needs 8 bytes of raw data, got 4`},
		{"no contents", &v2pb.ModelInferRequest{Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in("x", "FP32", 2)}}, "no contents"},
		{"no datatype", &v2pb.ModelInferRequest{Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in("x", "", 2)}}, "no datatype"},
		{"no name", &v2pb.ModelInferRequest{Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in("", "FP32", 2)}}, "inputs[0] has no name"},
		{"shm", &v2pb.ModelInferRequest{Parameters: map[string]*v2pb.InferParameter{"shared_memory_region": {}}, Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in("x", "FP32", 2)}}, "shared memory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeGRPCRequest(c.m, Limits{})
			if err == nil || !strings.Contains(err.Error(), c.want) || ClassOf(err) != InvalidArgument {
				t.Fatalf("error %v (%v), want invalid_argument containing %q", err, ClassOf(err), c.want)
			}
		})
	}
}

func TestClassMapping(t *testing.T) {
	want := map[Class]struct {
		http int
		code codes.Code
	}{
		InvalidArgument: {http.StatusBadRequest, codes.InvalidArgument}, NotFound: {http.StatusNotFound, codes.NotFound},
		TooLarge: {http.StatusRequestEntityTooLarge, codes.InvalidArgument}, Unavailable: {http.StatusServiceUnavailable, codes.Unavailable},
		DeadlineExceeded: {http.StatusGatewayTimeout, codes.DeadlineExceeded}, Internal: {http.StatusInternalServerError, codes.Internal},
		Canceled: {StatusClientClosed, codes.Canceled},
	}
	for c, w := range want {
		if HTTPStatus(c) != w.http || GRPCCode(c) != w.code {
			t.Errorf("%v: %d %v", c, HTTPStatus(c), GRPCCode(c))
		}
	}
	wrapped := Wrap(InvalidArgument, Errorf(TooLarge, "big"), "input %q", "x")
	if ClassOf(wrapped) != TooLarge || wrapped.Error() != `input "x": big` {
		t.Fatalf("Wrap: %v %v", ClassOf(wrapped), wrapped)
	}
}
