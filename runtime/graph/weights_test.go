package graph

import (
	"context"
	"math"
	"math/rand"
	"os"
	"path/filepath"
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
		// Names of four lengths put w at offsets aligned for float32
		// (mapped) and not (read into memory).
		for _, wname := range []string{"w", "wx", "wxx", "wxxx"} {
			t.Run(c.name+"/"+wname, func(t *testing.T) {
				rename := func(names []string) []string {
					out := append([]string(nil), names...)
					for i, n := range out {
						if n == "w" {
							out[i] = wname
						}
					}
					return out
				}
				var nodes []*ir.Node
				for _, n := range c.nodes {
					cp := *n
					cp.Inputs = rename(n.Inputs)
					nodes = append(nodes, &cp)
				}
				wasMapped := checkReleased(t, nodes, rename(c.outputs), wname, c.noFuse, c.released)
				mapped[wasMapped] = true
			})
		}
	}
	if !mapped[true] || !mapped[false] {
		t.Errorf("weights mapped: %v; the cases cover only one kind", mapped)
	}
}

// checkReleased runs one case of TestPackedWeightsReleased, the weight
// named wname, and reports whether the weight was mapped.
func checkReleased(t *testing.T, nodes []*ir.Node, outputs []string, wname string, noFuse, released bool) bool {
	const k = 512 // w: 512×512 float32, 1 MiB: referenced into the file
	r := rand.New(rand.NewSource(7))
	w := randT(r, k, k)
	rows := &ir.ValueInfo{Name: "a", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Param: "N"}, {Value: k}}}}
	s := synth{inputs: []*ir.ValueInfo{rows}, inits: map[string]*ir.Tensor{wname: w, "c": randT(r, k)}, nodes: nodes, outputs: outputs}
	m := s.model()
	for _, o := range m.Graph.Outputs {
		o.Type = ir.TypeInfo{DType: ir.Float}
	}
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	load := func() *ir.Model {
		m, err := onnx.Load(path, onnx.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Graph.Initializers[wname].External == nil {
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
	p, err := Compile(m, Options{Threads: 2, NoFuse: noFuse, Weights: store})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wt := m.Graph.Initializers[wname]
	isMapped := wt.External.Mapped
	run := func(n int, released bool) {
		t.Helper()
		in := map[string]*ir.Tensor{"a": randT(r, n, k)}
		want, err := ref.Run(context.Background(), in, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Run(context.Background(), in, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if wt.Released() != released {
			t.Fatalf("after a run on %d rows: released %v, want %v", n, wt.Released(), released)
		}
		for _, name := range outputs {
			if d := maxAbsDiff(got[name].Float32s(), want[name].Float32s()); d > 1e-4 {
				t.Fatalf("%d rows: %s differs from the unreleased program's by %g", n, name, d)
			}
		}
	}
	heapReleased := released && !isMapped
	run(3, heapReleased)
	run(5, heapReleased) // a second plan: the weight found packed
	if want := map[bool]int64{true: 4 * k * k}[heapReleased]; p.ReleasedWeightBytes() != want {
		t.Fatalf("released %d bytes, want %d", p.ReleasedWeightBytes(), want)
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
	if wt.Released() || maxAbsDiff(wt.Float32s(), w.Float32s()) != 0 {
		t.Fatal("the pinned weight does not hold its data again")
	}
	run(4, false)
	if p.ReleasedWeightBytes() != 0 {
		t.Fatalf("%d bytes still counted released after the restore", p.ReleasedWeightBytes())
	}
	return isMapped
}

// maxAbsDiff is the largest |a[i]-b[i]|; +Inf when the lengths differ.
func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
