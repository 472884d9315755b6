package session

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/attnrun/attnrun/backends/cpu"
	"github.com/attnrun/attnrun/internal/procfs"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"gorgonia.org/tensor"
)

// TestMain: sessions re-execute this test binary as the CPU backend, which
// package cpu's init serves before TestMain runs (no call needed here).
func TestMain(m *testing.M) {
	if path := os.Getenv(testHostEnv); path != "" {
		runTestHost(path)
	}
	code := m.Run()
	for _, dir := range embedderDirs {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// testHostEnv makes this test binary a host that opens a session on the
// model named by the variable, prints its backend's pid and dies by SIGKILL;
// with testHostStopEnv=1 it first stops the backend (SIGSTOP).
const (
	testHostEnv     = "ATTNRUN_SESSION_TEST_HOST"
	testHostStopEnv = "ATTNRUN_SESSION_TEST_HOST_STOP"
)

func runTestHost(path string) {
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	pid := s.Backends()[0].Pid
	if os.Getenv(testHostStopEnv) == "1" {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		for !procfs.Stopped(pid) {
			time.Sleep(time.Millisecond)
		}
	}
	fmt.Println(pid)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// logBuf collects Logf lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// tinyModel is
//
//	h = Softmax(MatMul(x, W) + b)   x: float32[batch, 4], W: [4, 3], b: [3]
//	y = h + r                        r: float32[batch, 3]
func tinyModel() *ir.Model {
	sym := func(s string) ir.Dim { return ir.Dim{Param: s} }
	num := func(v int64) ir.Dim { return ir.Dim{Value: v} }
	w := ir.FromSlice([]int{4, 3}, []float32{
		1, 0, 0,
		0, 1, 0,
		0, 0, 1,
		1, 1, 1,
	})
	b := ir.FromSlice([]int{3}, []float32{0, 1, 2})
	return &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name: "tiny",
			Nodes: []*ir.Node{
				{Name: "/MatMul", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"mm"}},
				{Name: "/Add", OpType: "Add", Inputs: []string{"mm", "b"}, Outputs: []string{"z"}},
				{Name: "/Softmax", OpType: "Softmax", Inputs: []string{"z"}, Outputs: []string{"h"},
					Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: -1}}},
				{Name: "/Add_1", OpType: "Add", Inputs: []string{"h", "r"}, Outputs: []string{"y"}},
			},
			Inputs: []*ir.ValueInfo{
				{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{sym("batch"), num(4)}, RankKnown: true}},
				{Name: "r", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{sym("batch"), num(3)}, RankKnown: true}},
			},
			Outputs: []*ir.ValueInfo{
				{Name: "y", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{sym("batch"), num(3)}, RankKnown: true}},
			},
			Initializers:     map[string]*ir.Tensor{"W": w, "b": b},
			InitializerOrder: []string{"W", "b"},
		},
	}
}

// tinyWant computes the tiny model's output by hand.
func tinyWant(x, r []float32) []float32 {
	batch := len(x) / 4
	out := make([]float32, batch*3)
	for i := 0; i < batch; i++ {
		xi := x[i*4 : i*4+4]
		z := []float64{float64(xi[0] + xi[3]), float64(xi[1]+xi[3]) + 1, float64(xi[2]+xi[3]) + 2}
		mx := math.Max(z[0], math.Max(z[1], z[2]))
		var sum float64
		for k := range z {
			z[k] = math.Exp(z[k] - mx)
			sum += z[k]
		}
		for k := range z {
			out[i*3+k] = float32(z[k]/sum) + r[i*3+k]
		}
	}
	return out
}

// saveModel encodes m into a temporary model.onnx.
func saveModel(t *testing.T, m *ir.Model) string {
	t.Helper()
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func dense(shape []int, data any) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
}

func openTiny(t *testing.T, opts Options) (*Session, *logBuf) {
	t.Helper()
	logs := &logBuf{}
	if opts.Logf == nil {
		opts.Logf = logs.logf
	}
	s, err := Open(context.Background(), saveModel(t, tinyModel()), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

func tinyInputs() (map[string]*tensor.Dense, []float32) {
	x := []float32{0.5, -1, 2, 0.25, 1, 2, 3, 4}
	r := []float32{10, 20, 30, -1, -2, -3}
	return map[string]*tensor.Dense{"x": dense([]int{2, 4}, x), "r": dense([]int{2, 3}, r)}, tinyWant(x, r)
}

func checkClose(t *testing.T, name string, got *tensor.Dense, shape []int, want []float32, tol float64) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: no output", name)
	}
	if !got.Shape().Eq(tensor.Shape(shape)) {
		t.Fatalf("%s: shape %v, want %v", name, got.Shape(), shape)
	}
	g, ok := got.Data().([]float32)
	if !ok {
		t.Fatalf("%s: data %T, want []float32", name, got.Data())
	}
	for i := range want {
		if math.Abs(float64(g[i]-want[i])) > tol {
			t.Fatalf("%s[%d] = %v, want %v (all: %v)", name, i, g[i], want[i], g)
		}
	}
}

func TestRunInBackendProcess(t *testing.T) {
	s, _ := openTiny(t, Options{})
	bs := s.Backends()
	if len(bs) != 1 || bs[0].Name != "cpu" || bs[0].Version != cpu.Version {
		t.Fatalf("backends %+v, want one cpu backend version %s", bs, cpu.Version)
	}
	if bs[0].Pid == os.Getpid() || bs[0].Pid <= 0 {
		t.Fatalf("backend pid %d, host pid %d: want another process", bs[0].Pid, os.Getpid())
	}
	in, want := tinyInputs()
	for i := 0; i < 3; i++ { // the compiled partition is reused
		out, err := s.Run(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "y", out["y"], []int{2, 3}, want, 1e-6)
	}
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := st["cpu"]; c == nil || c.Runs != 3 || c.Partitions != 1 || c.MaxRSSBytes <= 0 {
		t.Errorf("stats %+v, want 3 runs, 1 partition, a positive peak RSS", c)
	}
	for n, b := range s.Assignments() {
		if b != "cpu" {
			t.Errorf("node %s assigned to %q", n.Label(), b)
		}
	}
}

func TestInputValidation(t *testing.T) {
	// StrictDims: the "symbolic" case is refused in the host too.
	s, _ := openTiny(t, Options{StrictDims: true})
	x := func(shape ...int) *tensor.Dense {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return dense(shape, make([]float32, n))
	}
	cases := []struct {
		name   string
		inputs map[string]*tensor.Dense
		want   string
	}{
		{"missing", map[string]*tensor.Dense{"x": x(2, 4)},
			`missing input "r" (float32[batch, 3])`},
		{"nil", map[string]*tensor.Dense{"x": nil, "r": x(2, 3)},
			`missing input "x" (float32[batch, 4])`},
		{"extra", map[string]*tensor.Dense{"x": x(2, 4), "r": x(2, 3), "q": x(1)},
			`unexpected input "q": the model's inputs are x, r`},
		{"dtype", map[string]*tensor.Dense{"x": dense([]int{2, 4}, make([]int64, 8)), "r": x(2, 3)},
			`input "x" has element type int64, the model expects float32`},
		{"rank", map[string]*tensor.Dense{"x": x(2, 4, 1), "r": x(2, 3)},
			`input "x" has shape [2x4x1], the model expects rank 2 [batch, 4]`},
		{"dim", map[string]*tensor.Dense{"x": x(2, 5), "r": x(2, 3)},
			`input "x" has shape [2x5], the model expects [batch, 4] (dim 1 must be 4)`},
		{"symbolic", map[string]*tensor.Dense{"x": x(2, 4), "r": x(3, 3)},
			`input "r" dim 0 (batch) is 3, but x dim 0 set batch=2 (refused: strict dims)`},
		{"unconvertible", map[string]*tensor.Dense{"x": dense([]int{2, 4}, make([]complex64, 8)), "r": x(2, 3)},
			`input "x": from dense: gorgonia dtype complex64 has no attnrun dtype`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), c.inputs)
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v\nwant    %s", err, c.want)
			}
		})
	}
	// Nothing reached the backend.
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st["cpu"].Runs != 0 {
		t.Errorf("backend served %d runs, want 0: validation must happen in the host", st["cpu"].Runs)
	}
}

// waitExited polls until the session sees backend pid gone: unavailable, or
// already replaced by another process (replacements start in the
// background).
func waitExited(t *testing.T, s *Session, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b := s.Backends()[0]; !b.Available || b.Pid != pid {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("backend still running")
}

func TestBackendDiesWhileRunningNode(t *testing.T) {
	cases := []struct {
		fault, node, op, how string
	}{
		{"exit-before:Softmax", "/Softmax", "Softmax", "exit status 2"},
		{"kill-before:MatMul", "/MatMul", "MatMul", "signal: killed"},
	}
	for _, c := range cases {
		t.Run(c.fault, func(t *testing.T) {
			t.Setenv(cpu.FaultEnv, c.fault)
			// NoFuse: the fault hooks fire on exported op types, and plan-time
			// fusion (MatMul+Add) would leave no MatMul node to run.
			s, logs := openTiny(t, Options{NoFuse: true})
			os.Unsetenv(cpu.FaultEnv) // the restarted backend runs normally
			pid := s.Backends()[0].Pid
			in, want := tinyInputs()
			_, err := s.Run(context.Background(), in)
			wantErr := fmt.Sprintf(`backend "cpu" (pid %d) died while running node %q (%s) of partition 0: %s`, pid, c.node, c.op, c.how)
			if err == nil || err.Error() != wantErr {
				t.Fatalf("error %v\nwant    %s", err, wantErr)
			}
			out, err := s.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "y", out["y"], []int{2, 3}, want, 1e-6)
			newPid := s.Backends()[0].Pid
			if newPid == pid || newPid == os.Getpid() {
				t.Errorf("after the crash the backend pid is %d (old %d, host %d): want a new process", newPid, pid, os.Getpid())
			}
			if !strings.Contains(logs.String(), fmt.Sprintf(`backend "cpu" (pid %d) exited (%s); restarting it`, pid, c.how)) {
				t.Errorf("restart not logged; log:\n%s", logs)
			}
		})
	}
}

func TestBackendKilledBetweenRuns(t *testing.T) {
	s, logs := openTiny(t, Options{})
	in, want := tinyInputs()
	if _, err := s.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	pid := s.Backends()[0].Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, s, pid)
	out, err := s.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y", out["y"], []int{2, 3}, want, 1e-6)
	if p := s.Backends()[0].Pid; p == pid {
		t.Errorf("backend pid unchanged after SIGKILL")
	}
	if !strings.Contains(logs.String(), fmt.Sprintf(`backend "cpu" (pid %d) exited (signal: killed); restarting it`, pid)) {
		t.Errorf("restart not logged; log:\n%s", logs)
	}
}

func TestLargeTensors(t *testing.T) {
	// W is 1024x2048 float32 = 8 MiB, x is 1100x1024 = 4.3 MiB and y is
	// 1100x2048 = 8.6 MiB: each over gRPC's default 4 MiB message limit.
	const rows, k, n = 1100, 1024, 2048
	w := make([]float32, k*n)
	for i := 0; i < k; i++ {
		for j := 0; j < n; j++ {
			w[i*n+j] = float32((i+2*j)%7) * 0.125
		}
	}
	// Row r of x is (r%5+1) times x0, so row r of y is (r%5+1) times y0.
	x0 := make([]float32, k)
	for i := range x0 {
		x0[i] = float32(i%3) - 1
	}
	x := make([]float32, rows*k)
	for r := 0; r < rows; r++ {
		for i := range x0 {
			x[r*k+i] = x0[i] * float32(r%5+1)
		}
	}
	y0 := make([]float64, n)
	for j := 0; j < n; j++ {
		for i := 0; i < k; i++ {
			y0[j] += float64(x0[i]) * float64(w[i*n+j])
		}
	}
	want := make([]float32, rows*n)
	for r := 0; r < rows; r++ {
		for j := range y0 {
			want[r*n+j] = float32(y0[j] * float64(r%5+1))
		}
	}
	m := &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name:  "big",
			Nodes: []*ir.Node{{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"y"}}},
			Inputs: []*ir.ValueInfo{
				{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Param: "rows"}, {Value: k}}, RankKnown: true}},
			},
			Outputs: []*ir.ValueInfo{
				{Name: "y", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Param: "rows"}, {Value: n}}, RankKnown: true}},
			},
			Initializers:     map[string]*ir.Tensor{"W": ir.FromSlice([]int{k, n}, w)},
			InitializerOrder: []string{"W"},
		},
	}
	s, err := Open(context.Background(), saveModel(t, m), Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), map[string]*tensor.Dense{"x": dense([]int{rows, k}, x)})
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y", out["y"], []int{rows, n}, want, 1e-2)
}

// pluginDir makes a plugin directory holding
//
//	attnrun-backend-picky   this test binary as the CPU backend, refusing Softmax
//	attnrun-backend-broken  an executable that is not a backend
//	attnrun-backend-noexec  a file without the executable bit
func pluginDir(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := []struct {
		name, text string
		mode       os.FileMode
	}{
		{"attnrun-backend-picky", fmt.Sprintf("#!/bin/sh\nATTNRUN_SERVE_BACKEND=cpu %s=refuse:Softmax exec %q\n", cpu.FaultEnv, self), 0o755},
		{"attnrun-backend-broken", "#!/bin/sh\necho 'this is not a plugin'\nexit 3\n", 0o755},
		{"attnrun-backend-noexec", "#!/bin/sh\n", 0o644},
		{"README", "not a backend\n", 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.text), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFallbackPartitions(t *testing.T) {
	dir := pluginDir(t)
	s, logs := openTiny(t, Options{Backend: "picky", PluginDir: dir})
	want := map[string]string{"/MatMul": "picky", "/Add": "picky", "/Softmax": "cpu", "/Add_1": "picky"}
	for n, b := range s.Assignments() {
		if want[n.Name] != b {
			t.Errorf("node %s on %q, want %q", n.Name, b, want[n.Name])
		}
	}
	parts := s.Partitions()
	var got []string
	for _, p := range parts {
		got = append(got, fmt.Sprintf("%s%v->%v", p.Backend, p.Inputs, p.Outputs))
	}
	if g := strings.Join(got, " | "); g != "picky[x]->[z] | cpu[z]->[h] | picky[h r]->[y]" {
		t.Errorf("partitions %s", g)
	}
	if !strings.Contains(logs.String(), `node "/Softmax" (Softmax) falls back from backend "picky" to "cpu": refused by ATTNRUN_CPU_FAULT`) {
		t.Errorf("fallback not logged; log:\n%s", logs)
	}
	in, wantY := tinyInputs()
	out, err := s.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y", out["y"], []int{2, 3}, wantY, 1e-6)
	bs := s.Backends()
	if len(bs) != 2 || bs[0].Name != "picky" || bs[1].Name != "cpu" || bs[0].Pid == bs[1].Pid {
		t.Errorf("backends %+v", bs)
	}

	_, err = Open(context.Background(), saveModel(t, tinyModel()), Options{Backend: "picky", PluginDir: dir, NoFallback: true, Logf: t.Logf})
	wantErr := `node "/Softmax" (Softmax): backend "picky" does not take this node (refused by ATTNRUN_CPU_FAULT) and fallback to "cpu" is disabled`
	if err == nil || err.Error() != wantErr {
		t.Errorf("NoFallback error %v\nwant %s", err, wantErr)
	}
}

func TestListBackends(t *testing.T) {
	dir := pluginDir(t)
	list, err := ListBackends(context.Background(), Options{PluginDir: dir, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range list {
		line := fmt.Sprintf("%s available=%v", b.Name, b.Available)
		if b.Available && (b.Version != cpu.Version || b.Pid <= 0 || b.Pid == os.Getpid() || len(b.Ops) == 0) {
			t.Errorf("%s: info %+v", b.Name, b)
		}
		if !b.Available {
			line += " reason=" + strings.ReplaceAll(b.Reason, dir, "DIR")
		}
		got = append(got, line)
	}
	want := []string{
		"cpu available=true",
		`broken available=false reason=launch backend "broken" (DIR/attnrun-backend-broken): Unrecognized remote plugin message: this is not a plugin`,
		"noexec available=false reason=not executable (mode -rw-r--r--)",
		"picky available=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("backends:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestUnknownBackend(t *testing.T) {
	dir := pluginDir(t)
	cases := []struct {
		backend, dir, want string
	}{
		{"nope", dir, `unknown backend "nope": available backends: cpu, broken, picky (no DIR/attnrun-backend-nope)`},
		{"noexec", dir, `backend "noexec": DIR/attnrun-backend-noexec is refused: not executable (mode -rw-r--r--)`},
		{"gpu", "", `unknown backend "gpu": available backends: cpu (no plugin directory is set: --plugin-dir or ATTNRUN_PLUGIN_DIR)`},
	}
	t.Setenv("ATTNRUN_PLUGIN_DIR", "")
	path := saveModel(t, tinyModel())
	for _, c := range cases {
		t.Run(c.backend, func(t *testing.T) {
			_, err := Open(context.Background(), path, Options{Backend: c.backend, PluginDir: c.dir, Logf: t.Logf})
			if err == nil || strings.ReplaceAll(err.Error(), dir, "DIR") != c.want {
				t.Errorf("error %v\nwant  %s", err, c.want)
			}
		})
	}
}

// TestModels runs every reference model's data sets through a session and
// compares with PyTorch's outputs; a session with the CPU backend in
// process (Options.InProcess) gives the very same bits.
func TestModels(t *testing.T) {
	dirs, err := filepath.Glob("../../models/*/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no models under ../../models")
	}
	for _, path := range dirs {
		dir := filepath.Dir(path)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			s, err := Open(context.Background(), path, Options{Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			inproc, err := Open(context.Background(), path, Options{Logf: t.Logf, InProcess: true})
			if err != nil {
				t.Fatal(err)
			}
			defer inproc.Close()
			sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
			if len(sets) == 0 {
				t.Fatal("no data sets")
			}
			for _, set := range sets {
				out, err := s.Run(context.Background(), readInputs(t, set))
				if err != nil {
					t.Fatalf("%s: %v", filepath.Base(set), err)
				}
				local, err := inproc.Run(context.Background(), readInputs(t, set))
				if err != nil {
					t.Fatalf("%s, in process: %v", filepath.Base(set), err)
				}
				for name, d := range out {
					if l := local[name]; l == nil || !l.Shape().Eq(d.Shape()) || !slices.Equal(l.Data().([]float32), d.Data().([]float32)) {
						t.Fatalf("%s: output %q in process differs from the backend process's", filepath.Base(set), name)
					}
				}
				for _, f := range mustGlob(t, filepath.Join(set, "output_*.pb")) {
					name, want := readPB(t, f)
					w, ok := want.Data().([]float32)
					if !ok {
						t.Fatalf("%s: expected output %q is %v", set, name, want.Dtype())
					}
					checkClose(t, filepath.Base(set)+"/"+name, out[name], want.Shape(), w, 1e-4)
				}
			}
		})
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		t.Fatalf("no files match %s (%v)", pattern, err)
	}
	return m
}

// readPB reads a serialized TensorProto as a Dense.
func readPB(t *testing.T, path string) (string, *tensor.Dense) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name, x, err := onnx.DecodeTensor(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	d, err := ir.ToDense(x)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return name, d
}

// BenchmarkRunTiny measures the per-run overhead of the host/backend round
// trip on a tiny model.
func BenchmarkRunTiny(b *testing.B) {
	dir := b.TempDir()
	data, err := onnx.Encode(tinyModel())
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := Open(context.Background(), path, Options{Logf: b.Logf})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	in, _ := tinyInputs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Run(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBackendExitsWithHost kills a host process and checks that its backend
// does not outlive it.
func TestBackendExitsWithHost(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), testHostEnv+"="+saveModel(t, tinyModel()))
	out, _ := cmd.Output() // the host dies by SIGKILL
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("host printed %q", out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("backend %d outlived its host", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// state is the field after "(comm)"
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// BenchmarkRunS003 measures the per-call floor on the tiny exported s003
// self-attention model (x float32[3×32]), through a backend process (the
// doorbell) and with the backend in process, with the outputs bound as
// `attnrun bench` binds them. It reports allocations per run: the host's
// (and, in process, the backend's) per-call garbage.
func BenchmarkRunS003(b *testing.B) {
	for _, c := range []struct {
		name      string
		inProcess bool
	}{{"process", false}, {"in-process", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(context.Background(), "../../models/s003_self_attention/model.onnx", Options{Logf: b.Logf, InProcess: c.inProcess, Threads: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			x := make([]float32, 3*32)
			for i := range x {
				x[i] = float32(i%7) * 0.25
			}
			in := map[string]*tensor.Dense{"x": dense([]int{3, 32}, x)}
			out, err := s.Run(context.Background(), in)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.RunWith(context.Background(), in, RunOptions{Into: out}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
