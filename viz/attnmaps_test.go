package viz

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/npy"
	"github.com/attnrun/attnrun/ops"
)

// uniform returns float32 weights of a shape, each row summing to 1.
func uniform(shape ...int) *ir.Tensor {
	t := ir.NewTensor(ir.Float, shape)
	w := t.Float32s()
	for i := range w {
		w[i] = 1 / float32(shape[len(shape)-1])
	}
	return t
}

// TestWriteAttentionMaps writes a [B=2, H=2] core with a key padding mask
// and a rank-3 core: one picture per batch item and head, the weights as
// .npy, and index.html with a table per batch item, columns by head (or
// item for rank 3), every picture linked.
func TestWriteAttentionMaps(t *testing.T) {
	dir := t.TempDir()
	mask := &ir.Tensor{DType: ir.Bool, Shape: []int{2, 1, 1, 3}, Data: []bool{false, false, true, false, false, false}}
	cores := []CoreWeights{
		{Name: "/layer0/Softmax", Nodes: []string{"/layer0/MatMul", "/layer0/Softmax", "/layer0/MatMul_1"}, Ops: []string{"MatMul", "Softmax", "MatMul"},
			Weights: uniform(2, 2, 3, 3), Mask: mask, MaskKind: ops.MaskBoolTrueMasks},
		{Name: "/bmm/Softmax", Weights: uniform(3, 2, 4)},
	}
	files, err := WriteAttentionMaps(dir, "test <model>", cores)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || len(files[0].Maps) != 4 || len(files[1].Maps) != 3 {
		t.Fatalf("%+v", files)
	}
	back, err := npy.ReadFile(filepath.Join(dir, "core0.npy"))
	if err != nil || ir.ShapeString(back.Shape) != "2x2x3x3" {
		t.Fatalf("core0.npy: %v %v", back, err)
	}
	index, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := string(index)
	for _, want := range []string{
		"test &lt;model&gt;", // escaped
		"<h2>batch item 0</h2>", "<h2>batch item 1</h2>",
		"<th>head 1</th>", "<th>item 2</th>",
		`<a href="core0_b1_h1.png"><img src="core0_b1_h1.png" alt="core 0 /layer0/Softmax, batch 1, head 1"`,
		`<a href="core1_b0_h2.png"><img src="core1_b0_h2.png"`,
		`<a href="core0.npy">core0.npy</a>`, "weights [2×2×3×3]",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("index.html has no %q:\n%s", want, html)
		}
	}
	for _, c := range files {
		for _, m := range c.Maps {
			if st, err := os.Stat(filepath.Join(dir, m.PNG)); err != nil || st.Size() < 1000 {
				t.Errorf("%s: %v", m.PNG, err)
			}
		}
	}
	// A mask that does not broadcast is an error naming the core.
	cores[0].Mask = &ir.Tensor{DType: ir.Bool, Shape: []int{2}, Data: []bool{true, false}}
	if _, err := WriteAttentionMaps(t.TempDir(), "bad", cores); err == nil || !strings.Contains(err.Error(), "/layer0/Softmax") {
		t.Errorf("bad mask: %v", err)
	}
}
