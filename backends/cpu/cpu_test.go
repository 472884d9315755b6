package cpu

import (
	"context"
	"errors"
	"math"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/budget"
)

func newServer(t *testing.T) *Server {
	t.Helper()
	t.Setenv(plugins.StatusFDEnv, "")
	t.Setenv(FaultEnv, "")
	s, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCapability(t *testing.T) {
	s := newServer(t)
	qs := []plugins.NodeQuery{
		{Name: "a", OpType: "MatMul", Opset: 17, InputDTypes: []ir.DType{ir.Float, ir.Float}},
		{Name: "b", OpType: "MatMul", Opset: 17, InputDTypes: []ir.DType{ir.Bool, ir.Bool}},
		{Name: "c", OpType: "NoSuchOp", Opset: 17},
		{Name: "d", OpType: "MatMul", Opset: 99, InputDTypes: []ir.DType{ir.Float, ir.Float}},
		{Name: "e", OpType: "X", Domain: "com.example", Opset: 1},
		{Name: "f", OpType: "Shape", Opset: 17, InputDTypes: []ir.DType{ir.String}},
		{Name: "g", OpType: "MatMul", Opset: 17, InputDTypes: []ir.DType{ir.Undefined, ir.Float}},
	}
	want := []plugins.Verdict{
		{Accepted: true},
		{Reason: "MatMul does not take bool at input 0"},
		{Reason: "unsupported op NoSuchOp"},
		{Reason: "unsupported opset version: MatMul at opset 99 (attnrun covers opsets 1 to 27)"},
		{Reason: `unknown op domain "com.example" (op X)`},
		{Accepted: true},
		{Accepted: true},
	}
	got, err := s.Capability(context.Background(), qs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("verdicts\n%+v\nwant\n%+v", got, want)
	}
}

func TestFaults(t *testing.T) {
	cases := []struct {
		in   string
		want faults
		err  string
	}{
		{"", faults{refuse: map[string]bool{}}, ""},
		{"exit-before:Softmax", faults{exitBefore: "Softmax", refuse: map[string]bool{}}, ""},
		{"kill-before:MatMul; refuse:Add,Mul", faults{killBefore: "MatMul", refuse: map[string]bool{"Add": true, "Mul": true}}, ""},
		{"stop-before:Softmax;stop-in:Info", faults{stopBefore: "Softmax", stopIn: "Info", refuse: map[string]bool{}}, ""},
		{"refuse", faults{}, `ATTNRUN_CPU_FAULT: "refuse" is not kind:argument`},
		{"leak:65536", faults{leak: 65536, refuse: map[string]bool{}}, ""},
		{"leak:-3", faults{}, `ATTNRUN_CPU_FAULT: leak:-3 is not a positive byte count`},
		{"explode:Add", faults{}, `ATTNRUN_CPU_FAULT: unknown hook "explode" (want exit-before, kill-before, stop-before, stop-in, refuse or leak)`},
	}
	for _, c := range cases {
		got, err := parseFaults(c.in)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	t.Setenv(FaultEnv, "refuse:Softmax")
	s, err := NewServer()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := s.Capability(context.Background(), []plugins.NodeQuery{{OpType: "Softmax", Opset: 17, InputDTypes: []ir.DType{ir.Float}}})
	if v[0].Accepted || v[0].Reason != "refused by ATTNRUN_CPU_FAULT" {
		t.Errorf("refuse hook: %+v", v[0])
	}
}

func TestInfo(t *testing.T) {
	s := newServer(t)
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "cpu" || info.Version != Version || info.ProtocolVersion != plugins.ProtocolVersion {
		t.Errorf("info %+v", info)
	}
	if rss := info.Details["max_rss_bytes"]; rss == "" || rss == "0" || strings.HasPrefix(rss, "-") {
		t.Errorf("max_rss_bytes %q", rss)
	}
	if b := info.Details["blas"]; b != "go" && b != "openblas" {
		t.Errorf("blas %q", b)
	}
	if k := info.Details["kernels"]; k != ops.KernelSet() || k == "" {
		t.Errorf("kernels %q, want %q", k, ops.KernelSet())
	}
	found := false
	for _, op := range info.Ops {
		if op.OpType == "MatMul" && op.Since <= 17 && 17 <= op.Until {
			found = true
			if !reflect.DeepEqual(op.DTypes, []ir.DType{ir.Float, ir.Double, ir.Float16, ir.Int32, ir.Int64, ir.Uint32, ir.Uint64}) {
				t.Errorf("MatMul dtypes %v", op.DTypes)
			}
		}
	}
	if !found {
		t.Error("MatMul at opset 17 not listed")
	}
}

func TestCompileRunRelease(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	m := &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Nodes: []*ir.Node{
				{OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"m"}},
				{Name: "sm", OpType: "Softmax", Inputs: []string{"m"}, Outputs: []string{"y"}},
			},
			Inputs:           []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Param: "n"}, {Value: 2}}, RankKnown: true}}},
			Outputs:          []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Param: "n"}, {Value: 2}}, RankKnown: true}}},
			Initializers:     map[string]*ir.Tensor{"W": ir.FromSlice([]int{2, 2}, []float32{1, 0, 0, 2})},
			InitializerOrder: []string{"W"},
		},
	}
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	id, nodes, err := s.Compile(ctx, data, plugins.CompileOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := []plugins.NodeRef{{Name: "MatMul→m", OpType: "MatMul"}, {Name: "sm", OpType: "Softmax"}}
	if !reflect.DeepEqual(nodes, wantNodes) {
		t.Errorf("nodes %+v, want %+v", nodes, wantNodes)
	}
	out, err := s.Run(ctx, id, map[string]*ir.Tensor{"x": ir.FromSlice([]int{1, 2}, []float32{1, 1})})
	if err != nil {
		t.Fatal(err)
	}
	// softmax([1, 2]) = [1/(1+e), e/(1+e)]
	e := math.E
	y := out["y"].Float32s()
	if len(y) != 2 || math.Abs(float64(y[0])-1/(1+e)) > 1e-6 || math.Abs(float64(y[1])-e/(1+e)) > 1e-6 {
		t.Errorf("y = %v", y)
	}
	st, _ := s.Stats(ctx)
	if st.Runs != 1 || st.Partitions != 1 || st.MaxRSSBytes <= 0 {
		t.Errorf("stats %+v", st)
	}
	if err := s.Release(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, id); err == nil || err.Error() != "cpu backend: no partition 0" {
		t.Errorf("second release: %v", err)
	}
	if _, err := s.Run(ctx, id, nil); err == nil || err.Error() != "cpu backend: no partition 0" {
		t.Errorf("run after release: %v", err)
	}
	if _, _, err := s.Compile(ctx, []byte("garbage"), plugins.CompileOptions{}); err == nil || !strings.HasPrefix(err.Error(), "cpu backend: decoding partition: ") {
		t.Errorf("garbage partition: %v", err)
	}
}

// TestCompileSetsThreads checks that CompileOptions.Threads (attnrun
// --threads) reaches the process-wide GEMM thread count; 0 leaves it as is.
func TestCompileSetsThreads(t *testing.T) {
	defer blas.SetThreads(0)
	s := newServer(t)
	m := &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Nodes:   []*ir.Node{{Name: "neg", OpType: "Neg", Inputs: []string{"x"}, Outputs: []string{"y"}}},
			Inputs:  []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 2}}, RankKnown: true}}},
			Outputs: []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 2}}, RankKnown: true}}},
		},
	}
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ threads, want int }{{3, 3}, {0, 3}, {1, 1}} {
		if _, _, err := s.Compile(context.Background(), data, plugins.CompileOptions{Threads: c.threads}); err != nil {
			t.Fatal(err)
		}
		if got := blas.Threads(); got != c.want {
			t.Errorf("after Compile with Threads %d: blas.Threads() = %d, want %d", c.threads, got, c.want)
		}
	}
}

// TestCompilePrecision checks CompileOptions.Precision, through Compile in
// a backend process's server and CompileModel in an in-process one: bf16
// products on a CPU with AVX512_BF16, a one-line refusal without it, and
// an error for an unknown precision.
func TestCompilePrecision(t *testing.T) {
	ctx := context.Background()
	// y = x·W with W's entries 1 + 2^-12: bf16 rounds them to 1.
	w := float32(1 + 1.0/4096)
	m := &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Nodes:            []*ir.Node{{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"y"}}},
			Inputs:           []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 1}, {Value: 2}}, RankKnown: true}}},
			Outputs:          []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 1}, {Value: 2}}, RankKnown: true}}},
			Initializers:     map[string]*ir.Tensor{"W": ir.FromSlice([]int{2, 2}, []float32{w, w, w, w})},
			InitializerOrder: []string{"W"},
		},
	}
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	x := map[string]*ir.Tensor{"x": ir.FromSlice([]int{1, 2}, []float32{1, 1})}
	for _, srv := range []struct {
		name    string
		s       *Server
		compile func(s *Server, opts plugins.CompileOptions) (plugins.PartitionID, []plugins.NodeRef, error)
	}{
		{"Compile", newServer(t), func(s *Server, opts plugins.CompileOptions) (plugins.PartitionID, []plugins.NodeRef, error) {
			return s.Compile(ctx, data, opts)
		}},
		{"CompileModel in process", NewInProcessServer(nil, nil), func(s *Server, opts plugins.CompileOptions) (plugins.PartitionID, []plugins.NodeRef, error) {
			return s.CompileModel(ctx, m, opts)
		}},
	} {
		t.Run(srv.name, func(t *testing.T) {
			s := srv.s
			if s.bf16 != blas.BF16Fast() {
				t.Errorf("bf16 %v, but blas.BF16Fast() is %v", s.bf16, blas.BF16Fast())
			}
			for _, c := range []struct {
				precision string
				want      float32
			}{{"", 2 * w}, {"fp32", 2 * w}, {"bf16", 2}} {
				id, _, err := srv.compile(s, plugins.CompileOptions{Threads: 1, Precision: c.precision})
				if c.precision == "bf16" && !s.bf16 {
					if err == nil || !strings.Contains(err.Error(), "AVX512_BF16") {
						t.Errorf("bf16 on a CPU without AVX512_BF16: %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("precision %q: %v", c.precision, err)
				}
				out, err := s.Run(ctx, id, x)
				if err != nil {
					t.Fatal(err)
				}
				if y := out["y"].Float32s(); y[0] != c.want || y[1] != c.want {
					t.Errorf("precision %q: y = %v, want [%g %g]", c.precision, y, c.want, c.want)
				}
			}
			s.bf16 = false // as on a CPU without AVX512_BF16
			_, _, err = srv.compile(s, plugins.CompileOptions{Precision: "bf16"})
			if want := "cpu backend: precision bf16 needs a CPU with AVX512_BF16 (bfloat16 dot products); this one has none, use fp32"; err == nil || err.Error() != want {
				t.Errorf("bf16 without AVX512_BF16: %v, want %q", err, want)
			}
			if _, _, err := srv.compile(s, plugins.CompileOptions{Precision: "fp16"}); err == nil || !strings.Contains(err.Error(), `unknown precision "fp16"`) {
				t.Errorf("precision fp16: %v", err)
			}
		})
	}
}

// TestInProcessBudget: an in-process server keeps its partitions within
// the session's budget (a model whose weights do not fit is refused,
// naming the budget), as a backend process does, and leaves Go's soft
// memory limit, which is the host program's, as it was.
func TestInProcessBudget(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	s := NewInProcessServer(nil, nil)
	const n = 512 // a 1 MiB weight
	m := &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Nodes:            []*ir.Node{{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"y"}}},
			Inputs:           []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 1}, {Value: n}}, RankKnown: true}}},
			Outputs:          []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 1}, {Value: n}}, RankKnown: true}}},
			Initializers:     map[string]*ir.Tensor{"W": ir.FromSlice([]int{n, n}, make([]float32, n*n))},
			InitializerOrder: []string{"W"},
		},
	}
	ctx := context.Background()
	_, _, err := s.CompileModel(ctx, m, plugins.CompileOptions{MaxMemoryBytes: 512 << 10})
	if !errors.Is(err, budget.ErrExceeded) || !strings.Contains(err.Error(), budget.LimitName) {
		t.Errorf("1 MiB of weights in a 512 KiB budget: %v, want the budget's refusal", err)
	}
	if _, _, err := s.CompileModel(ctx, m, plugins.CompileOptions{MaxMemoryBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := s.budget.Limit(); got != 64<<20 {
		t.Errorf("budget limit %d, want 64 MiB", got)
	}
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Errorf("Go's memory limit changed from %d to %d: it is the host's", before, after)
	}
}
