package onnx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// embeddedModel writes dir/model.onnx: y = x + w, w a float32 initializer of
// n elements embedded as raw_data under the given name, and b a small one.
// The graph's name is name too, which moves w's bytes in the file.
func embeddedModel(t *testing.T, dir, name string, n int) (string, []float32) {
	t.Helper()
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(i%1000) - 0.5
	}
	g := &ir.Graph{
		Name:         name,
		Initializers: map[string]*ir.Tensor{name: ir.FromSlice([]int{n}, w), "b": ir.FromSlice([]int{2}, []float32{1, 2})},
		Inputs:       []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.ShapeOf([]int{n})}}},
		Outputs:      []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.ShapeOf([]int{n})}}},
		Nodes:        []*ir.Node{{Name: "/Add", OpType: "Add", Inputs: []string{"x", name}, Outputs: []string{"y"}}},
	}
	data, err := Encode(&ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, w
}

// TestEmbeddedReferenced: a large initializer embedded in the model file
// loads with the file's values, remembers where its bytes are in the model
// file (so EncodeExternal sends a reference, not 3 MiB), whether its offset
// is aligned for float32 (mapped) or not (read once); small ones stay
// embedded.
func TestEmbeddedReferenced(t *testing.T) {
	const n = 3 << 18
	aligned := map[bool]bool{}
	for _, name := range []string{"w", "ww", "www", "wwww"} {
		dir := t.TempDir()
		path, want := embeddedModel(t, dir, name, n)
		m, err := Load(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := m.Graph.Initializers[name]
		got := w.Float32s()
		if len(got) != n || got[0] != want[0] || got[n-1] != want[n-1] || got[n/2] != want[n/2] {
			t.Fatalf("%s: values differ from the file's", name)
		}
		if w.External == nil || w.External.Location != "model.onnx" || w.External.Length != 4*n {
			t.Fatalf("%s: external %+v, want a reference into model.onnx", name, w.External)
		}
		aligned[w.External.Offset%4 == 0] = true
		if b := m.Graph.Initializers["b"]; b.External != nil {
			t.Fatalf("small initializer b: external %+v", b.External)
		}
		data, ref, err := EncodeExternal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 4096 || ref != w.External.Dir {
			t.Fatalf("%s: EncodeExternal: %d bytes, dir %q", name, len(data), ref)
		}
		back, err := Decode(data, Options{BaseDir: ref})
		if err != nil {
			t.Fatal(err)
		}
		if f := back.Graph.Initializers[name].Float32s(); f[1] != want[1] || f[n-1] != want[n-1] {
			t.Fatalf("%s: decoded reference differs", name)
		}
		if f := back.Graph.Initializers["b"].Float32s(); f[1] != 2 {
			t.Fatalf("b decoded as %v", f)
		}
		// Encode still writes the bytes.
		if full, err := Encode(m); err != nil || len(full) < 4*n {
			t.Fatalf("Encode: %d bytes, %v", len(full), err)
		}
	}
	if !aligned[true] || !aligned[false] {
		t.Fatalf("offsets seen aligned: %v; the test needs both kinds", aligned)
	}
}

// TestEmbeddedThroughSymlink: a model reached through a symbolic link from
// another directory, whose name would not resolve there, loads with its
// bytes (no reference).
func TestEmbeddedThroughSymlink(t *testing.T) {
	const n = 1 << 18
	path, want := embeddedModel(t, t.TempDir(), "w", n)
	link := filepath.Join(t.TempDir(), "other.onnx")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	m, err := Load(link, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := m.Graph.Initializers["w"]
	if f := w.Float32s(); f[n-1] != want[n-1] || w.External != nil {
		t.Fatalf("w: last %v, external %+v", f[n-1], w.External)
	}
}

// TestReferenceEmbeddedMalformed: wire data the rewrite does not expect is
// left for Decode to judge.
func TestReferenceEmbeddedMalformed(t *testing.T) {
	for _, data := range [][]byte{{0x3a, 0xff}, {0xff}, []byte(strings.Repeat("\x3a\x00", 2))} {
		if out, n := referenceEmbedded(data, "m.onnx", ir.FileIdentity{}, embeddedMinBytes); n != 0 {
			t.Fatalf("%x: rewrote %d tensors into %x", data, n, out)
		}
	}
}

// TestEmbeddedMismatchNotReferenced: a large raw_data that does not match
// its dims is reported as such, not as external data the model lacks.
func TestEmbeddedMismatchNotReferenced(t *testing.T) {
	const n = 1 << 18
	path, _ := embeddedModel(t, t.TempDir(), "w", n)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	for _, tp := range mp.Graph.Initializer {
		if tp.GetName() == "w" {
			tp.Dims = []int64{n + 1}
		}
	}
	if data, err = proto.Marshal(&mp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, Options{})
	if err == nil || strings.Contains(err.Error(), "external") || !strings.Contains(err.Error(), "raw_data") {
		t.Fatalf("Load: %v, want an error about raw_data", err)
	}
}

// TestEmbeddedFileCutShort: a model file truncated while its mapping is
// scanned is an error, not a crash (SIGBUS past the file's new end).
func TestEmbeddedFileCutShort(t *testing.T) {
	const n = 3 << 18
	path, _ := embeddedModel(t, t.TempDir(), "w", n)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 100); err != nil {
		t.Fatal(err)
	}
	_, ok, err := scanMapped(f, st, path, "model.onnx")
	if ok || err == nil || !strings.Contains(err.Error(), "changed while being read") {
		t.Fatalf("scan of a file cut short: ok %v, err %v", ok, err)
	}
}
