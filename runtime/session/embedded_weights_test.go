package session

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
	"testing"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// Weights embedded in the model file (raw_data, as PyTorch exports them)
// are held about once per process: the host maps or reads them once and
// sends the backend references into the model file, which the backend
// maps itself; no process keeps the file's bytes, a decoded protobuf copy,
// an encoded partition or a gRPC message of them.

// writeEmbeddedMLP writes dir/model.onnx: writeExternalMLP's model with
// every weight embedded as raw_data (the file is the weights' size), and
// its rows symbolic (x: float32[N, k]).
func writeEmbeddedMLP(t *testing.T, dir string, k, layers int) string {
	t.Helper()
	m := mlpModel(k, layers, func(l int) (string, *ir.Tensor) {
		// Names of different lengths put the weights at offsets both
		// aligned and not for float32 (mapped, or read once).
		w := make([]float32, k*k)
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				w[i*k+j] = weightRow(l, i) * weightCol(j)
			}
		}
		return fmt.Sprintf("w%d%s", l, "xxxx"[:l%4]), ir.FromSlice([]int{k, k}, w)
	})
	for _, vi := range append(m.Graph.Inputs, m.Graph.Outputs...) {
		vi.Type.Shape[0] = ir.Dim{Param: "N"}
	}
	data, err := onnx.Encode(m)
	return writeModelFile(t, dir, data, err)
}

// TestEmbeddedWeightsHeldOnce: a model with 96 MiB of embedded weights
// opens and runs with the host's peak RSS growing by at most 1.5× the
// weights and the backend's peak growing by at most 1.4× (over a backend
// running a 4 MiB model of the same shape: it holds the weights packed for
// the GEMM, and releases their float32 data, graph Options.Weights); runs
// on other shapes after the release (new plans, which find the weights
// packed) match and keep the backend under that bound; and a backend
// killed afterwards restarts and compiles again from the references.
// Before Load referenced embedded weights, the host grew by 483 MiB (5.0×)
// and the backend peaked at 599 MiB (6.2×); after, 65 MiB (0.68×) and 213
// MiB (2.2×); with the packed weights held once, the backend's peak grows
// by 1.1× (2026-11-24, 2-core EPYC).
func TestEmbeddedWeightsHeldOnce(t *testing.T) {
	const k, layers = 2048, 6 // 6 × 16 MiB
	weights := int64(layers) * 4 * k * k
	// The backend's own footprint: the same model with 1 MiB weights
	// (the least that is referenced, and so released).
	small := runMLP(t, writeEmbeddedMLP(t, t.TempDir(), 512, layers), 512, layers, Options{Threads: 1})
	base := backendPeak(t, small)
	small.Close()
	path := writeEmbeddedMLP(t, t.TempDir(), k, layers)
	debug.FreeOSMemory()
	// Reset this process's peak RSS to its current RSS (Linux ≥ 4.0).
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	before := vmRSS(t, os.Getpid())
	s := runMLP(t, path, k, layers, Options{Threads: 1})
	defer s.Close()
	hostGrowth := vmHWM(t, os.Getpid()) - before
	backGrowth := backendPeak(t, s) - base
	t.Logf("weights %d MiB: host peak RSS grew %d MiB (%.2f×), backend peak RSS grew %d MiB (%.2f×) over %d MiB",
		weights>>20, hostGrowth>>20, float64(hostGrowth)/float64(weights), backGrowth>>20, float64(backGrowth)/float64(weights), base>>20)
	if hostGrowth > weights*3/2 {
		t.Errorf("host peak RSS grew %d MiB, over 1.5× the %d MiB of weights", hostGrowth>>20, weights>>20)
	}
	if backGrowth > weights*7/5 {
		t.Errorf("backend peak RSS grew %d MiB, over 1.4× the %d MiB of weights", backGrowth>>20, weights>>20)
	}
	// New shapes after the release: new plans, the weights found packed.
	for _, rows := range []int{3, 8, 1} {
		x := make([]float32, rows*k)
		want := make([]float32, rows*k)
		for r, w := 0, mlpWant(k, layers); r < rows; r++ {
			for i := 0; i < k; i++ {
				x[r*k+i] = float32(r + 1)
				want[r*k+i] = float32(r+1) * w[i]
			}
		}
		out, err := s.Run(context.Background(), map[string]*tensor.Dense{"x": dense([]int{rows, k}, x)})
		if err != nil {
			t.Fatalf("run on %d rows: %v", rows, err)
		}
		checkClose(t, fmt.Sprintf("y (%d rows)", rows), out[fmt.Sprintf("h%d", layers-1)], []int{rows, k}, want, 1e-3*float64(rows))
	}
	if after := backendPeak(t, s) - base; after > weights*7/5 {
		t.Errorf("backend peak RSS grew %d MiB after runs on other shapes, over 1.4× the %d MiB of weights", after>>20, weights>>20)
	} else {
		t.Logf("backend peak RSS growth after runs on 3, 8 and 1 rows: %d MiB (%.2f×)", after>>20, float64(after)/float64(weights))
	}
	// A restarted backend compiles again from the same references.
	pid := s.Backends()[0].Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, s, pid)
	x := make([]float32, k)
	for i := range x {
		x[i] = 1
	}
	out, err := s.Run(context.Background(), map[string]*tensor.Dense{"x": dense([]int{1, k}, x)})
	if err != nil {
		t.Fatalf("run after the backend was killed: %v", err)
	}
	checkClose(t, "y", out[fmt.Sprintf("h%d", layers-1)], []int{1, k}, mlpWant(k, layers), 1e-3)
}
