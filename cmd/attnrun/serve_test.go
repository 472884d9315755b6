package main

// End-to-end tests of `attnrun serve`: the real binary on free loopback
// ports, driven by plain HTTP (JSON and binary tensors) and by the gRPC
// client generated from KServe's grpc_predict_v2.proto, its answers
// checked against PyTorch's reference outputs in models/.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/attnrun/attnrun/internal/procfs"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/conform"
	"github.com/attnrun/attnrun/serve/v2pb"
)

// servedModels are the models/ cases the end-to-end test serves: float,
// bool and int64 inputs, 2-D and 3-D, one to four inputs.
var servedModels = []string{"s000_multi_head", "s000_causal", "s002_self_attention_v3", "s003_attention", "s001_cross_attention"}

// server is a running `attnrun serve`.
type server struct {
	cmd                 *exec.Cmd
	http, grpc, metrics string // host:port
	stderr              *lockedBuffer
	exited              chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var servingLine = regexp.MustCompile(`msg=serving http=(\S+) grpc=(\S+) metrics=(\S+)`)

// startServe starts attnrun serve on free loopback ports and waits for its
// "serving" log line. The server is killed when the test ends.
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	args = append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--threads", "1"}, args...)
	cmd := exec.Command(binPath, args...)
	pr, pw := io.Pipe()
	s := &server{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = io.MultiWriter(pw, s.stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.exited
	})
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
		close(found)
	}()
	select {
	case m, ok := <-found:
		if !ok {
			t.Fatalf("attnrun serve exited before serving:\n%s", s.stderr)
		}
		s.http, s.grpc, s.metrics = m[1], m[2], m[3]
		go io.Copy(io.Discard, pr)
	case <-time.After(30 * time.Second):
		t.Fatalf("attnrun serve did not start in 30 s:\n%s", s.stderr)
	}
	return s
}

// dataSet is one test_data_set_N: named inputs (in graph order) and outputs.
type dataSet struct {
	name    string
	inputs  []namedTensor
	outputs map[string]*ir.Tensor
}

type namedTensor struct {
	name string
	t    *ir.Tensor
}

func readDataSets(t *testing.T, model string) []dataSet {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(modelsDir, model, "test_data_set_*"))
	sort.Strings(dirs)
	var out []dataSet
	for _, dir := range dirs {
		ds := dataSet{name: model + "/" + filepath.Base(dir), outputs: map[string]*ir.Tensor{}}
		ins, _ := filepath.Glob(filepath.Join(dir, "input_*.pb"))
		sort.Strings(ins)
		for _, f := range ins {
			name, tn := readPb(t, f)
			ds.inputs = append(ds.inputs, namedTensor{name, tn})
		}
		outs, _ := filepath.Glob(filepath.Join(dir, "output_*.pb"))
		for _, f := range outs {
			name, tn := readPb(t, f)
			ds.outputs[name] = tn
		}
		out = append(out, ds)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no data sets", model)
	}
	return out
}

// datatype is the protocol's name for the element types these models use.
func datatype(t *testing.T, dt ir.DType) string {
	switch dt {
	case ir.Float:
		return "FP32"
	case ir.Bool:
		return "BOOL"
	case ir.Int64:
		return "INT64"
	}
	t.Fatalf("no datatype for %v", dt)
	return ""
}

// littleEndian is a tensor's elements as raw little-endian bytes, written
// with encoding/binary (independently of the server's code).
func littleEndian(t *testing.T, tn *ir.Tensor) []byte {
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, tn.Data); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func int64s(shape []int) []int64 {
	out := make([]int64, len(shape))
	for i, d := range shape {
		out[i] = int64(d)
	}
	return out
}

// nested turns a flat slice into nested JSON arrays of the tensor's shape.
func nested(data any, shape []int) any {
	flat, _ := json.Marshal(data)
	var elems []json.RawMessage
	json.Unmarshal(flat, &elems)
	var build func(elems []json.RawMessage, shape []int) any
	build = func(elems []json.RawMessage, shape []int) any {
		if len(shape) <= 1 {
			return elems
		}
		n := len(elems) / max(shape[0], 1)
		out := make([]any, shape[0])
		for i := range out {
			out[i] = build(elems[i*n:(i+1)*n], shape[1:])
		}
		return out
	}
	return build(elems, shape)
}

func checkOutput(t *testing.T, what string, ds dataSet, name string, got *ir.Tensor) {
	t.Helper()
	want := ds.outputs[name]
	if want == nil {
		t.Fatalf("%s: unexpected output %q", what, name)
	}
	if fmt.Sprint(got.Shape) != fmt.Sprint(want.Shape) {
		t.Fatalf("%s: output %q shape %v, PyTorch's %v", what, name, got.Shape, want.Shape)
	}
	if a, r, err := conform.Compare(got, want, conform.Tolerance{Rtol: 1e-4, Atol: 1e-5}); err != nil {
		t.Fatalf("%s: output %q differs from PyTorch's (max abs %g, rel %g): %v", what, name, a, r, err)
	}
}

// httpJSON sends a data set as JSON (nested arrays when nest is set) and
// checks the outputs.
func httpJSON(t *testing.T, s *server, model string, ds dataSet, nest bool) {
	type input struct {
		Name     string  `json:"name"`
		Shape    []int64 `json:"shape"`
		Datatype string  `json:"datatype"`
		Data     any     `json:"data"`
	}
	req := map[string]any{"id": ds.name}
	var ins []input
	for _, in := range ds.inputs {
		var data any = in.t.Data
		if nest {
			data = nested(in.t.Data, in.t.Shape)
		}
		ins = append(ins, input{in.name, int64s(in.t.Shape), datatype(t, in.t.DType), data})
	}
	req["inputs"] = ins
	body, _ := json.Marshal(req)
	resp, err := http.Post("http://"+s.http+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: HTTP %d %s", ds.name, resp.StatusCode, raw)
	}
	var out struct {
		ModelName string `json:"model_name"`
		ID        string `json:"id"`
		Outputs   []struct {
			Name     string    `json:"name"`
			Datatype string    `json:"datatype"`
			Shape    []int     `json:"shape"`
			Data     []float32 `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v: %s", ds.name, err, raw)
	}
	if out.ModelName != model || out.ID != ds.name || len(out.Outputs) != len(ds.outputs) {
		t.Fatalf("%s: response %s", ds.name, raw)
	}
	for _, o := range out.Outputs {
		checkOutput(t, ds.name+" (HTTP JSON)", ds, o.Name, ir.FromSlice(o.Shape, o.Data))
	}
}

// httpBinary sends a data set with the binary tensor data extension and
// asks for binary outputs.
func httpBinary(t *testing.T, s *server, model string, ds dataSet) {
	body, jsonLen := binaryBody(t, ds)
	r := postBinary(s, model, body, jsonLen)
	checkBinary(t, ds, r)
}

// binaryBody is a data set's request body: JSON, then the inputs' bytes.
func binaryBody(t *testing.T, ds dataSet) (body []byte, jsonLen int) {
	type input struct {
		Name       string         `json:"name"`
		Shape      []int64        `json:"shape"`
		Datatype   string         `json:"datatype"`
		Parameters map[string]any `json:"parameters"`
	}
	var ins []input
	var bin []byte
	for _, in := range ds.inputs {
		raw := littleEndian(t, in.t)
		bin = append(bin, raw...)
		ins = append(ins, input{in.name, int64s(in.t.Shape), datatype(t, in.t.DType), map[string]any{"binary_data_size": len(raw)}})
	}
	var outs []map[string]any
	for name := range ds.outputs {
		outs = append(outs, map[string]any{"name": name, "parameters": map[string]any{"binary_data": true}})
	}
	js, _ := json.Marshal(map[string]any{"inputs": ins, "outputs": outs})
	return append(js, bin...), len(js)
}

// binaryReply is what came back for a binary request.
type binaryReply struct {
	status       int
	headerLength string
	body         []byte
	err          error
}

// postBinary sends a binary request (safe from any goroutine).
func postBinary(s *server, model string, body []byte, jsonLen int) binaryReply {
	req, _ := http.NewRequest("POST", "http://"+s.http+"/v2/models/"+model+"/versions/1/infer", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(jsonLen))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return binaryReply{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return binaryReply{resp.StatusCode, resp.Header.Get("Inference-Header-Content-Length"), raw, err}
}

// checkBinary checks a binary reply's outputs.
func checkBinary(t *testing.T, ds dataSet, r binaryReply) {
	t.Helper()
	if r.err != nil || r.status != 200 {
		t.Fatalf("%s: HTTP %d %v %s", ds.name, r.status, r.err, r.body)
	}
	hl, err := strconv.Atoi(r.headerLength)
	if err != nil || hl > len(r.body) {
		t.Fatalf("%s: Inference-Header-Content-Length %q", ds.name, r.headerLength)
	}
	var out struct {
		Outputs []struct {
			Name       string `json:"name"`
			Shape      []int  `json:"shape"`
			Parameters struct {
				Size int `json:"binary_data_size"`
			} `json:"parameters"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(r.body[:hl], &out); err != nil {
		t.Fatal(err)
	}
	rest := r.body[hl:]
	for _, o := range out.Outputs {
		data := make([]float32, o.Parameters.Size/4)
		if o.Parameters.Size > len(rest) || binary.Read(bytes.NewReader(rest[:o.Parameters.Size]), binary.LittleEndian, data) != nil {
			t.Fatalf("%s: binary output %q: %d bytes claimed, %d left", ds.name, o.Name, o.Parameters.Size, len(rest))
		}
		rest = rest[o.Parameters.Size:]
		checkOutput(t, ds.name+" (HTTP binary)", ds, o.Name, ir.FromSlice(o.Shape, data))
	}
}

// grpcInfer sends a data set over gRPC, in raw_input_contents or in typed
// contents.
func grpcInfer(t *testing.T, c v2pb.GRPCInferenceServiceClient, model string, ds dataSet, raw bool) {
	req := &v2pb.ModelInferRequest{ModelName: model, Id: ds.name}
	for _, in := range ds.inputs {
		tin := &v2pb.ModelInferRequest_InferInputTensor{Name: in.name, Datatype: datatype(t, in.t.DType), Shape: int64s(in.t.Shape)}
		if raw {
			req.RawInputContents = append(req.RawInputContents, littleEndian(t, in.t))
		} else {
			tin.Contents = &v2pb.InferTensorContents{}
			switch d := in.t.Data.(type) {
			case []float32:
				tin.Contents.Fp32Contents = d
			case []bool:
				tin.Contents.BoolContents = d
			case []int64:
				tin.Contents.Int64Contents = d
			}
		}
		req.Inputs = append(req.Inputs, tin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatalf("%s: gRPC: %v", ds.name, err)
	}
	if resp.GetId() != ds.name || resp.GetModelName() != model || resp.GetModelVersion() != "1" {
		t.Fatalf("%s: response %v", ds.name, resp)
	}
	what := ds.name + " (gRPC typed)"
	if raw {
		what = ds.name + " (gRPC raw)"
		if len(resp.GetRawOutputContents()) != len(resp.GetOutputs()) {
			t.Fatalf("%s: %d raw outputs for %d outputs", what, len(resp.GetRawOutputContents()), len(resp.GetOutputs()))
		}
	}
	for i, o := range resp.GetOutputs() {
		shape := make([]int, len(o.GetShape()))
		for k, d := range o.GetShape() {
			shape[k] = int(d)
		}
		data := o.GetContents().GetFp32Contents()
		if raw {
			data = make([]float32, len(resp.GetRawOutputContents()[i])/4)
			binary.Read(bytes.NewReader(resp.GetRawOutputContents()[i]), binary.LittleEndian, data)
		}
		if o.GetDatatype() != "FP32" {
			t.Fatalf("%s: output %q is %s", what, o.GetName(), o.GetDatatype())
		}
		checkOutput(t, what, ds, o.GetName(), ir.FromSlice(shape, data))
	}
}

func repoOf(t *testing.T, models ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range models {
		data, err := os.ReadFile(filepath.Join(modelsDir, m, "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, m, "1"), 0o755)
		if err := os.WriteFile(filepath.Join(dir, m, "1", "model.onnx"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestServeAnswersMatchPyTorch(t *testing.T) {
	s := startServe(t, "--model-repository", repoOf(t, servedModels...), "--model", "tiny="+filepath.Join(modelsDir, "s003_self_attention", "model.onnx"))
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := v2pb.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()
	if r, err := c.ServerReady(ctx, &v2pb.ServerReadyRequest{}); err != nil || !r.GetReady() {
		t.Fatalf("ServerReady: %v %v", r, err)
	}
	if md, err := c.ServerMetadata(ctx, &v2pb.ServerMetadataRequest{}); err != nil || md.GetName() != "attnrun" {
		t.Fatalf("ServerMetadata: %v %v", md, err)
	}
	for _, model := range append(servedModels, "tiny") {
		md, err := c.ModelMetadata(ctx, &v2pb.ModelMetadataRequest{Name: model})
		if err != nil || md.GetPlatform() != "onnx" || len(md.GetInputs()) == 0 {
			t.Fatalf("ModelMetadata %s: %v %v", model, md, err)
		}
		cases := model
		if model == "tiny" {
			cases = "s003_self_attention"
		}
		for i, ds := range readDataSets(t, cases) {
			httpJSON(t, s, model, ds, i%2 == 1)
			httpBinary(t, s, model, ds)
			grpcInfer(t, c, model, ds, true)
			grpcInfer(t, c, model, ds, false)
		}
	}
	// Protocol errors carry the protocol's codes.
	_, err = c.ModelInfer(ctx, &v2pb.ModelInferRequest{ModelName: "nope"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `unknown model "nope"`) {
		t.Fatalf("unknown model: %v", err)
	}
	_, err = c.ModelInfer(ctx, &v2pb.ModelInferRequest{ModelName: "tiny", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{2, 32}}}, RawInputContents: [][]byte{make([]byte, 12)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "needs 256 bytes of raw data, got 12") {
		t.Fatalf("short raw input: %v", err)
	}
	if r, err := c.ModelReady(ctx, &v2pb.ModelReadyRequest{Name: "tiny", Version: "1"}); err != nil || !r.GetReady() {
		t.Fatalf("ModelReady: %v %v", r, err)
	}
	// The metrics port counts what happened.
	resp, err := http.Get("http://" + s.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`attnrun_requests_total{model="s000_causal",outcome="success",protocol="grpc",version="1"} 6`,
		`attnrun_requests_total{model="tiny",outcome="invalid_argument",protocol="grpc",version="1"} 1`,
		`attnrun_requests_total{model="s003_attention",outcome="success",protocol="http",version="1"} 6`,
		`attnrun_queue_duration_seconds_count{model="tiny",version="1"}`,
		`attnrun_model_instances{model="s001_cross_attention",version="1"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestServeDrainsOnSIGTERM(t *testing.T) {
	s := startServe(t, "--model", "mha="+filepath.Join(modelsDir, "s000_multi_head", "model.onnx"), "--drain-timeout", "8s")
	backends := childrenOf(s.cmd.Process.Pid, filepath.Join("/proc", strconv.Itoa(s.cmd.Process.Pid), "task"))
	if len(backends) != 1 {
		t.Fatalf("backend processes %v, want one", backends)
	}
	// A stopped backend keeps the next requests in flight.
	syscall.Kill(backends[0], syscall.SIGSTOP)
	defer syscall.Kill(backends[0], syscall.SIGCONT)
	for deadline := time.Now().Add(5 * time.Second); !procfs.Stopped(backends[0]); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("backend %d not stopped 5 s after SIGSTOP", backends[0])
		}
	}
	ds := readDataSets(t, "s000_multi_head")[0]
	body, jsonLen := binaryBody(t, ds)
	replies := make([]binaryReply, 4)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = postBinary(s, "mha", body, jsonLen)
		}()
	}
	waitForMetric(t, s, `attnrun_inflight_requests{model="mha",version="1"} 4`)
	start := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, err := http.Get("http://" + s.http + "/v2/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 400 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("still ready 5 s after SIGTERM: %v", err)
		}
	}
	resp, err := http.Post("http://"+s.http+"/v2/models/mha/infer", "application/json", strings.NewReader(`{"inputs":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	refused, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(refused), "shutting down") {
		t.Fatalf("new request while draining: %d %s", resp.StatusCode, refused)
	}
	select {
	case err := <-s.exited:
		s.exited <- err // for the cleanup, which waits for the exit
		t.Fatalf("exited with requests in flight: %v\n%s", err, s.stderr)
	case <-time.After(100 * time.Millisecond):
	}
	syscall.Kill(backends[0], syscall.SIGCONT)
	wg.Wait()
	for _, r := range replies {
		checkBinary(t, ds, r) // every request in flight at SIGTERM is answered
	}
	select {
	case err := <-s.exited:
		if err != nil {
			s.exited <- err // for the cleanup
			t.Fatalf("exit: %v\n%s", err, s.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit within 10 s of SIGTERM\n%s", s.stderr)
	}
	s.exited <- nil // for the cleanup
	t.Logf("exited %.2f s after SIGTERM", time.Since(start).Seconds())
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(backends[0]))); err == nil {
		if stat, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(backends[0]), "stat")); !strings.Contains(string(stat), ") Z") {
			t.Errorf("backend %d outlived the server", backends[0])
		}
	}
}

func waitForMetric(t *testing.T, s *server, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + s.metrics + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed %s", want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServeUsageAndLoadErrors(t *testing.T) {
	free := []string{"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}
	tiny := filepath.Join(modelsDir, "s003_self_attention", "model.onnx")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "give --model-repository DIR or --model NAME=path.onnx"},
		{[]string{"serve", "--model", "tiny"}, `--model "tiny": want NAME=path.onnx`},
		{[]string{"serve", "--model", "a b=" + tiny}, `model name "a b"`},
		{[]string{"serve", "--model", "t=" + tiny, "--instances", "0"}, "--instances must be ≥ 1"},
		{[]string{"serve", "--model", "t=" + tiny, "--version-policy", "newest"}, "want latest, latest:N (N ≥ 1) or all"},
		{[]string{"serve", "--model", "t=" + tiny, "--log-format", "xml"}, `--log-format "xml"`},
		{[]string{"serve", "--model", "t=" + tiny, "--http", "off", "--grpc", "off"}, "both off"},
		{[]string{"serve", "--model", "t=" + tiny, "extra"}, "unknown command"},
		{[]string{"serve", "--model", "t=" + tiny, "--http", "bogus"}, `--http "bogus": want HOST:PORT, :PORT or off (address bogus: missing port in address)`},
		{[]string{"serve", "--model", "t=" + tiny, "--grpc", ":70000"}, `--grpc ":70000": the port must be a number from 0 to 65535`},
		{[]string{"serve", "--model", "t=" + tiny, "--metrics", "[::1"}, `--metrics "[::1": want HOST:PORT`},
	} {
		timed(t, cmdWall, c.args...).wantError(t, 2, cmdWall, c.want)
	}
	// A model that cannot load stops the server before it serves: exit 1,
	// the reason on the last line.
	r := attnrun(t, append([]string{"serve", "--model", "t=/nonexistent/model.onnx"}, free...)...)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 1 || !strings.Contains(lines[len(lines)-1], "attnrun: ") || !strings.Contains(lines[len(lines)-1], "no such file") || strings.Contains(r.stderr, "msg=serving") {
		t.Fatalf("unloadable model:\n%v", r)
	}
}

func TestServeSIGHUPRescans(t *testing.T) {
	dir := repoOf(t, "s003_self_attention")
	s := startServe(t, "--model-repository", dir)
	index := func() string {
		resp, err := http.Post("http://"+s.http+"/v2/repository/index", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := index(); got != `[{"name":"s003_self_attention","version":"1","state":"READY"}]` {
		t.Fatalf("index %s", got)
	}
	// A second model and a second version appear; SIGHUP loads them.
	for _, nv := range [][2]string{{"s004_param_free", "1"}, {"s003_self_attention", "2"}} {
		data, _ := os.ReadFile(filepath.Join(modelsDir, nv[0], "model.onnx"))
		os.MkdirAll(filepath.Join(dir, nv[0], nv[1]), 0o755)
		os.WriteFile(filepath.Join(dir, nv[0], nv[1], "model.onnx"), data, 0o644)
	}
	s.cmd.Process.Signal(syscall.SIGHUP)
	want := `[{"name":"s003_self_attention","version":"2","state":"READY"},{"name":"s004_param_free","version":"1","state":"READY"}]`
	for deadline := time.Now().Add(20 * time.Second); index() != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("index after SIGHUP %s, want %s\n%s", index(), want, s.stderr)
		}
	}
	ds := readDataSets(t, "s004_param_free")[0]
	httpBinary(t, s, "s004_param_free", ds)
}
