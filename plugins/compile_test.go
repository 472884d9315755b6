package plugins

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// TestCompileRequestRefersToExternalWeights: weights loaded from external
// data go to the backend as references to their file, with the model's
// directory: no weight bytes in the Compile message (weights past gRPC's
// 2 GiB limit made Compile fail, and the host held an encoded copy of
// them). Inline weights still travel inline.
func TestCompileRequestRefersToExternalWeights(t *testing.T) {
	dir := t.TempDir()
	const n = 1 << 20 // 4 MiB of float32, mapped by the loader
	raw := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(i%1000)))
	}
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	m := &ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: &ir.Graph{
		Name: "g",
		Initializers: map[string]*ir.Tensor{
			"w": {DType: ir.Float, Shape: []int{n}, External: &ir.ExternalData{Dir: dir, Location: "w.bin", Length: 4 * n}},
			"b": ir.FromSlice([]int{2}, []float32{1, 2}),
		},
		InitializerOrder: []string{"w", "b"},
		Inputs:           []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.ShapeOf([]int{n})}}},
		Outputs:          []*ir.ValueInfo{{Name: "y"}},
		Nodes:            []*ir.Node{{Name: "/Add", OpType: "Add", Inputs: []string{"x", "w"}, Outputs: []string{"y"}}},
	}}
	data, _, err := onnx.EncodeExternal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// As the host has it: loaded, w mapped from its file.
	loaded, err := onnx.Load(path, onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := compileRequest(loaded, CompileOptions{MaxMemoryBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Model) > 4096 {
		t.Errorf("the Compile message's model is %d bytes for 4 MiB of external weights", len(req.Model))
	}
	if abs, _ := filepath.EvalSymlinks(dir); req.ModelDir != abs || req.MaxMemoryBytes != 1<<30 {
		t.Errorf("model_dir %q (want %q), max_memory_bytes %d", req.ModelDir, abs, req.MaxMemoryBytes)
	}
	// As the backend decodes it.
	got, err := onnx.Decode(req.Model, onnx.Options{BaseDir: req.ModelDir})
	if err != nil {
		t.Fatal(err)
	}
	w, b := got.Graph.Initializers["w"], got.Graph.Initializers["b"]
	if !reflect.DeepEqual(w.Float32s(), loaded.Graph.Initializers["w"].Float32s()) || w.Float32s()[999] != 999 {
		t.Error("the backend's w differs from the host's")
	}
	if b.External != nil || !reflect.DeepEqual(b.Float32s(), []float32{1, 2}) {
		t.Errorf("inline b = %v (external %v)", b.Float32s(), b.External)
	}
}
