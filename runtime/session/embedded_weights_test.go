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
// every weight embedded as raw_data (the file is the weights' size).
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
	data, err := onnx.Encode(m)
	return writeModelFile(t, dir, data, err)
}

// TestEmbeddedWeightsHeldOnce: a model with 96 MiB of embedded weights
// opens and runs with the host's peak RSS growing by at most 1.5× the
// weights and the backend's peak at most 3× (it holds them packed for the
// GEMM besides), and a backend killed afterwards restarts and compiles
// again from the references. Before Load referenced embedded weights, the host grew
// by 483 MiB (5.0×) and the backend peaked at 599 MiB (6.2×); after, 65 MiB
// (0.68×) and 213 MiB (2.2×) (2026-11-24, 2-core EPYC).
func TestEmbeddedWeightsHeldOnce(t *testing.T) {
	const k, layers = 2048, 6 // 6 × 16 MiB
	weights := int64(layers) * 4 * k * k
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
	backPeak := backendPeak(t, s)
	t.Logf("weights %d MiB: host peak RSS grew %d MiB (%.2f×), backend peak RSS %d MiB (%.2f×)",
		weights>>20, hostGrowth>>20, float64(hostGrowth)/float64(weights), backPeak>>20, float64(backPeak)/float64(weights))
	if hostGrowth > weights*3/2 {
		t.Errorf("host peak RSS grew %d MiB, over 1.5× the %d MiB of weights", hostGrowth>>20, weights>>20)
	}
	if backPeak > weights*3 {
		t.Errorf("backend peak RSS %d MiB, over 3× the %d MiB of weights", backPeak>>20, weights>>20)
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
