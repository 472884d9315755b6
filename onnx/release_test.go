package onnx

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ir"
)

// TestWeightStore: embedded weights of 1 MiB or more at offsets not
// aligned for float32 (read into memory) are released, their heap bytes
// counted, and restored from the file byte for byte; mapped ones keep
// their data (their pages are dropped, and read back on the next touch);
// small ones are kept.
func TestWeightStore(t *testing.T) {
	small := []float32{1, 2, 3}
	seen := map[bool]bool{}
	// Graph names of four lengths shift the weights' offsets in the file.
	for _, gname := range []string{"g", "gx", "gxx", "gxxx"} {
		path, big := writeTwoWeights(t, gname)
		n := int64(len(big))
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

// writeTwoWeights writes a model named gname holding a 1 MiB float32
// weight "big" (its offset in the file shifts with the name's length) and
// a small one, and returns its path and big's values.
func writeTwoWeights(t *testing.T, gname string) (string, []float32) {
	t.Helper()
	const n = 1 << 18 // 1 MiB of float32
	big := make([]float32, n)
	for i := range big {
		big[i] = float32(i%1000) * 0.25
	}
	g := &ir.Graph{Name: gname, Initializers: map[string]*ir.Tensor{
		"big": ir.FromSlice([]int{n}, slices.Clone(big)), "small": ir.FromSlice([]int{3}, []float32{1, 2, 3}),
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
	return path, big
}

// TestReferenceWeights: with Options.ReferenceWeights, a 1 MiB float32
// weight that cannot be mapped is loaded by reference (released, nothing
// read), one that can is mapped as before, and a small one is read; a
// WeightStore reads the released one back byte for byte, also after the
// file was removed (the store holds it open); Encode refuses it with an
// error saying where it is, EncodeExternal refers to it. A file written in
// place fails Restore with an error naming the weight and the file.
func TestReferenceWeights(t *testing.T) {
	seen := map[bool]bool{}
	for _, gname := range []string{"g", "gx", "gxx", "gxxx"} {
		path, big := writeTwoWeights(t, gname)
		m, err := Load(path, Options{ReferenceWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		bt, st := m.Graph.Initializers["big"], m.Graph.Initializers["small"]
		if bt.External == nil || st.Released() || !slices.Equal(st.Float32s(), []float32{1, 2, 3}) {
			t.Fatalf("%s: big referenced %v, small released %v", gname, bt.External != nil, st.Released())
		}
		mapped := bt.External.Mapped
		seen[mapped] = true
		if bt.Released() == mapped {
			t.Fatalf("%s: mapped %v, released %v: a weight that cannot be mapped is released, a mapped one is not", gname, mapped, bt.Released())
		}
		if mapped {
			continue
		}
		if _, err := Encode(m); err == nil || !strings.Contains(err.Error(), `initializer "big"`) || !strings.Contains(err.Error(), "model.onnx") {
			t.Errorf("%s: Encode of a released weight: %v, want an error naming it and its file", gname, err)
		}
		if _, _, err := EncodeExternal(m); err != nil {
			t.Errorf("%s: EncodeExternal: %v", gname, err)
		}
		s, err := NewWeightStore(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := s.Restore(bt); err != nil {
			t.Fatalf("%s: restoring after the file was removed: %v", gname, err)
		}
		if !slices.Equal(bt.Float32s(), big) {
			t.Fatalf("%s: the restored weight differs from the one written", gname)
		}
		s.Close()

		// Written in place after loading (cp over it): a new length.
		path, _ = writeTwoWeights(t, gname)
		m, err = Load(path, Options{ReferenceWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		if s, err = NewWeightStore(m); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := os.WriteFile(path, []byte("not the model any more"), 0o644); err != nil {
			t.Fatal(err)
		}
		err = s.Restore(m.Graph.Initializers["big"])
		if err == nil || !strings.Contains(err.Error(), `weight "big"`) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "changed since the model was loaded") {
			t.Errorf("%s: restoring from a file written in place: %v, want an error naming the weight and the file", gname, err)
		}
	}
	if !seen[true] || !seen[false] {
		t.Errorf("weights mapped: %v; the cases cover only one kind", seen)
	}
}

// TestReferenceWeightsSameSize: a file rewritten in place with bytes of
// the same length is caught by its modification time.
func TestReferenceWeightsSameSize(t *testing.T) {
	for _, gname := range []string{"g", "gx", "gxx", "gxxx"} {
		path, _ := writeTwoWeights(t, gname)
		m, err := Load(path, Options{ReferenceWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		bt := m.Graph.Initializers["big"]
		if !bt.Released() {
			continue // mapped
		}
		s, err := NewWeightStore(m)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		before, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[bt.External.Offset] ^= 0xff
		// The file system's clock may tick coarsely: write until the
		// modification time moves (at most a few rounds of its tick).
		for i := 0; ; i++ {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if st, err := os.Stat(path); err != nil {
				t.Fatal(err)
			} else if !st.ModTime().Equal(before.ModTime()) {
				break
			}
			if i == 1000 {
				t.Skip("the file's modification time does not move")
			}
			time.Sleep(time.Millisecond)
		}
		err = s.Restore(bt)
		if err == nil || !strings.Contains(err.Error(), `weight "big"`) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: restoring from a file rewritten in place: %v, want an error naming the weight and the file", gname, err)
		}
		return
	}
	t.Fatal("no graph name put the weight at an unaligned offset")
}
