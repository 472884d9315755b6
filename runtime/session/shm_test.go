package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"gorgonia.org/tensor"
)

// TestSharedMemoryOption runs the tiny model with tensors through the shared
// region and inline: same results.
func TestSharedMemoryOption(t *testing.T) {
	for _, noShm := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoSharedMemory=%v", noShm), func(t *testing.T) {
			s, _ := openTiny(t, Options{NoSharedMemory: noShm})
			in, want := tinyInputs()
			for i := 0; i < 2; i++ {
				out, err := s.Run(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, "y", out["y"], []int{2, 3}, want, 1e-6)
			}
		})
	}
}

// TestConcurrentSessionRuns calls Run from several goroutines on one
// session (runs are serialized) with different batch sizes: each caller gets
// its own results.
func TestConcurrentSessionRuns(t *testing.T) {
	s, _ := openTiny(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			batch := g + 1
			x := make([]float32, batch*4)
			r := make([]float32, batch*3)
			for r0 := 0; r0 < 5; r0++ {
				for i := range x {
					x[i] = float32((i+g+r0)%5) - 2
				}
				for i := range r {
					r[i] = float32(g*10 + r0)
				}
				want := tinyWant(x, r)
				out, err := s.Run(context.Background(), map[string]*tensor.Dense{"x": dense([]int{batch, 4}, x), "r": dense([]int{batch, 3}, r)})
				if err != nil {
					errs <- err
					return
				}
				got := out["y"].Data().([]float32)
				for i := range want {
					if d := got[i] - want[i]; d > 1e-5 || d < -1e-5 {
						errs <- fmt.Errorf("goroutine %d run %d: y[%d] = %v, want %v", g, r0, i, got[i], want[i])
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// identityModel is y = Identity(x), float32 x of any length.
func identityModel() *ir.Model {
	vi := func(name string) *ir.ValueInfo {
		return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Param: "n"}}, RankKnown: true}}
	}
	return &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name:    "identity",
			Nodes:   []*ir.Node{{Name: "/Identity", OpType: "Identity", Inputs: []string{"x"}, Outputs: []string{"y"}}},
			Inputs:  []*ir.ValueInfo{vi("x")},
			Outputs: []*ir.ValueInfo{vi("y")},
		},
	}
}

// BenchmarkSessionRoundTrip4MiB times Session.Run on a 4 MiB float32 input
// through an Identity model (4 MiB to the backend, 4 MiB back), through the
// shared region and inline in the gRPC messages, and reports the median as
// p50-ms.
func BenchmarkSessionRoundTrip4MiB(b *testing.B) {
	path := saveModelB(b, identityModel())
	for _, c := range []struct {
		name  string
		noShm bool
	}{{"shm", false}, {"inline", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(context.Background(), path, Options{NoSharedMemory: c.noShm, Logf: b.Logf})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			x := make([]float32, 1<<20)
			for i := range x {
				x[i] = float32(i)
			}
			in := map[string]*tensor.Dense{"x": dense([]int{len(x)}, x)}
			for i := 0; i < 3; i++ {
				if _, err := s.Run(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
			times := make([]time.Duration, 0, b.N)
			b.SetBytes(8 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, err := s.Run(context.Background(), in)
				if err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
				if y := out["y"].Data().([]float32); y[len(y)-1] != x[len(x)-1] {
					b.Fatalf("y[-1] = %v", y[len(y)-1])
				}
			}
			b.StopTimer()
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e6, "p50-ms")
		})
	}
}

// saveModelB encodes m into a temporary model.onnx.
func saveModelB(b *testing.B, m *ir.Model) string {
	b.Helper()
	data, err := onnx.Encode(m)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}
