package graph

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// (onnx.Options.ReferenceWeights) compiles reading nothing; its first plan
// reads the weight back through Options.ReferencedWeights and runs as a
// program on the weight read at load does (the weight also read by an
// Add); without a restorer the plan is refused with an error naming the
// weight.
func TestReferencedWeights(t *testing.T) {
	const k = 512 // w: 512×512 float32, 1 MiB
	r := rand.New(rand.NewSource(9))
	rows := &ir.ValueInfo{Name: "a", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Param: "N"}, {Value: k}}}}
	nodes := []*ir.Node{node("MatMul", []string{"a", "w"}, []string{"h"}), node("Add", []string{"h", "w"}, []string{"y"})}
	released := false
	for _, gname := range []string{"g", "gx", "gxx", "gxxx"} {
		s := synth{inputs: []*ir.ValueInfo{rows}, inits: map[string]*ir.Tensor{"w": randT(r, k, k)}, nodes: nodes, outputs: []string{"y"}}
		m := s.model()
		m.Graph.Name = gname
		m.Graph.Outputs[0].Type = ir.TypeInfo{DType: ir.Float}
		path := writeModelFile(t, m)
		ref, err := onnx.Load(path, onnx.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if m, err = onnx.Load(path, onnx.Options{ReferenceWeights: true}); err != nil {
			t.Fatal(err)
		}
		if !m.Graph.Initializers["w"].Released() {
			continue // mapped
		}
		released = true
		in := map[string]*ir.Tensor{"a": randT(r, k, k)} // rows k: h + w broadcasts
		bare, err := Compile(m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bare.Run(context.Background(), in, RunOptions{}); err == nil || !strings.Contains(err.Error(), `initializer "w" is held by reference`) {
			t.Errorf("a plan on a weight it cannot read back: %v, want an error naming the weight", err)
		}
		bare.Close()
		store, err := onnx.NewWeightStore(m)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		var outs [2]map[string]*ir.Tensor
		for i, c := range []struct {
			m    *ir.Model
			opts Options
		}{{ref, Options{Threads: 2}}, {m, Options{Threads: 2, ReferencedWeights: store}}} {
			p, err := Compile(c.m, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if outs[i], err = p.Run(context.Background(), in, RunOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if m.Graph.Initializers["w"].Released() {
			t.Fatal("the weight is still released after a run")
		}
		sameOutputs(t, outs[1]["y"], outs[0]["y"])
	}
	if !released {
		t.Fatal("no graph name put the weight at an unaligned offset")
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
