package serve

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gorgonia.org/tensor"

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
	s := tinyServer(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	s.RegisterGRPC(g)
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := v2pb.NewGRPCInferenceServiceClient(conn)
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

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
