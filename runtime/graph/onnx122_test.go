package graph

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/runtime/conform"
)

// onnxNodeDir is ONNX 1.22's node test data: $ONNX122_NODE_SUITE/node, else the
// first shared/onnx-node/node above this package (the project's worktrees
// share /work/shared); "" when there is none.
func onnxNodeDir() string {
	if d := os.Getenv("ONNX122_NODE_SUITE"); d != "" {
		return filepath.Join(d, "node")
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		return ""
	}
	for {
		cand := filepath.Join(dir, "shared", "onnx-node", "node")
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
		dir = filepath.Dir(dir)
	}
}

// TestONNX122NewOps runs ONNX 1.22's own node cases of Attention,
// RotaryEmbedding and RMSNormalization (not the _expanded twins, which
// spell the ops out in opset-23 primitive ops) in process, with graph
// rewrites on and off, at attnrun conform's tolerance. It skips where the
// data is not present (CI runs them through the node-suite runner).
func TestONNX122NewOps(t *testing.T) {
	dir := onnxNodeDir()
	var dirs []string
	for _, pat := range []string{"test_attention_*", "test_rotary_embedding*", "test_rms_normalization_*"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, d := range m {
			if !strings.Contains(filepath.Base(d), "_expanded") {
				dirs = append(dirs, d)
			}
		}
	}
	if dir == "" || len(dirs) == 0 {
		t.Skip("ONNX 1.22 node data not found (set ONNX122_NODE_SUITE to the shared/onnx-node tree)")
	}
	if len(dirs) != 64+8+19 {
		t.Errorf("found %d cases, want 64 Attention, 8 RotaryEmbedding and 19 RMSNormalization", len(dirs))
	}
	cases, err := conform.Find(dirs)
	if err != nil {
		t.Fatal(err)
	}
	for _, noFuse := range []bool{false, true} {
		for _, c := range cases {
			name := c.Name
			if noFuse {
				name += "/nofuse"
			}
			t.Run(name, func(t *testing.T) {
				r := conform.Run(context.Background(), c, opener(Options{Threads: 2, NoFuse: noFuse}, nil), conform.Tolerance{Rtol: 1e-4, Atol: 1e-5})
				if !r.Pass {
					t.Fatalf("%v (max abs %g)", r.Err, r.MaxAbs)
				}
			})
		}
	}
}
