package session

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestUnfusedAttentionWarning runs PyTorch exports whose attention the
// fusion does not take (talking heads, and a query mask applied after the
// softmax: runtime/graph/testdata/unfused) on their two data sets, at two
// shapes, in a backend process and in process: every run matches PyTorch,
// and Logf gets one warning in all that names the Softmax, the product and
// what keeps them apart (the einsum mixing the heads, the Mul). A model whose
// attention fuses (s000_multi_head, and Gemma 2's soft-capped attention)
// gets none.
func TestUnfusedAttentionWarning(t *testing.T) {
	const want = `warning: attention at node "/Softmax" (Softmax) → "/Einsum_2" (Einsum) runs unfused, node by node: einsum node "/Einsum_1" ("b h i j, h k -> b k i j") is not a product of Q and K over one contracted label, into [.., Sq, Sk]`
	for _, c := range []struct {
		dir   string
		sets  int
		warns []string
	}{
		{"../graph/testdata/unfused/talking_heads_attention", 2, []string{want}},
		{"../graph/testdata/unfused/post_softmax_query_mask_attention", 2, []string{`warning: attention at node "/Softmax" (Softmax) → "/MatMul_1" (MatMul) runs unfused, node by node: node "/Mul" (Mul) between the softmax and the product with V: the fused op multiplies the softmax's weights by V as they are`}},
		{"../../models/s000_multi_head", 3, nil},
		{"../../models/gemma2_softcap_attention", 3, nil},
	} {
		for _, inProcess := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/in-process=%v", filepath.Base(c.dir), inProcess), func(t *testing.T) {
				var mu sync.Mutex
				var warns []string
				logf := func(format string, args ...any) {
					mu.Lock()
					defer mu.Unlock()
					if l := fmt.Sprintf(format, args...); strings.Contains(l, "unfused") {
						warns = append(warns, l)
					}
				}
				s, err := Open(context.Background(), filepath.Join(c.dir, "model.onnx"), Options{Threads: 2, InProcess: inProcess, Logf: logf})
				if err != nil {
					t.Fatal(err)
				}
				for set := range c.sets {
					ds := filepath.Join(c.dir, fmt.Sprintf("test_data_set_%d", set))
					for range 2 {
						out, err := s.Run(context.Background(), readInputs(t, ds))
						if err != nil {
							t.Fatalf("set %d: %v", set, err)
						}
						_, y := readPB(t, filepath.Join(ds, "output_0.pb"))
						checkClose(t, fmt.Sprintf("set %d y", set), out["y"], y.Shape(), y.Data().([]float32), 1e-5)
					}
				}
				// A backend process's warning reaches Logf through its
				// stderr, read as it comes: Close waits for the reader.
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if fmt.Sprint(warns) != fmt.Sprint(c.warns) {
					t.Errorf("warnings %q\nwant %q", warns, c.warns)
				}
			})
		}
	}
}
