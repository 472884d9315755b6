package graph

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// TestPackedWeightsReleased: with Options.Weights (the backend's
// onnx.WeightStore over a model file whose 1 MiB weight is embedded), the
// weight is released once every reader of a plan holds it packed, and
// kept when anything else reads it (another op, a graph output, the
// unfused path). Runs on two shapes (two plans) agree with a program that
// releases nothing, and a released weight pinned later is read back from
// the file intact. Weights at offsets aligned for float32 are mapped, and
// keep their data (their pages are dropped); the others are released.
func TestPackedWeightsReleased(t *testing.T) {
	transB := &ir.Attribute{Name: "transB", Type: ir.AttrInt, Int: 1}
	mapped := map[bool]bool{}
	for _, c := range []struct {
		name     string
		nodes    []*ir.Node
		outputs  []string
		noFuse   bool
		released bool
	}{
		{"MatMul", []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"y"})}, []string{"y"}, false, true},
		{"Gemm transB with bias", []*ir.Node{node("Gemm", []string{"a", "w", "c"}, []string{"y"}, transB)}, []string{"y"}, false, true},
		{"two MatMuls", []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"h"}), node("MatMul", []string{"h", "w"}, []string{"y"})}, []string{"y"}, false, true},
		{"also read by Add", []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"y"}), node("Add", []string{"w", "w"}, []string{"z"})}, []string{"y", "z"}, false, false},
		{"also a graph output", []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"y"})}, []string{"y", "w"}, false, false},
		{"unfused", []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"y"})}, []string{"y"}, true, false},
	} {
		// Graph names of four lengths put w at offsets in the file
		// aligned for float32 (mapped) and not (read into memory).
		for _, gname := range []string{"g", "gx", "gxx", "gxxx"} {
			t.Run(c.name+"/"+gname, func(t *testing.T) {
				mapped[checkReleased(t, gname, c.nodes, c.outputs, c.noFuse, c.released)] = true
			})
		}
	}
	if !mapped[true] || !mapped[false] {
		t.Errorf("weights mapped: %v; the cases cover only one kind", mapped)
	}
}

// checkReleased runs one case of TestPackedWeightsReleased in a graph
// named gname, and reports whether the weight w was mapped.
func checkReleased(t *testing.T, gname string, nodes []*ir.Node, outputs []string, noFuse, released bool) bool {
	const k = 512 // w: 512×512 float32, 1 MiB: referenced into the file
	r := rand.New(rand.NewSource(7))
	w := randT(r, k, k)
	rows := &ir.ValueInfo{Name: "a", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Param: "N"}, {Value: k}}}}
	s := synth{inputs: []*ir.ValueInfo{rows}, inits: map[string]*ir.Tensor{"w": w, "c": randT(r, k)}, nodes: nodes, outputs: outputs}
	m := s.model()
	m.Graph.Name, m.Graph.InitializerOrder = gname, []string{"c", "w"}
	for _, o := range m.Graph.Outputs {
		o.Type = ir.TypeInfo{DType: ir.Float}
	}
	path := writeModelFile(t, m)
	load := func() *ir.Model {
		m, err := onnx.Load(path, onnx.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Graph.Initializers["w"].External == nil {
			t.Fatal("the weight is not referenced into the model file")
		}
		return m
	}
	ref, err := Compile(load(), Options{Threads: 2, NoFuse: noFuse})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	m = load()
	store, err := onnx.NewWeightStore(m)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	counted := &countingStore{WeightStore: store}
	p, err := Compile(m, Options{Threads: 2, NoFuse: noFuse, Weights: counted})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wt := m.Graph.Initializers["w"]
	isMapped := wt.External.Mapped
	run := func(n int, released bool) {
		t.Helper()
		var outs [2]map[string]*ir.Tensor
		in := map[string]*ir.Tensor{"a": randT(r, n, k)}
		for i, prog := range []*Program{ref, p} {
			if outs[i], err = prog.Run(context.Background(), in, RunOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if wt.Released() != released {
			t.Fatalf("after a run on %d rows: released %v, want %v", n, wt.Released(), released)
		}
		for _, name := range outputs {
			sameOutputs(t, outs[1][name], outs[0][name])
		}
	}
	heapReleased := released && !isMapped
	run(3, heapReleased)
	run(5, heapReleased) // a second plan: the weight found packed
	if want := map[bool]int64{true: 4 * k * k}[heapReleased]; p.ReleasedWeightBytes() != want {
		t.Fatalf("released %d bytes, want %d", p.ReleasedWeightBytes(), want)
	}
	if counted.restores != 0 {
		t.Fatalf("the second plan restored the weight %d times; it is packed", counted.restores)
	}
	if !heapReleased {
		return isMapped
	}
	// A later reader of another kind gets the weight back from the file.
	p.weightsMu.Lock()
	err = p.pinWeight(wt)
	p.weightsMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if wt.Released() || !slices.Equal(wt.Float32s(), w.Float32s()) {
		t.Fatal("the pinned weight does not hold its data again")
	}
	run(4, false)
	if p.ReleasedWeightBytes() != 0 {
		t.Fatalf("%d bytes still counted released after the restore", p.ReleasedWeightBytes())
	}
	return isMapped
}

// countingStore is the backend's onnx.WeightStore, counting restores.
type countingStore struct {
	*onnx.WeightStore
	restores int
}

func (s *countingStore) Restore(t *ir.Tensor) error {
	s.restores++
	return s.WeightStore.Restore(t)
}

// TestReferencedWeights: a model whose weight was loaded by reference
// (onnx.Options.ReferenceWeights) compiles reading nothing; its first run
// reads the weight back through Options.ReferencedWeights and computes
// what a program on the weight read at load does (the weight also read by
// an Add); without a restorer the run is refused with an error naming the
// weight.
func TestReferencedWeights(t *testing.T) {
	const k = 512 // w: 512×512 float32, 1 MiB (referencedModel)
	r := rand.New(rand.NewSource(9))
	nodes := []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"h"}), node("Add", []string{"h", "w"}, []string{"y"})}
	path := referencedModel(t, r, nodes)
	m, err := onnx.Load(path, onnx.Options{ReferenceWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"a": randT(r, k, k)} // rows k: h + w broadcasts
	bare, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Run(context.Background(), in, RunOptions{}); err == nil || !strings.Contains(err.Error(), `initializer "w" is held by reference`) {
		t.Errorf("a plan on a weight it cannot read back: %v, want an error naming the weight", err)
	}
	bare.Close()
	p, _, w := compileReferenced(t, path, nil)
	got, err := p.Run(context.Background(), in, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Released() {
		t.Fatal("the weight is still released after a run")
	}
	want, err := compileLoaded(t, path).Run(context.Background(), in, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameOutputs(t, got["y"], want["y"])
}

// failingRestorer is a WeightRestorer whose every read fails.
type failingRestorer struct{}

func (failingRestorer) Restore(t *ir.Tensor) error {
	return errors.New("the model file changed under the weights")
}

// TestPlanReadsBackOnlyValues: a plan that is only looked at (Fusions,
// Steps) reads back a weight held by reference only where the build
// computes with its values — a Transpose of it folded at plan time — and
// not one it only hands to a kernel (MatMul's B), and plans what it plans
// with the weight read back before the build; Run reads the rest back and
// computes what a program on the weight read at load does. A read back
// that fails fails the build (or the run) with its error, never a
// computation on a tensor without data.
func TestPlanReadsBackOnlyValues(t *testing.T) {
	const k = 512 // w: 512×512 float32, 1 MiB (referencedModel)
	for _, c := range []struct {
		name  string
		nodes []*ir.Node
		read  bool // the plan's build reads w back
	}{
		{"MatMul", []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"y"})}, false},
		{"Transpose folded", []*ir.Node{node("Transpose", []string{"w"}, []string{"wt"}), node("MatMul", []string{"a", "wt"}, []string{"y"})}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(11))
			in := map[string]*ir.Tensor{"a": randT(r, 3, k)}
			path := referencedModel(t, r, c.nodes)
			compile := func(restorer WeightRestorer) (*Program, *countingStore, *ir.Tensor) {
				return compileReferenced(t, path, restorer)
			}
			plan := func(p *Program) ([]Fusion, []*ir.Node) {
				t.Helper()
				fs, err := p.Fusions(in)
				if err != nil {
					t.Fatal(err)
				}
				steps, err := p.Steps(in)
				if err != nil {
					t.Fatal(err)
				}
				return fs, steps
			}

			failing, _, _ := compile(failingRestorer{})
			_, ferr := failing.Fusions(in)
			if c.read != (ferr != nil) || (ferr != nil && !strings.Contains(ferr.Error(), "the model file changed")) {
				t.Errorf("Fusions with a weight that cannot be read back: %v (the build reads it: %v)", ferr, c.read)
			}
			if _, rerr := failing.Run(context.Background(), in, RunOptions{}); rerr == nil || !strings.Contains(rerr.Error(), "the model file changed") {
				t.Errorf("a run whose weight cannot be read back: %v, want the restorer's error", rerr)
			}

			first, _, _ := compile(nil) // w read back before the plan's build
			if _, err := first.Const("w"); err != nil {
				t.Fatal(err)
			}
			wantFs, wantSteps := plan(first)

			p, counted, w := compile(nil)
			fs, steps := plan(p)
			if got := map[bool]int{true: 1}[c.read]; counted.restores != got || w.Released() == c.read {
				t.Fatalf("after Fusions and Steps: %d reads back, released %v; want %d", counted.restores, w.Released(), got)
			}
			if len(fs) != len(wantFs) || len(steps) != len(wantSteps) {
				t.Fatalf("%d fusions, %d steps; with w read back first %d, %d", len(fs), len(steps), len(wantFs), len(wantSteps))
			}
			for i := range fs {
				if fs[i].Describe() != wantFs[i].Describe() || !slices.Equal(fs[i].Node.Inputs, wantFs[i].Node.Inputs) {
					t.Errorf("fusion %d: %s %q; with w read back first %s %q", i, fs[i].Describe(), fs[i].Node.Inputs, wantFs[i].Describe(), wantFs[i].Node.Inputs)
				}
			}
			for i := range steps {
				if steps[i].QualifiedOp() != wantSteps[i].QualifiedOp() || !slices.Equal(steps[i].Inputs, wantSteps[i].Inputs) {
					t.Errorf("step %d: %s %q; with w read back first %s %q", i, steps[i].QualifiedOp(), steps[i].Inputs, wantSteps[i].QualifiedOp(), wantSteps[i].Inputs)
				}
			}

			got, err := p.Run(context.Background(), in, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if counted.restores != 1 || w.Released() {
				t.Fatalf("after a run: %d reads back, released %v; want 1, false", counted.restores, w.Released())
			}
			want, err := compileLoaded(t, path).Run(context.Background(), in, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameOutputs(t, got["y"], want["y"])
		})
	}
}

// referencedModel writes a model of nodes over input a: float32[N, 512]
// and a 512×512 float32 initializer w (1 MiB) that the loader holds by
// reference (at an offset not aligned for float32), computing output y.
func referencedModel(t *testing.T, r *rand.Rand, nodes []*ir.Node) string {
	t.Helper()
	const k = 512
	rows := &ir.ValueInfo{Name: "a", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Param: "N"}, {Value: k}}}}
	for _, gname := range []string{"g", "gx", "gxx", "gxxx"} {
		s := synth{inputs: []*ir.ValueInfo{rows}, inits: map[string]*ir.Tensor{"w": randT(r, k, k)}, nodes: nodes, outputs: []string{"y"}}
		m := s.model()
		m.Graph.Name = gname
		m.Graph.Outputs[0].Type = ir.TypeInfo{DType: ir.Float}
		path := writeModelFile(t, m)
		if m, err := onnx.Load(path, onnx.Options{ReferenceWeights: true}); err != nil {
			t.Fatal(err)
		} else if m.Graph.Initializers["w"].Released() {
			return path
		}
	}
	t.Fatal("no graph name put the weight at an unaligned offset")
	return ""
}

// compileReferenced compiles the model at path loaded with its weights by
// reference, read back through a countingStore (or restorer, when set);
// it returns the program, the store and the weight w.
func compileReferenced(t *testing.T, path string, restorer WeightRestorer) (*Program, *countingStore, *ir.Tensor) {
	t.Helper()
	m, err := onnx.Load(path, onnx.Options{ReferenceWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	store, err := onnx.NewWeightStore(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	counted := &countingStore{WeightStore: store}
	if restorer == nil {
		restorer = counted
	}
	p, err := Compile(m, Options{Threads: 2, ReferencedWeights: restorer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, counted, m.Graph.Initializers["w"]
}

// compileLoaded compiles the model at path loaded with every weight in
// memory.
func compileLoaded(t *testing.T, path string) *Program {
	t.Helper()
	m, err := onnx.Load(path, onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestReferencedWeightsConcurrent: plans built for looking at (which may
// read weights back), runs and Const on one program at once agree with
// each other (run with -race: reading a weight back is under the
// program's weights lock).
func TestReferencedWeightsConcurrent(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	nodes := []*ir.Node{node("Transpose", []string{"w"}, []string{"wt"}), node("MatMul", []string{"a", "wt"}, []string{"h"}), node("MatMul", []string{"h", "w"}, []string{"y"})}
	path := referencedModel(t, r, nodes)
	p, counted, w := compileReferenced(t, path, nil)
	ins := make([]map[string]*ir.Tensor, 6)
	for i := range ins {
		ins[i] = map[string]*ir.Tensor{"a": randT(r, i+1, 512)}
	}
	var wg sync.WaitGroup
	outs := make([]*ir.Tensor, len(ins))
	errs := make([]error, len(ins))
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % 3 {
			case 0:
				_, errs[i] = p.Fusions(in)
			case 1:
				_, errs[i] = p.Const("w")
			}
			out, err := p.Run(context.Background(), in, RunOptions{})
			if errs[i] == nil {
				errs[i] = err
			}
			if err == nil {
				outs[i] = out["y"]
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if counted.restores != 1 || w.Released() {
		t.Fatalf("%d reads back of w, released %v; want 1, false", counted.restores, w.Released())
	}
	loaded := compileLoaded(t, path)
	for i, in := range ins {
		want, err := loaded.Run(context.Background(), in, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sameOutputs(t, outs[i], want["y"])
	}
}

// writeModelFile encodes m into model.onnx in a new temporary directory
// and returns its path.
func writeModelFile(t *testing.T, m *ir.Model) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.onnx")
	data, err := onnx.Encode(m)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}
