package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
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
	return vectorModel("identity", &ir.Node{Name: "/Identity", OpType: "Identity", Inputs: []string{"x"}, Outputs: []string{"y"}}, nil)
}

// vectorModel is a one-node model from x: float32[n] to y: float32[n],
// with the initializers inits.
func vectorModel(name string, node *ir.Node, inits map[string]*ir.Tensor) *ir.Model {
	vi := func(name string) *ir.ValueInfo {
		return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Param: "n"}}, RankKnown: true}}
	}
	var order []string
	for k := range inits {
		order = append(order, k)
	}
	slices.Sort(order)
	return &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name:             name,
			Nodes:            []*ir.Node{node},
			Inputs:           []*ir.ValueInfo{vi("x")},
			Outputs:          []*ir.ValueInfo{vi("y")},
			Initializers:     inits,
			InitializerOrder: order,
		},
	}
}

// TestOutputBinding runs the tiny model (through the shared region and
// inline) and a partitioned run with its output bound to a caller's tensor:
// the result is written into that tensor's memory, run after run; a bound
// tensor of the wrong shape or an unknown output name is an error naming it.
func TestOutputBinding(t *testing.T) {
	for _, opts := range []Options{{}, {NoSharedMemory: true}, {Backend: "picky", PluginDir: pluginDir(t)}} {
		t.Run(fmt.Sprintf("backend=%q,noShm=%v", opts.Backend, opts.NoSharedMemory), func(t *testing.T) {
			s, _ := openTiny(t, opts)
			in, want := tinyInputs()
			y := make([]float32, 6)
			bound := dense([]int{2, 3}, y)
			for i := 0; i < 2; i++ {
				clear(y)
				out, err := s.RunWith(context.Background(), in, RunOptions{Into: map[string]*tensor.Dense{"y": bound}})
				if err != nil {
					t.Fatal(err)
				}
				if out["y"] != bound {
					t.Fatalf("run %d: y is not the bound tensor", i)
				}
				checkClose(t, "y", bound, []int{2, 3}, want, 1e-6)
			}
			for _, c := range []struct {
				into map[string]*tensor.Dense
				want string
			}{
				{map[string]*tensor.Dense{"y": dense([]int{3, 2}, make([]float32, 6))}, `output "y": the bound tensor has shape [3 2], the output has [2 3]`},
				{map[string]*tensor.Dense{"y": dense([]int{2, 3}, make([]float64, 6))}, `output "y": the bound tensor cannot hold float32`},
				{map[string]*tensor.Dense{"z": bound}, `output binding: "z" is not a graph output`},
			} {
				_, err := s.RunWith(context.Background(), in, RunOptions{Into: c.into})
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("binding %v: error %v, want %q", c.into, err, c.want)
				}
			}
		})
	}
}

// TestOutputBindingTwoOutputs: two outputs of one run bound to one tensor
// is an error naming both; an output passed through from an input is
// copied into its bound tensor.
func TestOutputBindingTwoOutputs(t *testing.T) {
	m := identityModel()
	g := m.Graph
	g.Nodes = append(g.Nodes, &ir.Node{Name: "/Identity_1", OpType: "Identity", Inputs: []string{"x"}, Outputs: []string{"z"}})
	g.Outputs = append(g.Outputs, &ir.ValueInfo{Name: "z", Type: g.Outputs[0].Type}, &ir.ValueInfo{Name: "x", Type: g.Inputs[0].Type})
	s, err := Open(context.Background(), saveModel(t, m), Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := []float32{1, 2, 3}
	in := map[string]*tensor.Dense{"x": dense([]int{3}, x)}
	one := dense([]int{3}, make([]float32, 3))
	if _, err := s.RunWith(context.Background(), in, RunOptions{Into: map[string]*tensor.Dense{"y": one, "z": one}}); err == nil || err.Error() != `output binding: "y" and "z" are bound to the same tensor` {
		t.Errorf("same tensor twice: error %v", err)
	}
	xOut := dense([]int{3}, make([]float32, 3))
	out, err := s.RunWith(context.Background(), in, RunOptions{Into: map[string]*tensor.Dense{"x": xOut, "y": one}})
	if err != nil {
		t.Fatal(err)
	}
	if out["x"] != xOut || out["y"] != one {
		t.Fatal("results are not the bound tensors")
	}
	for _, d := range []*tensor.Dense{xOut, one, out["z"]} {
		if got := d.Data().([]float32); !slices.Equal(got, x) {
			t.Errorf("output %v, want %v", got, x)
		}
	}
}

// BenchmarkSessionRoundTrip4MiB times Session.RunWith on a 4 MiB float32
// input through an Identity model (4 MiB to the backend, 4 MiB back into a
// bound output tensor), through the shared region and inline in the gRPC
// messages, and reports the median as p50-ms.
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
			// The output is bound to one tensor, as a caller looping
			// over runs would (RunOptions.Into): the benchmark times the
			// transport, not Go's allocator.
			ro := RunOptions{Into: map[string]*tensor.Dense{"y": dense([]int{len(x)}, make([]float32, len(x)))}}
			for i := 0; i < 3; i++ {
				if _, err := s.RunWith(context.Background(), in, ro); err != nil {
					b.Fatal(err)
				}
			}
			times := make([]time.Duration, 0, b.N)
			b.SetBytes(8 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, err := s.RunWith(context.Background(), in, ro)
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
