package serve

// These tests run the server in-process on real models from models/, with
// real backend processes (this test binary re-executed as the CPU
// backend).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/attnrun/attnrun/backends/cpu"
	"github.com/attnrun/attnrun/internal/procfs"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/conform"
	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/repo"
	"github.com/attnrun/attnrun/serve/runner"
)

func TestMain(m *testing.M) {
	cpu.ServeIfRequested()
	os.Exit(m.Run())
}

var modelsDir = filepath.Join("..", "models")

// repository makes a model repository: name/version → a model of models/.
func repository(t testing.TB, versions map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for nv, model := range versions {
		addVersion(t, dir, nv, model)
	}
	return dir
}

func addVersion(t testing.TB, dir, nameVersion, model string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(modelsDir, model, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(dir, nameVersion)
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vdir, repo.ModelFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs a server until the test ends.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.MaxTensorBytes == 0 {
		opts.MaxTensorBytes = 1 << 30
	}
	opts.Session.Threads = 1
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// xInput is a request for the [batch, seq, 32] models.
func xInput(r *rand.Rand, batch, seq int) *oip.Request {
	d := make([]float32, batch*seq*32)
	for i := range d {
		d[i] = r.Float32()*2 - 1
	}
	return &oip.Request{Inputs: []oip.NamedTensor{{Name: "x", Tensor: ir.FromSlice([]int{batch, seq, 32}, d)}}}
}

var tol = conform.Tolerance{Rtol: 1e-4, Atol: 1e-5}

// metricValue sums a counter's or histogram's samples over the series
// whose labels include want.
func metricValue(t *testing.T, s *Server, name string, want map[string]string) (sum float64, count uint64) {
	t.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += m.Histogram.GetSampleSum()
				count += m.Histogram.GetSampleCount()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum, count
}

func TestBatchedAnswersMatchUnbatched(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head"})
	batched := start(t, Options{Repository: dir, MaxBatch: 8, MaxQueueDelay: 50 * time.Millisecond})
	plain := start(t, Options{Repository: dir})
	r := rand.New(rand.NewPCG(1, 2))
	var reqs []*oip.Request
	for i := 0; i < 12; i++ {
		reqs = append(reqs, xInput(r, 1+i%2, []int{3, 5}[i/6]))
	}
	resps := make([]*oip.Response, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], errs[i] = batched.Infer(context.Background(), protoHTTP, "mha", "", req)
		}()
	}
	wg.Wait()
	for i, req := range reqs {
		if errs[i] != nil {
			t.Fatalf("batched request %d: %v", i, errs[i])
		}
		want, err := plain.Infer(context.Background(), protoHTTP, "mha", "", req)
		if err != nil {
			t.Fatal(err)
		}
		got := resps[i].Outputs[0].Tensor
		if fmt.Sprint(got.Shape) != fmt.Sprint(req.Inputs[0].Tensor.Shape) {
			t.Fatalf("request %d: output shape %v for input %v", i, got.Shape, req.Inputs[0].Tensor.Shape)
		}
		if a, rel, err := conform.Compare(got, want.Outputs[0].Tensor, tol); err != nil {
			t.Fatalf("request %d: batched differs from unbatched (max abs %g, rel %g): %v", i, a, rel, err)
		}
	}
	requests, runs := metricValue(t, batched, "attnrun_batch_size", map[string]string{"model": "mha"})
	if int(requests) != len(reqs) || runs >= uint64(len(reqs)) {
		t.Fatalf("%d requests in %d runs: nothing was batched", int(requests), runs)
	}
	t.Logf("%d requests in %d runs", int(requests), runs)
}

func TestBatchingNeedsABatchDim(t *testing.T) {
	// s003_self_attention's x is [seq, 32]: stacking along seq would mix
	// the requests' rows in attention, so --max-batch-size leaves it alone...
	dir := repository(t, map[string]string{"tiny/1": "s003_self_attention", "mha/1": "s000_multi_head"})
	s := start(t, Options{Repository: dir, MaxBatch: 8})
	if l, _ := s.lookup("tiny", ""); l.batching.MaxBatchSize != 0 {
		t.Fatal("batching on for a model whose dim 0 is seq")
	} else {
		l.users.Done()
	}
	if l, _ := s.lookup("mha", ""); l.batching.MaxBatchSize != 8 {
		t.Fatal("batching off for a model whose dim 0 is batch")
	} else {
		l.users.Done()
	}
	// ...and a config that asks for it on a model that has no shared
	// leading dim is a load error.
	os.WriteFile(filepath.Join(dir, "tiny", repo.ConfigFile), []byte("dynamic_batching: {max_batch_size: 4}\n"), 0o644)
	addVersion(t, dir, "cross/1", "s003_attention")
	os.WriteFile(filepath.Join(dir, "cross", repo.ConfigFile), []byte("dynamic_batching: {max_batch_size: 4}\n"), 0o644)
	if err := s.Load(context.Background(), "cross", true); err == nil || !strings.Contains(err.Error(), `config.yaml asks for dynamic batching, but "key" leads with "seq_kv", not "seq_q"`) {
		t.Fatalf("load: %v", err)
	}
}

func TestReloadDropsNoRequest(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head"})
	s := start(t, Options{Repository: dir, Instances: 2})
	stop := make(chan struct{})
	var mu sync.Mutex
	versions := map[string]int{}
	var failures []error
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := s.Infer(context.Background(), protoGRPC, "mha", "", xInput(r, 1, 4))
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					versions[resp.ModelVersion]++
				}
				mu.Unlock()
			}
		}()
	}
	answered := func(version string, n int) {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			got := versions[version]
			mu.Unlock()
			if got >= n {
				return
			}
		}
		t.Errorf("fewer than %d answers from version %s in 20 s", n, version)
	}
	answered("1", 20)
	// A new version appears (another model with the same inputs and
	// outputs) and the model is reloaded twice while requests keep coming.
	addVersion(t, dir, "mha/2", "s000_single_head")
	for i := 0; i < 2; i++ {
		if err := s.Load(context.Background(), "mha", true); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := versions["2"]
		mu.Unlock()
		answered("2", n+20)
	}
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed during reloads, the first: %v", len(failures), failures[0])
	}
	if versions["1"] == 0 || versions["2"] == 0 {
		t.Fatalf("answers by version %v: want some from each", versions)
	}
	if _, err := s.Infer(context.Background(), protoHTTP, "mha", "1", xInput(rand.New(rand.NewPCG(0, 0)), 1, 2)); oip.ClassOf(err) != oip.NotFound {
		t.Fatalf("version 1 after the reload (latest policy): %v", err)
	}
	s.retiring.Wait()
	t.Logf("answers by version: %v", versions)
}

func TestUnloadLoadIndex(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head", "mha/3": "s000_multi_head", "tiny/1": "s003_self_attention"})
	s := start(t, Options{Repository: dir, VersionPolicy: repo.VersionPolicy{All: true}})
	idx, _ := s.Index(false)
	if fmt.Sprint(idx) != "[{mha 1 READY } {mha 3 READY } {tiny 1 READY }]" {
		t.Fatalf("index %v", idx)
	}
	if err := s.Unload("mha"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Infer(context.Background(), protoHTTP, "mha", "", xInput(rand.New(rand.NewPCG(0, 0)), 1, 2))
	if oip.ClassOf(err) != oip.Unavailable || !strings.Contains(err.Error(), `model "mha" is not loaded (unloaded)`) {
		t.Fatalf("after unload: %v", err)
	}
	idx, _ = s.Index(false)
	if fmt.Sprint(idx) != "[{mha  UNAVAILABLE unloaded} {tiny 1 READY }]" {
		t.Fatalf("index after unload %v", idx)
	}
	if idx, _ = s.Index(true); fmt.Sprint(idx) != "[{tiny 1 READY }]" {
		t.Fatalf("ready index %v", idx)
	}
	if err := s.Load(context.Background(), "mha", false); err != nil {
		t.Fatal(err)
	}
	md, err := s.ModelMetadata("mha", "3")
	if err != nil || fmt.Sprint(md.Versions) != "[1 3]" || md.Inputs[0].Datatype != "FP32" || fmt.Sprint(md.Inputs[0].Shape) != "[-1 -1 32]" {
		t.Fatalf("metadata %+v %v", md, err)
	}
	if err := s.Load(context.Background(), "nope", false); !strings.Contains(fmt.Sprint(err), `unknown model "nope": no directory`) || oip.ClassOf(err) != oip.NotFound {
		t.Fatalf("loading a missing model: %v", err)
	}
	// Rescan picks up a new model and drops a removed one.
	addVersion(t, dir, "late/1", "s004_param_free")
	os.RemoveAll(filepath.Join(dir, "tiny"))
	if err := s.Rescan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if idx, _ = s.Index(true); fmt.Sprint(idx) != "[{late 1 READY } {mha 1 READY } {mha 3 READY }]" {
		t.Fatalf("index after rescan %v", idx)
	}
}

func TestInvalidRequests(t *testing.T) {
	dir := repository(t, map[string]string{"causal/1": "s000_causal"})
	s := start(t, Options{Repository: dir})
	x := ir.FromSlice([]int{1, 3, 32}, make([]float32, 96))
	mask := ir.FromSlice([]int{1, 3}, make([]bool, 3))
	in := func(ts ...oip.NamedTensor) *oip.Request { return &oip.Request{Inputs: ts} }
	cases := []struct {
		name, version string
		req           *oip.Request
		class         oip.Class
		want          string
	}{
		{"nope", "", in(), oip.NotFound, `unknown model "nope"`},
		{"causal", "2", in(), oip.NotFound, `model "causal" has no version "2" loaded (loaded: 1)`},
		{"causal", "", in(oip.NamedTensor{Name: "x", Tensor: x}), oip.InvalidArgument, `missing input "mask"`},
		{"causal", "", in(oip.NamedTensor{Name: "x", Tensor: x}, oip.NamedTensor{Name: "m", Tensor: mask}), oip.InvalidArgument, `model "causal" has no input "m" (inputs: x, mask)`},
		{"causal", "", in(oip.NamedTensor{Name: "x", Tensor: ir.FromSlice([]int{1, 3, 32}, make([]float64, 96))}, oip.NamedTensor{Name: "mask", Tensor: mask}), oip.InvalidArgument, `input "x" has datatype FP64, the model takes FP32`},
		{"causal", "", in(oip.NamedTensor{Name: "x", Tensor: x}, oip.NamedTensor{Name: "mask", Tensor: ir.FromSlice([]int{1, 4}, make([]bool, 4))}), oip.InvalidArgument, `inputs give dim_param "seq" different sizes: "x" dim 1 = 3, "mask" dim 1 = 4`},
		{"causal", "", in(oip.NamedTensor{Name: "x", Tensor: ir.FromSlice([]int{3, 32}, make([]float32, 96))}, oip.NamedTensor{Name: "mask", Tensor: mask}), oip.InvalidArgument, `the model expects rank 3`},
		{"causal", "", &oip.Request{Inputs: []oip.NamedTensor{{Name: "x", Tensor: x}, {Name: "mask", Tensor: mask}}, Outputs: []oip.RequestedOutput{{Name: "z"}}}, oip.InvalidArgument, `model "causal" has no output "z" (outputs: y)`},
		{"causal", "", &oip.Request{ModelName: "other", Inputs: []oip.NamedTensor{{Name: "x", Tensor: x}}}, oip.InvalidArgument, `the request body names model "other"`},
	}
	for _, c := range cases {
		_, err := s.Infer(context.Background(), protoHTTP, c.name, c.version, c.req)
		if err == nil || oip.ClassOf(err) != c.class || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (%v), want %v containing %q", c.want, err, oip.ClassOf(err), c.class, c.want)
		}
	}
	resp, err := s.Infer(context.Background(), protoHTTP, "causal", "1", &oip.Request{ID: "r9", Inputs: []oip.NamedTensor{{Name: "x", Tensor: x}, {Name: "mask", Tensor: mask}}})
	if err != nil || resp.ID != "r9" || resp.ModelVersion != "1" || resp.Outputs[0].Name != "y" {
		t.Fatalf("valid request: %+v %v", resp, err)
	}
	if got, _ := metricValue(t, s, "attnrun_requests_total", map[string]string{"model": "causal", "outcome": "invalid_argument"}); got != 6 {
		t.Fatalf("invalid_argument count %v, want 6", got)
	}
}

// backendPids lists a loaded version's backend processes.
func backendPids(t *testing.T, s *Server, name string) []int {
	t.Helper()
	l, err := s.lookup(name, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.users.Done()
	return l.runner.(*runner.Pool).Pids()
}

// stopBackend stops a backend process (SIGSTOP) and waits until every
// thread of it is stopped (the signal takes effect asynchronously), continuing it when the
// test ends.
func stopBackend(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	for deadline := time.Now().Add(5 * time.Second); !procfs.Stopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("backend %d not stopped 5 s after SIGSTOP", pid)
		}
	}
}

func TestQueueFullIsUnavailable(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head"})
	s := start(t, Options{Repository: dir, MaxQueue: 2})
	pid := backendPids(t, s, "mha")[0]
	l, _ := s.lookup("mha", "")
	l.users.Done()
	// A stopped backend holds the first request; two more fill the queue.
	stopBackend(t, pid)
	errs := make(chan error, 3)
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 3; i++ {
		req := xInput(r, 1, 2)
		go func() {
			_, err := s.Infer(context.Background(), protoHTTP, "mha", "", req)
			errs <- err
		}()
		for deadline := time.Now().Add(10 * time.Second); l.sched.Running() != 1 || l.sched.QueueLength() != i; {
			if time.Now().After(deadline) {
				t.Fatalf("request %d: %d running, %d queued", i, l.sched.Running(), l.sched.QueueLength())
			}
			time.Sleep(time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Infer(ctx, protoHTTP, "mha", "", xInput(r, 1, 2))
	if oip.ClassOf(err) != oip.Unavailable || !strings.Contains(err.Error(), `model "mha" version 1: the request queue is full (2 waiting); retry later`) {
		t.Fatalf("fourth request: %v", err)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestDrainFinishesInFlightAndRefusesNew(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head"})
	s := start(t, Options{Repository: dir})
	pid := backendPids(t, s, "mha")[0]
	stopBackend(t, pid) // keeps the requests in flight
	errs := make(chan error, 8)
	r := rand.New(rand.NewPCG(4, 4))
	for i := 0; i < 8; i++ {
		req := xInput(r, 1, 8)
		go func() {
			_, err := s.Infer(context.Background(), protoHTTP, "mha", "", req)
			errs <- err
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); s.admit.inProgress() < 8 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	drained := make(chan error)
	go func() { drained <- s.Drain(context.Background()) }()
	for deadline := time.Now().Add(5 * time.Second); s.Ready() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if s.Ready() {
		t.Fatal("still ready while draining")
	}
	if _, err := s.Infer(context.Background(), protoHTTP, "mha", "", xInput(r, 1, 2)); oip.ClassOf(err) != oip.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("new request while draining: %v", err)
	}
	select {
	case <-drained:
		t.Fatal("drain finished with requests in flight")
	case <-time.After(50 * time.Millisecond):
	}
	syscall.Kill(pid, syscall.SIGCONT)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("in-flight request failed during the drain: %v", err)
		}
	}
}

func TestBackendKilledUnderLoad(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head"})
	s := start(t, Options{Repository: dir, Instances: 2})
	before := backendPids(t, s, "mha")
	var mu sync.Mutex
	var ok, unavailable int
	var other []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 5))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := s.Infer(ctx, protoGRPC, "mha", "", xInput(r, 2, 16))
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case oip.ClassOf(err) == oip.Unavailable && strings.Contains(err.Error(), `backend "cpu" (pid `):
					unavailable++
				default:
					other = append(other, err)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(150 * time.Millisecond)
	for _, pid := range before[:1] {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	okAtKill := ok
	mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d requests failed without a clear 503 naming the backend; the first: %v", len(other), other[0])
	}
	if ok <= okAtKill {
		t.Fatalf("no request succeeded after the kill (%d ok in all)", ok)
	}
	if restarts, _ := metricValue(t, s, "attnrun_backend_restarts_total", map[string]string{"model": "mha", "backend": "cpu"}); restarts < 1 {
		t.Fatal("the backend death was not counted")
	}
	after := backendPids(t, s, "mha")
	if len(after) != 2 || after[0] == before[0] && after[1] == before[1] {
		t.Fatalf("backends before %v, after %v: the killed one was not replaced", before, after)
	}
	t.Logf("%d answered, %d unavailable; backends %v -> %v", ok, unavailable, before, after)
}

func TestMetricsRegistry(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head"})
	reg := prometheus.NewRegistry()
	s := start(t, Options{Repository: dir, Registerer: reg})
	if s.Registry() != nil {
		t.Fatal("a server given a Registerer reports its own registry")
	}
	if _, err := s.Infer(context.Background(), protoHTTP, "mha", "", xInput(rand.New(rand.NewPCG(1, 1)), 1, 2)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"attnrun_requests_total", "attnrun_request_duration_seconds", "attnrun_queue_duration_seconds",
		"attnrun_compute_duration_seconds", "attnrun_batch_size", "attnrun_inflight_requests", "attnrun_queue_length",
		"attnrun_model_instances", "go_goroutines", "process_resident_memory_bytes"} {
		if !have[name] {
			t.Errorf("no %s", name)
		}
	}
}

// TestDeadlineStopsTheRun: with the backend stopped, a request past
// --request-timeout, and one past its client's deadline, are answered
// DEADLINE_EXCEEDED at once: the run's context ends, so the backend run is
// abandoned and its instance freed (the session kills the stuck process and
// starts a replacement), and later requests are served.
func TestDeadlineStopsTheRun(t *testing.T) {
	dir := repository(t, map[string]string{"mha/1": "s000_multi_head"})
	s := start(t, Options{Repository: dir, RequestTimeout: 400 * time.Millisecond})
	r := rand.New(rand.NewPCG(6, 6))
	for _, c := range []struct {
		name    string
		timeout time.Duration // the client's; 0: none
		says    string
	}{
		{"request-timeout", 0, "no answer within the request deadline (--request-timeout 400ms or the client's)"},
		{"client deadline", 150 * time.Millisecond, "no answer within the request deadline"},
	} {
		pid := backendPids(t, s, "mha")[0]
		stopBackend(t, pid)
		ctx := context.Background()
		if c.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.timeout)
			defer cancel()
		}
		begin := time.Now()
		_, err := s.Infer(ctx, protoGRPC, "mha", "", xInput(r, 1, 4))
		took := time.Since(begin)
		if oip.ClassOf(err) != oip.DeadlineExceeded || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("%s: request to a stopped backend: %v, want DEADLINE_EXCEEDED saying %q", c.name, err, c.says)
		}
		if took > 3*time.Second {
			t.Errorf("%s: the deadline's answer took %v", c.name, took)
		}
		// The stuck backend is killed and replaced; then requests are served.
		var served bool
		for deadline := time.Now().Add(20 * time.Second); !served && time.Now().Before(deadline); {
			_, err := s.Infer(context.Background(), protoGRPC, "mha", "", xInput(r, 1, 4))
			served = err == nil
			if !served && oip.ClassOf(err) != oip.DeadlineExceeded && oip.ClassOf(err) != oip.Unavailable {
				t.Fatalf("%s: request after the deadline: %v", c.name, err)
			}
		}
		if !served {
			t.Fatalf("%s: no request served within 20 s of the deadline", c.name)
		}
		if now := backendPids(t, s, "mha"); len(now) != 1 || now[0] == pid {
			t.Fatalf("%s: backends %v after the stuck pid %d: want it replaced", c.name, now, pid)
		}
		t.Logf("%s: answered in %v", c.name, took)
	}
}

// TestWorkerSpinSettings checks that the server's default worker spin and a
// model's config.yaml worker_spin reach that model's backend processes.
func TestWorkerSpinSettings(t *testing.T) {
	dir := repository(t, map[string]string{"tiny/1": "s003_self_attention", "mha/1": "s000_multi_head"})
	if err := os.WriteFile(filepath.Join(dir, "mha", "config.yaml"), []byte("worker_spin: 0s\ninstances: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spin := 300 * time.Microsecond
	opts := Options{Repository: dir, Instances: 1}
	opts.Session.WorkerSpin = &spin
	s := start(t, opts)
	for name, want := range map[string]string{"tiny": "300µs", "mha": "0s"} {
		l, err := s.lookup(name, "")
		if err != nil {
			t.Fatal(err)
		}
		bs := l.runner.(*runner.Pool).Session().Backends()
		l.users.Done()
		if len(bs) == 0 {
			t.Fatalf("%s: no backends", name)
		}
		for _, b := range bs {
			if got := b.Details["spin"]; got != want {
				t.Errorf("%s: backend instance %d spins %q, want %s", name, b.Instance, got, want)
			}
		}
	}
}
