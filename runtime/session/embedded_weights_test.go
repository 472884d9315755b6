package session

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/runtime/graph"
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
	data, err := onnx.Encode(embeddedMLP(k, layers))
	return writeModelFile(t, dir, data, err)
}

// embeddedMLP is writeEmbeddedMLP's model.
func embeddedMLP(k, layers int) *ir.Model {
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
	return m
}

// TestEmbeddedWeightsHeldOnce: a model with 96 MiB of embedded weights
// opens and runs with the host's peak RSS growing by at most 0.25× the
// weights (it maps the weights at offsets aligned for float32, touching
// nothing, and loads the others by reference, reading nothing: Open) and
// the backend's peak growing by at most 1.4× (over a backend
// running a 4 MiB model of the same shape: it holds the weights packed for
// the GEMM, and releases their float32 data, graph Options.Weights); runs
// on other shapes after the release (new plans, which find the weights
// packed) match and keep the backend under that bound; and a backend
// killed afterwards restarts and compiles again from the references.
// Before Load referenced embedded weights, the host grew by 483 MiB (5.0×)
// and the backend peaked at 599 MiB (6.2×); after, 65 MiB (0.68×) and 213
// MiB (2.2×); with the packed weights held once, the backend's peak grows
// by 1.1× (2026-11-24, 2-core EPYC). The host's peak grew 0.64–0.70× while
// it read the unaligned half of the weights; loaded by reference, 11–12
// MiB (0.12–0.13×, three runs, 2026-11-24): what it grows by is the
// session's own, not the weights'.
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
	if hostGrowth > weights/4 {
		t.Errorf("host peak RSS grew %d MiB, over 0.25× the %d MiB of weights", hostGrowth>>20, weights>>20)
	}
	released := 0
	for name, w := range s.Model().Graph.Initializers {
		if w.External == nil || (!w.External.Mapped && !w.Released()) {
			t.Errorf("weight %q: the host holds its data (referenced %v)", name, w.External != nil)
		}
		if w.Released() {
			released++
		}
	}
	if released == 0 {
		t.Error("no weight is loaded by reference: the case does not cover them")
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

// TestHostWeightsReadBack: the host loads the weights it cannot map by
// reference and reads them back where it reads their values: an
// initializer that is a graph output comes back from Run with its values;
// Program.Fusions (a plan on the host that only passes the MatMul weights
// to kernels) leaves them in the file and plans the fusions a session
// with every weight loaded plans; Program.Const reads one, also after a
// new model was renamed over the file (mv: the session holds the file it
// loaded). The in-process backend shares the host's tensors: nothing is
// released.
func TestHostWeightsReadBack(t *testing.T) {
	const k, layers = 512, 4 // 1 MiB weights: the least that is referenced
	m := embeddedMLP(k, layers)
	names := append([]string(nil), m.Graph.InitializerOrder...)
	// The last weight (at an unaligned offset) is also a graph output.
	last := names[layers-1]
	m.Graph.Outputs = append(m.Graph.Outputs, &ir.ValueInfo{Name: last, Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.ShapeOf([]int{k, k})}})
	data, err := onnx.Encode(m)
	path := writeModelFile(t, t.TempDir(), data, err)
	want := func(name string) []float32 {
		l := slices.Index(names, name)
		w := make([]float32, k*k)
		for i := range k {
			for j := range k {
				w[i*k+j] = weightRow(l, i) * weightCol(j)
			}
		}
		return w
	}
	ones := make([]float32, k)
	for i := range ones {
		ones[i] = 1
	}
	fusions := map[bool]int{}
	for _, inProcess := range []bool{true, false} { // in process first: the other case renames a file over the model
		s := runMLP(t, path, k, layers, Options{Threads: 1, InProcess: inProcess})
		defer s.Close()
		// runMLP ran once: only the graph output was read back.
		var released []string
		for _, name := range names {
			if w := s.Model().Graph.Initializers[name]; w.Released() {
				released = append(released, name)
			} else if !inProcess && name != last && !w.External.Mapped {
				t.Errorf("weight %q: the host holds its data", name)
			}
		}
		if inProcess != (len(released) == 0) || slices.Contains(released, last) {
			t.Fatalf("in process %v: weights held by reference after a run: %v (%q is read back)", inProcess, released, last)
		}
		out, err := s.Run(context.Background(), map[string]*tensor.Dense{"x": dense([]int{1, k}, ones)})
		if err != nil {
			t.Fatalf("in process %v: %v", inProcess, err)
		}
		checkClose(t, last, out[last], []int{k, k}, want(last), 0)
		if inProcess {
			f, err := s.Program().Fusions(map[string]*ir.Tensor{"x": ir.FromSlice([]int{1, k}, ones)})
			if err != nil {
				t.Fatal(err)
			}
			fusions[true] = len(f)
			continue
		}
		// A new model renamed over the file changes nothing the session
		// reads back.
		other := filepath.Join(filepath.Dir(path), "other.onnx")
		if err := os.WriteFile(other, []byte("not a model"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(other, path); err != nil {
			t.Fatal(err)
		}
		f, err := s.Program().Fusions(map[string]*ir.Tensor{"x": ir.FromSlice([]int{1, k}, ones)})
		if err != nil {
			t.Fatalf("Fusions after a file was renamed over the model: %v", err)
		}
		fusions[false] = len(f)
		for _, name := range released {
			if w := s.Model().Graph.Initializers[name]; !w.Released() {
				t.Errorf("weight %q: read back by a plan on the host that only passes it to a kernel", name)
			}
		}
		for _, name := range released {
			w := s.Model().Graph.Initializers[name]
			c, err := s.Program().Const(name)
			if err != nil || c != w {
				t.Errorf("Const(%q): %v", name, err)
			}
			if w.Released() || !slices.Equal(w.Float32s(), want(name)) {
				t.Errorf("weight %q after Const: released %v, or its values differ", name, w.Released())
			}
		}
	}
	if fusions[false] != fusions[true] {
		t.Errorf("the host plans %d fusions on weights read back, %d on weights read at load", fusions[false], fusions[true])
	}
}

// maskedAttentionModel is y = softmax(q·kᵀ + mask)·v·W, q, k, v:
// float32[1, s, d]: the mask a float32 [s, s] constant of 0 and -inf
// (causal), W a [d, n] weight. pad lengthens the two initializers' names,
// which moves their data in the encoded file.
func maskedAttentionModel(s, d, n int, pad [2]int) (m *ir.Model, mask, w string) {
	mask, w = "mask"+strings.Repeat("x", pad[0]), "w"+strings.Repeat("x", pad[1])
	mv := make([]float32, s*s)
	for i := range s {
		for j := i + 1; j < s; j++ {
			mv[i*s+j] = float32(math.Inf(-1))
		}
	}
	wv := make([]float32, d*n)
	for i := range wv {
		wv[i] = float32(i%7-3) / 64
	}
	in := func(name string, dims ...int) *ir.ValueInfo {
		return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.ShapeOf(dims)}}
	}
	g := &ir.Graph{
		Name:             "masked_attention",
		Initializers:     map[string]*ir.Tensor{mask: ir.FromSlice([]int{s, s}, mv), w: ir.FromSlice([]int{d, n}, wv)},
		InitializerOrder: []string{mask, w},
		Inputs:           []*ir.ValueInfo{in("q", 1, s, d), in("k", 1, s, d), in("v", 1, s, d)},
		Outputs:          []*ir.ValueInfo{in("y", 1, s, n)},
		Nodes: []*ir.Node{
			{Name: "kt", OpType: "Transpose", Inputs: []string{"k"}, Outputs: []string{"kT"}, Attrs: []*ir.Attribute{{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 2, 1}}}},
			{Name: "scores", OpType: "MatMul", Inputs: []string{"q", "kT"}, Outputs: []string{"s"}},
			{Name: "mask", OpType: "Add", Inputs: []string{"s", mask}, Outputs: []string{"sm"}},
			{Name: "softmax", OpType: "Softmax", Inputs: []string{"sm"}, Outputs: []string{"p"}, Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: -1}}},
			{Name: "context", OpType: "MatMul", Inputs: []string{"p", "v"}, Outputs: []string{"o"}},
			{Name: "out", OpType: "MatMul", Inputs: []string{"o", w}, Outputs: []string{"y"}},
		},
	}
	return &ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g}, mask, w
}

// TestHostPlanReadsBackOnlyValues: a plan built on the host for looking
// at (Program.Fusions, what `attnrun inspect` shows) reads back only the
// weights held by reference whose values planning reads (here a 1 MiB
// causal mask, which the attention fusion reads as a pattern), not those
// it only hands to kernels (a 1 MiB MatMul weight), and plans the fusions
// a session with every weight loaded plans. A plan that runs on the host
// (Program.Run) reads the rest back first and computes what the backend
// computes.
func TestHostPlanReadsBackOnlyValues(t *testing.T) {
	const s, d, n = 512, 64, 4096 // the mask s×s and W d×n: 1 MiB each, the least that is referenced
	// Pad the names until both initializers lie at offsets the host
	// cannot map (not aligned for float32): it loads them by reference.
	var path, mask, w string
	for pad := 0; pad < 16 && path == ""; pad++ {
		m, mn, wn := maskedAttentionModel(s, d, n, [2]int{pad % 4, pad / 4})
		data, err := onnx.Encode(m)
		p := writeModelFile(t, t.TempDir(), data, err)
		loaded, err := onnx.Load(p, onnx.Options{ReferenceWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		if loaded.Graph.Initializers[mn].Released() && loaded.Graph.Initializers[wn].Released() {
			path, mask, w = p, mn, wn
		}
	}
	if path == "" {
		t.Fatal("no padding of the names puts both weights at unaligned offsets: the case does not cover weights held by reference")
	}
	r := rand.New(rand.NewPCG(1, 2))
	inputs := map[string]*ir.Tensor{}
	for _, name := range []string{"q", "k", "v"} {
		x := make([]float32, s*d)
		for i := range x {
			x[i] = r.Float32()*2 - 1
		}
		inputs[name] = ir.FromSlice([]int{1, s, d}, x)
	}
	describe := func(fs []graph.Fusion) []string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s inputs %q", f.Describe(), f.Node.Inputs))
		}
		return out
	}
	loaded, err := Open(context.Background(), path, Options{Threads: 1, InProcess: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	fs, err := loaded.Program().Fusions(inputs)
	if err != nil {
		t.Fatal(err)
	}
	want := describe(fs)
	if !slices.ContainsFunc(want, func(d string) bool { return strings.Contains(d, "FusedAttention") }) {
		t.Fatalf("the attention is not fused, so its mask's values are not read: %q", want)
	}

	sess, err := Open(context.Background(), path, Options{Threads: 1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	init := sess.Model().Graph.Initializers
	if !init[mask].Released() || !init[w].Released() {
		t.Fatalf("after Open: mask released %v, W released %v; want both held by reference", init[mask].Released(), init[w].Released())
	}
	fs, err = sess.Program().Fusions(inputs)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(fs); !slices.Equal(got, want) {
		t.Errorf("fusions with weights held by reference:\n%q\nwith every weight loaded:\n%q", got, want)
	}
	if init[mask].Released() {
		t.Error("the mask, whose values the attention fusion reads, was not read back")
	}
	if !init[w].Released() {
		t.Error("W, which the plan only hands to a kernel, was read back by a plan built for looking at")
	}

	// A run on the host reads W back and computes what the backend does.
	byBackend, err := sess.Run(context.Background(), map[string]*tensor.Dense{
		"q": dense([]int{1, s, d}, inputs["q"].Float32s()), "k": dense([]int{1, s, d}, inputs["k"].Float32s()), "v": dense([]int{1, s, d}, inputs["v"].Float32s()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !init[w].Released() {
		t.Error("W is not held by reference after a run on the backend (the host has no use for its values)")
	}
	onHost, err := sess.Program().Run(context.Background(), inputs, graph.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if init[w].Released() {
		t.Error("W is still held by reference after a run on the host")
	}
	checkClose(t, "y (host run)", dense([]int{1, s, n}, onHost["y"].Float32s()), []int{1, s, n}, byBackend["y"].Data().([]float32), 1e-5)
}
