package onnx

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestExternalMapped: large external data is mapped privately: the values
// are the file's, a write to the tensor never reaches the file, and
// EncodeExternal writes a reference that decodes to the same tensor.
func TestExternalMapped(t *testing.T) {
	dir := t.TempDir()
	const n = 3 << 18 // 3 MiB of float32, past mapMinBytes
	raw := make([]byte, 4+4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(raw[4+4*i:], math.Float32bits(float32(i)))
	}
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	path := externalModelDims(t, dir, []int64{n}, "location", "w.bin", "offset", "4", "length", "3145728")
	m, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := m.Graph.Initializers["w"]
	if f := w.Float32s(); len(f) != n || f[n-1] != n-1 || w.External == nil || w.External.Offset != 4 {
		t.Fatalf("w: %d values, external %+v", len(f), w.External)
	}
	w.Float32s()[0] = 42 // copy on write
	if again, _ := os.ReadFile(filepath.Join(dir, "w.bin")); !bytes.Equal(again, raw) {
		t.Fatal("a write to the mapped tensor reached the file")
	}
	data, ref, err := EncodeExternal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 1024 || ref != w.External.Dir {
		t.Fatalf("EncodeExternal: %d bytes, dir %q", len(data), ref)
	}
	back, err := Decode(data, Options{BaseDir: ref})
	if err != nil {
		t.Fatal(err)
	}
	if f := back.Graph.Initializers["w"].Float32s(); f[0] != 0 || f[n-1] != n-1 {
		t.Fatalf("decoded w[0] = %v, w[n-1] = %v", f[0], f[n-1])
	}
}
