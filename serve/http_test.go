package serve

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// httpServer serves a one-model repository over a real HTTP listener.
func httpServer(t *testing.T, maxBody int64) (*Server, string) {
	t.Helper()
	dir := repository(t, map[string]string{"causal/1": "s000_causal"})
	s := start(t, Options{Repository: dir, MaxTensorBytes: 1 << 20})
	ts := httptest.NewServer(s.HTTPHandler(maxBody))
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func post(t *testing.T, url, contentType string, body []byte, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

// causalJSON is a valid JSON request for s000_causal with seq 2.
func causalJSON(extra string) string {
	x := make([]string, 64)
	for i := range x {
		x[i] = strconv.FormatFloat(float64(i%7)/7-0.5, 'g', -1, 32)
	}
	return `{"id":"q1","inputs":[{"name":"x","shape":[1,2,32],"datatype":"FP32","data":[` + strings.Join(x, ",") + `]},` +
		`{"name":"mask","shape":[1,2],"datatype":"BOOL","data":[[false,true]]}]` + extra + `}`
}

func TestHTTPInferJSONAndBinaryAgree(t *testing.T) {
	_, url := httpServer(t, 1<<20)
	resp, body := post(t, url+"/v2/models/causal/versions/1/infer", "application/json", []byte(causalJSON("")), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var jr struct {
		ModelName    string `json:"model_name"`
		ModelVersion string `json:"model_version"`
		ID           string `json:"id"`
		Outputs      []struct {
			Name, Datatype string
			Shape          []int
			Data           []float32
		}
	}
	if err := json.Unmarshal(body, &jr); err != nil {
		t.Fatal(err)
	}
	if jr.ModelName != "causal" || jr.ModelVersion != "1" || jr.ID != "q1" || fmt.Sprint(jr.Outputs[0].Shape) != "[1 2 32]" || len(jr.Outputs[0].Data) != 64 {
		t.Fatalf("%+v", jr)
	}
	// The same request with x in binary and the output asked in binary.
	js := `{"id":"q2","inputs":[{"name":"x","shape":[1,2,32],"datatype":"FP32","parameters":{"binary_data_size":256}},` +
		`{"name":"mask","shape":[1,2],"datatype":"BOOL","parameters":{"binary_data_size":2}}],"parameters":{"binary_data_output":true}}`
	bin := make([]byte, 258)
	for i := 0; i < 64; i++ {
		binary.LittleEndian.PutUint32(bin[4*i:], math.Float32bits(float32(float64(i%7)/7-0.5)))
	}
	bin[256], bin[257] = 0, 1
	resp, body = post(t, url+"/v2/models/causal/infer", "application/octet-stream", append([]byte(js), bin...),
		map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(js))})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	hl, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	if err != nil || hl > len(body) {
		t.Fatalf("header length %q", resp.Header.Get("Inference-Header-Content-Length"))
	}
	if want := `{"model_name":"causal","model_version":"1","id":"q2","outputs":[{"name":"y","datatype":"FP32","shape":[1,2,32],"parameters":{"binary_data_size":256}}]}`; string(body[:hl]) != want {
		t.Fatalf("JSON part %s", body[:hl])
	}
	raw := body[hl:]
	for i, want := range jr.Outputs[0].Data {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
			t.Fatalf("element %d: binary %v, JSON %v", i, got, want)
		}
	}
	// gzip-compressed JSON.
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(causalJSON("")))
	w.Close()
	if resp, body = post(t, url+"/v2/models/causal/infer", "application/json", gz.Bytes(), map[string]string{"Content-Encoding": "gzip"}); resp.StatusCode != 200 {
		t.Fatalf("gzip: %d %s", resp.StatusCode, body)
	}
}

func TestHTTPErrors(t *testing.T) {
	_, url := httpServer(t, 4096)
	big := `{"inputs":[{"name":"x","shape":[1,2,32],"datatype":"FP32","data":[` + strings.Repeat("0.5,", 2000) + `0]}]}`
	cases := []struct {
		method, path, body string
		header             map[string]string
		status             int
		want               string
	}{
		{"POST", "/v2/models/nope/infer", `{}`, nil, 404, `unknown model \"nope\"`},
		{"POST", "/v2/models/causal/versions/9/infer", `{}`, nil, 404, `has no version \"9\" loaded`},
		{"POST", "/v2/models/causal/infer", `{"inputs":[`, nil, 400, "malformed inference request JSON"},
		{"POST", "/v2/models/causal/infer", causalJSON(`,"outputs":[{"name":"nope"}]`), nil, 400, `has no output \"nope\"`},
		{"POST", "/v2/models/causal/infer", strings.Replace(causalJSON(""), `"BOOL"`, `"INT64"`, 1), nil, 400, `element 0: \"false\" is not an integer`},
		{"POST", "/v2/models/causal/infer", strings.Replace(causalJSON(""), `"shape":[1,2],"datatype":"BOOL","data":[[false,true]]`, `"shape":[1,2],"datatype":"UINT8","data":[[0,1]]`, 1), nil, 400, `input \"mask\" has datatype UINT8, the model takes BOOL`},
		{"POST", "/v2/models/causal/infer", `{"inputs":[{"name":"x","shape":[1,100000,32],"datatype":"FP32","data":[]}]}`, nil, 413, "above the tensor size limit of 1048576 bytes"},
		{"POST", "/v2/models/causal/infer", big, nil, 413, "over the limit of 4096 bytes (--max-request-bytes)"},
		{"POST", "/v2/models/causal/infer", causalJSON(""), map[string]string{"Inference-Header-Content-Length": "x"}, 400, "is not a byte count"},
		{"POST", "/v2/models/causal/infer", causalJSON(""), map[string]string{"Content-Encoding": "br"}, 400, `Content-Encoding \"br\" is not supported`},
		{"POST", "/v2/models/causal/infer", "not gzip", map[string]string{"Content-Encoding": "gzip"}, 400, "does not decompress"},
		{"GET", "/v2/models/causal/infer", "", nil, 405, "method not allowed (use POST)"},
		{"POST", "/v2/models/causal", "", nil, 405, "method not allowed (use GET)"},
		{"GET", "/v3/anything", "", nil, 404, "no endpoint GET /v3/anything"},
		{"GET", "/v2/repository/index", "", nil, 405, "use POST"},
		{"POST", "/v2/repository/models/nope/load", "", nil, 404, `unknown model \"nope\"`},
		{"POST", "/v2/repository/models/causal/load", `{"parameters":{"config":"{}"}}`, nil, 400, "config.yaml"},
		{"POST", "/v2/repository/index", `{"readyy":true}`, nil, 400, "unknown field"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, url+c.path, strings.NewReader(c.body))
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb errorBody
		if resp.StatusCode != c.status || json.Unmarshal(body, &eb) != nil || !strings.Contains(string(body), c.want) || strings.Count(eb.Error, "\n") > 0 {
			t.Errorf("%s %s: %d %s, want %d with an error containing %s", c.method, c.path, resp.StatusCode, body, c.status, c.want)
		}
	}
}

func TestHTTPHealthMetadataRepository(t *testing.T) {
	s, url := httpServer(t, 1<<20)
	get := func(path string) (int, string) {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for path, want := range map[string]string{
		"/v2/health/live": "", "/v2/health/ready": "", "/v2/models/causal/ready": "", "/v2/models/causal/versions/1/ready": "",
		"/v2":               `{"name":"attnrun","version":"","extensions":["binary_tensor_data","model_repository"]}`,
		"/v2/models/causal": `{"name":"causal","versions":["1"],"platform":"onnx","inputs":[{"name":"x","datatype":"FP32","shape":[-1,-1,32]},{"name":"mask","datatype":"BOOL","shape":[-1,-1]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1,-1,32]}]}`,
	} {
		if code, body := get(path); code != 200 || body != want {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
	if code, _ := get("/v2/models/nope/ready"); code != 404 {
		t.Errorf("unknown model ready: %d", code)
	}
	if resp, body := post(t, url+"/v2/repository/models/causal/unload", "application/json", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("unload: %d %s", resp.StatusCode, body)
	}
	if code, _ := get("/v2/models/causal/ready"); code != 400 {
		t.Errorf("ready after unload: %d, want 400 (not ready)", code)
	}
	if resp, body := post(t, url+"/v2/repository/index", "application/json", nil, nil); resp.StatusCode != 200 || string(body) != `[{"name":"causal","state":"UNAVAILABLE","reason":"unloaded"}]` {
		t.Fatalf("index: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, url+"/v2/repository/models/causal/load", "application/json", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("load: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, url+"/v2/repository/index", "application/json", []byte(`{"ready":true}`), nil); string(body) != `[{"name":"causal","version":"1","state":"READY"}]` {
		t.Fatalf("index: %d %s", resp.StatusCode, body)
	}
	s.Drain(t.Context())
	if code, _ := get("/v2/health/ready"); code != 400 {
		t.Errorf("ready while draining: %d", code)
	}
	if code, _ := get("/v2/health/live"); code != 200 {
		t.Errorf("live while draining: %d", code)
	}
	if resp, body := post(t, url+"/v2/models/causal/infer", "application/json", []byte(causalJSON("")), nil); resp.StatusCode != 503 || !strings.Contains(string(body), "shutting down") {
		t.Errorf("infer while draining: %d %s", resp.StatusCode, body)
	}
}
