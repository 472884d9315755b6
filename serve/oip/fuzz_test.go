package oip

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// FuzzDecodeHTTPRequest feeds arbitrary bodies and header lengths to the
// HTTP request decoder: it must never panic, must keep within the tensor
// size limit, and every tensor it returns must be consistent. `go test`
// runs the seeds below (and testdata/fuzz/FuzzDecodeHTTPRequest, if any);
// `go test -fuzz FuzzDecodeHTTPRequest ./serve/oip` explores further.
func FuzzDecodeHTTPRequest(f *testing.F) {
	seeds := []struct {
		body   string
		header int64
	}{
		{`{"id":"1","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]}]}`, -1},
		{`{"inputs":[{"name":"x","shape":[3],"datatype":"INT64","data":[1,2,3]}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`, -1},
		{`{"inputs":[{"name":"m","shape":[1,2],"datatype":"BOOL","data":[true,false]}],"parameters":{"binary_data_output":true}}`, -1},
		{`{"inputs":[{"name":"x","shape":[2],"datatype":"FP16","parameters":{"binary_data_size":4}}]}` + "\x00\x3c\x00\xbc", 79},
		{`{"inputs":[{"name":"x","shape":[2],"datatype":"UINT8","parameters":{"binary_data_size":2}}]}` + "\x01\x02", 80},
		{`{"inputs":[{"name":"x","shape":[],"datatype":"FP64","data":1e308}]}`, -1},
		{`{"inputs":[{"name":"x","shape":[1099511627776,1099511627776],"datatype":"FP32","data":[]}]}`, -1},
		{`{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,[2]]}]}`, -1},
		{`{"inputs":[{"name":"x","shape":[2,1],"datatype":"INT8","data":[[1],[128]]}]}`, -1},
		{`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":-4}}]}`, -1},
		{`{"inputs":[`, -1},
		{``, 0},
		{`[]`, -1},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.header)
	}
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, body []byte, header int64) {
		req, err := DecodeHTTPRequest(body, header, Limits{MaxTensorBytes: limit})
		if err != nil {
			if ClassOf(err) == Internal {
				t.Fatalf("decoding error without a class: %v", err)
			}
			return
		}
		if len(req.Inputs) == 0 {
			t.Fatal("accepted a request without inputs")
		}
		for _, in := range req.Inputs {
			tt := in.Tensor
			if err := tt.Check(); err != nil {
				t.Fatalf("input %q: %v", in.Name, err)
			}
			if int64(tt.Len()*tt.DType.Size()) > limit {
				t.Fatalf("input %q: %d elements of %v pass a %d-byte limit", in.Name, tt.Len(), tt.DType, limit)
			}
			if int64(tt.Len()) != ir.NumElements(tt.Shape) {
				t.Fatalf("input %q: %d elements for shape %v", in.Name, tt.Len(), tt.Shape)
			}
		}
	})
}
