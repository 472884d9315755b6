package serve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/repo"
)

// matMulModel is y = x·W, x: float32[1, k], W a k×k weight of value w
// everywhere, embedded in the model file (1 MiB at k = 512: referenced,
// so a backend opens the model file by path).
func matMulModel(t *testing.T, k int, w float32) []byte {
	t.Helper()
	data := make([]float32, k*k)
	for i := range data {
		data[i] = w
	}
	shape := ir.ShapeOf([]int{1, k})
	g := &ir.Graph{
		Name:             "mm",
		Initializers:     map[string]*ir.Tensor{"W": ir.FromSlice([]int{k, k}, data)},
		InitializerOrder: []string{"W"},
		Inputs:           []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: shape}}},
		Outputs:          []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: shape}}},
		Nodes:            []*ir.Node{{Name: "/MatMul", OpType: "MatMul", Inputs: []string{"x", "W"}, Outputs: []string{"y"}}},
	}
	out, err := onnx.Encode(&ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReplacedModelFileUnavailable: a model file replaced (a same-shaped
// model with other weights renamed over it) while its version is loaded,
// then its backend killed: requests are answered UNAVAILABLE (503) naming
// the weight, the file and the cause, never with the new weights' answer
// from the old graph; a rescan loads the new file, which then answers.
func TestReplacedModelFileUnavailable(t *testing.T) {
	const k = 512
	dir := t.TempDir()
	path := filepath.Join(dir, "mm", "1", repo.ModelFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, matMulModel(t, k, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{Repository: dir})
	x := make([]float32, k)
	for i := range x {
		x[i] = 1
	}
	req := &oip.Request{Inputs: []oip.NamedTensor{{Name: "x", Tensor: ir.FromSlice([]int{1, k}, x)}}}
	answer := func() (float32, error) {
		resp, err := s.Infer(context.Background(), protoGRPC, "mm", "", req)
		if err != nil {
			return 0, err
		}
		return resp.Outputs[0].Tensor.Float32s()[0], nil
	}
	if y, err := answer(); err != nil || y != k {
		t.Fatalf("before the replacement: y[0] = %v, %v; want %d", y, err, k)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, matMulModel(t, k, 2), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	for _, pid := range backendPids(t, s, "mm") {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for try := 1; try <= 2; try++ {
		y, err := answer()
		if err == nil {
			t.Fatalf("request %d after the model file was replaced and the backend killed: y[0] = %v (the old model answers %d, the new one %d)", try, y, k, 2*k)
		}
		if oip.ClassOf(err) != oip.Unavailable || oip.HTTPStatus(oip.ClassOf(err)) != 503 {
			t.Errorf("request %d: class %v, want unavailable (503): %v", try, oip.ClassOf(err), err)
		}
		for _, part := range []string{`model "mm" version 1`, `initializer "W"`, path, "changed since the model was loaded", "open a new session"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("request %d: error %q does not say %q", try, err, part)
			}
		}
	}
	if err := s.Rescan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if y, err := answer(); err != nil || y != 2*k {
		t.Fatalf("after a rescan: y[0] = %v, %v; want the new model's %d", y, err, 2*k)
	}
}
