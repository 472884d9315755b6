package session

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/budget"
)

// TestInProcessOption runs the tiny model with the CPU backend inside this
// process: it reports the host's pid, computes the same results (plain and
// bound outputs), honours a cancelled context, still takes the CPU backend's
// fallback nodes from a plugin running in its own process (logged as
// usual), and refuses runs once closed.
func TestInProcessOption(t *testing.T) {
	s, _ := openTiny(t, Options{InProcess: true})
	bs := s.Backends()
	if len(bs) != 1 || bs[0].Name != CPU || bs[0].Pid != os.Getpid() || bs[0].Details["in_process"] != "true" || !bs[0].Available {
		t.Fatalf("backends %+v, want the cpu backend in this process (pid %d)", bs, os.Getpid())
	}
	in, want := tinyInputs()
	out, err := s.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y", out["y"], []int{2, 3}, want, 1e-6)
	y := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(make([]float32, 6)))
	out, err = s.RunWith(context.Background(), in, RunOptions{Into: map[string]*tensor.Dense{"y": y}})
	if err != nil {
		t.Fatal(err)
	}
	if out["y"] != y {
		t.Error("the bound output is not the bound tensor")
	}
	checkClose(t, "bound y", y, []int{2, 3}, want, 1e-6)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, in); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v, want an error matching context.Canceled", err)
	}

	p, logs := openTiny(t, Options{Backend: "picky", PluginDir: pluginDir(t), InProcess: true})
	bs = p.Backends()
	if len(bs) != 2 || bs[0].Name != "picky" || bs[0].Pid == os.Getpid() || bs[1].Name != CPU || bs[1].Pid != os.Getpid() {
		t.Errorf("backends %+v: want picky in a process, cpu in this one", bs)
	}
	if !strings.Contains(logs.String(), `node "/Softmax" (Softmax) falls back from backend "picky" to "cpu"`) {
		t.Errorf("fallback not logged; log:\n%s", logs)
	}
	out, err = p.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y with fallback", out["y"], []int{2, 3}, want, 1e-6)

	s.Close()
	if _, err := s.Run(context.Background(), in); err == nil || !strings.Contains(err.Error(), "session is closed") {
		t.Errorf("run after Close: %v", err)
	}
}

// TestInProcessBudget: the in-process backend keeps to Options.MaxMemoryBytes
// as a backend process does: the shape bomb (two ConstantOfShape of a shape
// read from an input, then their sum) asking for 3 × 64 MiB in a 160 MiB
// budget is refused when planned, naming the node and the budget, and a
// small shape runs.
func TestInProcessBudget(t *testing.T) {
	one := ir.FromSlice([]int{1}, []float32{1})
	fill := []*ir.Attribute{{Name: "value", Type: ir.AttrTensor, Tensor: one}}
	m := &ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: &ir.Graph{
		Name:   "bomb",
		Inputs: []*ir.ValueInfo{{Name: "s", Type: ir.TypeInfo{DType: ir.Int64, RankKnown: true, Shape: ir.ShapeOf([]int{1})}}},
		Nodes: []*ir.Node{
			{Name: "/a", OpType: "ConstantOfShape", Inputs: []string{"s"}, Outputs: []string{"a"}, Attrs: fill},
			{Name: "/b", OpType: "ConstantOfShape", Inputs: []string{"s"}, Outputs: []string{"b"}, Attrs: fill},
			{Name: "/Add", OpType: "Add", Inputs: []string{"a", "b"}, Outputs: []string{"y"}},
		},
		Outputs:      []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float}}},
		Initializers: map[string]*ir.Tensor{},
	}}
	s, err := OpenModel(context.Background(), m, Options{InProcess: true, MaxMemoryBytes: 160 << 20, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Run(context.Background(), map[string]*tensor.Dense{"s": dense([]int{1}, []int64{16 << 20})})
	if !errors.Is(err, budget.ErrExceeded) || !strings.Contains(err.Error(), `node "/Add" (Add)`) || !strings.Contains(err.Error(), "Options.MaxMemoryBytes 160 MiB") {
		t.Errorf("3 × 64 MiB in a 160 MiB budget: %v, want the budget's refusal at /Add", err)
	}
	t.Logf("refused: %v", err)
	out, err := s.Run(context.Background(), map[string]*tensor.Dense{"s": dense([]int{1}, []int64{5})})
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y", out["y"], []int{5}, []float32{2, 2, 2, 2, 2}, 0)
}
