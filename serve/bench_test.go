package serve

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/internal/benchmodels"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/session"
	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/v2pb"
)

// The s003 latency target compares a gRPC ModelInfer at concurrency 1
// with the library's Run on the same input (x: 8×32, one thread). These
// benchmarks measure both in one process; scripts/serve-load.sh measures
// the same through ghz and `attnrun bench`.

func tinyInput() *ir.Tensor {
	r := rand.New(rand.NewPCG(1, 1))
	d := make([]float32, 8*32)
	for i := range d {
		d[i] = r.Float32()*2 - 1
	}
	return ir.FromSlice([]int{8, 32}, d)
}

func BenchmarkSessionRunTiny(b *testing.B) {
	s, err := session.Open(context.Background(), filepath.Join(modelsDir, "s003_self_attention", "model.onnx"), session.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	x, _ := ir.ToDense(tinyInput())
	in := map[string]*tensor.Dense{"x": x}
	timeEach(b, func() error {
		_, err := s.Run(context.Background(), in)
		return err
	})
}

// timeEach runs op b.N times and reports the median as p50-ns/op (the
// targets are about medians; ns/op is the mean).
func timeEach(b *testing.B, op func() error) {
	d := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range d {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		d[i] = time.Since(start)
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns/op")
}

// tinyServer serves s003_self_attention as "tiny" (one thread) until the
// benchmark ends.
func tinyServer(b *testing.B) *Server {
	dir := repository(b, map[string]string{"tiny/1": "s003_self_attention"})
	s, err := New(Options{Repository: dir, Session: session.Options{Threads: 1}, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

// BenchmarkInferTiny is Server.Infer in process: the server's own work
// (checks, queue, response) on top of the session's Run.
func BenchmarkInferTiny(b *testing.B) {
	s := tinyServer(b)
	req := &oip.Request{Inputs: []oip.NamedTensor{{Name: "x", Tensor: tinyInput()}}}
	timeEach(b, func() error {
		_, err := s.Infer(context.Background(), protoGRPC, "tiny", "", req)
		return err
	})
}

func BenchmarkGRPCInferTiny(b *testing.B) {
	c := grpcClient(b, tinyServer(b))
	x := tinyInput()
	req := &v2pb.ModelInferRequest{ModelName: "tiny",
		Inputs:           []*v2pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{8, 32}}},
		RawInputContents: [][]byte{oip.RawBytes(x)}}
	b.Run("ModelInfer", func(b *testing.B) {
		timeEach(b, func() error {
			_, err := c.ModelInfer(context.Background(), req)
			return err
		})
	})
	// The transport alone: an RPC that does nothing.
	b.Run("ServerLive", func(b *testing.B) {
		timeEach(b, func() error {
			_, err := c.ServerLive(context.Background(), &v2pb.ServerLiveRequest{})
			return err
		})
	})
}

// BenchmarkGRPCInferMHA sends seed 000's MultiHeadAttention at C=768 a
// [1, 128, 768] float32 input (393 KB of raw_input_contents) over gRPC at
// concurrency 1, and reports the CPU time this process (the server and the
// in-process client; the backend is a process of its own) spends per
// request as cpu-ns/op: the server's per-request cost that
// scripts/serve-load.sh measures on the real binary. Profile it with
// -cpuprofile. The model is written by `/usr/bin/python3 models/export.py
// --bench DIR` into benchmodels.Dir() ($ATTNRUN_BENCH_MODELS, bench/models or /tmp/bench_models);
// without it the benchmark is skipped.
func BenchmarkGRPCInferMHA(b *testing.B) {
	path := benchmodels.Path(b, "s000_multi_head_c768")
	s, err := New(Options{Models: map[string]string{"mha": path}, Session: session.Options{Threads: 1}, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	c := grpcClient(b, s)
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, 128*768)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	req := &v2pb.ModelInferRequest{ModelName: "mha",
		Inputs:           []*v2pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 128, 768}}},
		RawInputContents: [][]byte{oip.RawBytes(ir.FromSlice([]int{1, 128, 768}, x))}}
	if _, err := c.ModelInfer(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	before := cpuTime()
	timeEach(b, func() error {
		_, err := c.ModelInfer(context.Background(), req)
		return err
	})
	b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// grpcClient serves s over gRPC on a loopback port until the benchmark
// ends, and returns a client.
func grpcClient(b *testing.B, s *Server) v2pb.GRPCInferenceServiceClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer(GRPCServerOptions(1 << 30)...)
	s.RegisterGRPC(g)
	go g.Serve(ln)
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return v2pb.NewGRPCInferenceServiceClient(conn)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
