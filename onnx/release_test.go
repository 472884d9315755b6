package onnx

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestWeightStore: embedded weights of 1 MiB or more at offsets not
// aligned for float32 (read into memory) are released, their heap bytes
// counted, and restored from the file byte for byte; mapped ones keep
// their data (their pages are dropped, and read back on the next touch);
// small ones are kept.
func TestWeightStore(t *testing.T) {
	const n = 1 << 18 // 1 MiB of float32
	big := make([]float32, n)
	for i := range big {
		big[i] = float32(i%1000) * 0.25
	}
	small := []float32{1, 2, 3}
	seen := map[bool]bool{}
	// Graph names of four lengths shift the weights' offsets in the file.
	for _, gname := range []string{"g", "gx", "gxx", "gxxx"} {
		g := &ir.Graph{Name: gname, Initializers: map[string]*ir.Tensor{
			"big": ir.FromSlice([]int{n}, slices.Clone(big)), "small": ir.FromSlice([]int{3}, slices.Clone(small)),
		}, InitializerOrder: []string{"small", "big"}}
		g.Nodes = []*ir.Node{{Name: "add", OpType: "Add", Inputs: []string{"big", "small"}, Outputs: []string{"y"}}}
		g.Outputs = []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float}}}
		data, err := Encode(&ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g})
		path := filepath.Join(t.TempDir(), "model.onnx")
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewWeightStore(m)
		if err != nil {
			t.Fatal(err)
		}
		bt, st := m.Graph.Initializers["big"], m.Graph.Initializers["small"]
		if bt.External == nil {
			t.Fatal("the 1 MiB weight is not referenced into the file")
		}
		seen[bt.External.Mapped] = true
		for _, c := range []struct {
			t     *ir.Tensor
			want  []float32
			freed int64
		}{{bt, big, map[bool]int64{false: 4 * n}[bt.External.Mapped]}, {st, small, 0}} {
			freed, err := s.Release(c.t)
			if err != nil {
				t.Fatal(err)
			}
			if freed != c.freed || c.t.Released() != (c.freed > 0) {
				t.Fatalf("%s: Release freed %d bytes (released %v), want %d", gname, freed, c.t.Released(), c.freed)
			}
			if err := s.Restore(c.t); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.t.Float32s(), c.want) {
				t.Fatalf("%s: the weight's data after Release and Restore differs", gname)
			}
		}
		s.Close()
	}
	if !seen[true] || !seen[false] {
		t.Errorf("weights mapped: %v; the cases cover only one kind", seen)
	}
}
