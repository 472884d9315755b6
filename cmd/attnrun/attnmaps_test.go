package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// softmaxLast is softmax over the last axis, in float64.
func softmaxLast(scores *ir.Tensor) []float64 {
	s := scores.Float32s()
	n := scores.Shape[len(scores.Shape)-1]
	out := make([]float64, len(s))
	for off := 0; off+n <= len(s); off += n {
		hi := math.Inf(-1)
		for _, v := range s[off : off+n] {
			hi = math.Max(hi, float64(v))
		}
		sum := 0.0
		for i, v := range s[off : off+n] {
			out[off+i] = math.Exp(float64(v) - hi)
			sum += out[off+i]
		}
		for i := range s[off : off+n] {
			out[off+i] /= sum
		}
	}
	return out
}

// TestAttentionMapsMatchPyTorch runs every model in models/ with
// --attention-maps, fused and unfused, and compares the weights written for
// each attention core with softmax(QKᵀ·scale + mask) computed from the
// scores PyTorch computed (attention_scores_K.npy, written by
// models/export.py --intermediates) and with PyTorch's own weights
// (attention_weights_K.npy). It checks the heat maps too: one PNG per
// batch item and head, all linked from index.html.
func TestAttentionMapsMatchPyTorch(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(modelsDir, "*", "test_data_set_0", "attention_weights_0.npy"))
	if len(dirs) < 32 { // all but the opset-23 graphs and nn.Transformer{Encoder,Decoder}Layer, whose softmax export.py cannot see
		t.Fatalf("%d models with PyTorch attention weights, want every model of models/export.py in %s (models/export.py --intermediates)", len(dirs), modelsDir)
	}
	// The Attention-node twin of s000_multi_head (models/export_opset23.py)
	// has its weights and data set 0: PyTorch's weights are that model's.
	twin := filepath.Join(modelsDir, "s000_multi_head_attention_op", "test_data_set_0")
	ref := map[string]string{twin: filepath.Join(modelsDir, "s000_multi_head", "test_data_set_0")}
	for k := 0; k < 1; k++ {
		a, _ := os.ReadFile(filepath.Join(twin, fmt.Sprintf("input_%d.pb", k)))
		b, _ := os.ReadFile(filepath.Join(ref[twin], fmt.Sprintf("input_%d.pb", k)))
		if len(a) == 0 || string(a) != string(b) {
			t.Fatalf("the Attention-node twin's data set 0 is not s000_multi_head's")
		}
	}
	sets := []string{twin}
	for _, wf := range dirs {
		sets = append(sets, filepath.Dir(wf))
	}
	for _, ds := range sets {
		caseDir := filepath.Dir(ds)
		refDir := ds
		if r, ok := ref[ds]; ok {
			refDir = r
		}
		for _, fuse := range []bool{true, false} {
			name := filepath.Base(caseDir) + map[bool]string{true: "/fused", false: "/unfused"}[fuse]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				m, err := onnx.Load(filepath.Join(caseDir, "model.onnx"), onnx.Options{})
				if err != nil {
					t.Fatal(err)
				}
				out := t.TempDir()
				args := []string{"run", filepath.Join(caseDir, "model.onnx"), "--attention-maps", out}
				if !fuse {
					args = append(args, "--no-fuse")
				}
				for k, vi := range m.Graph.Inputs {
					args = append(args, "-i", fmt.Sprintf("%s=%s", vi.Name, filepath.Join(ds, fmt.Sprintf("input_%d.pb", k))))
				}
				r := attnrun(t, args...)
				r.wantOK(t)
				// Fused, the FusedAttention kernel writes the weights (or the
				// Attention node, through it); unfused, the Softmax.
				wantNote := map[bool]string{true: "weights written by the FusedAttention kernel for", false: "that ran unfused"}[fuse]
				if ds == twin {
					wantNote = "Attention node(s) as their qk_matmul_output"
				}
				if !strings.Contains(r.stderr, wantNote) {
					t.Errorf("stderr does not say %q:\n%s", wantNote, r.stderr)
				}
				index, err := os.ReadFile(filepath.Join(out, "index.html"))
				if err != nil {
					t.Fatal(err)
				}
				want, _ := filepath.Glob(filepath.Join(refDir, "attention_weights_*.npy"))
				got, _ := filepath.Glob(filepath.Join(out, "core*.npy"))
				if len(got) != len(want) {
					t.Fatalf("%d cores written, PyTorch computed %d softmaxes", len(got), len(want))
				}
				pngs := 0
				for k := range want {
					w := readNpy(t, filepath.Join(out, fmt.Sprintf("core%d.npy", k)))
					ref := readNpy(t, filepath.Join(refDir, fmt.Sprintf("attention_weights_%d.npy", k)))
					assertClose(t, fmt.Sprintf("core %d vs PyTorch's weights", k), w, ref, 1e-5)
					// nn.MultiheadAttention's scores are not saved (export.py).
					sf := filepath.Join(refDir, fmt.Sprintf("attention_scores_%d.npy", k))
					if _, err := os.Stat(sf); err == nil {
						fromScores := softmaxLast(readNpy(t, sf))
						for i, v := range w.Float32s() {
							if d := math.Abs(float64(v) - fromScores[i]); !(d <= 1e-5) {
								t.Fatalf("core %d: weight %d is %v, softmax of PyTorch's scores gives %v", k, i, v, fromScores[i])
							}
						}
					} else if !strings.HasPrefix(filepath.Base(caseDir), "torch_mha") {
						t.Errorf("no %s", sf)
					}
					// One heat map per batch item and head.
					maps := 1
					if r := len(w.Shape); r >= 3 {
						maps = int(ir.NumElements(w.Shape[:r-2]))
					}
					files, _ := filepath.Glob(filepath.Join(out, fmt.Sprintf("core%d_b*_h*.png", k)))
					if len(files) != maps {
						t.Errorf("core %d: %d heat maps, want %d", k, len(files), maps)
					}
					for _, f := range files {
						checkPNG(t, f)
						if !strings.Contains(string(index), `src="`+filepath.Base(f)+`"`) {
							t.Errorf("index.html does not show %s", filepath.Base(f))
						}
						pngs++
					}
				}
				if !strings.Contains(r.stdout, fmt.Sprintf("attention maps: %d cores, %d heat maps", len(want), pngs)) {
					t.Errorf("stdout:\n%s", r.stdout)
				}
			})
		}
	}
}

// checkPNG decodes a heat map and checks its size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	if b := readPNG(t, path).Bounds(); b.Dx() != 614 || b.Dy() != 480 {
		t.Errorf("%s: %dx%d pixels, want 614x480", path, b.Dx(), b.Dy())
	}
}

// TestAttentionMapsOfAttentionNode: the LLaMA-style block's ONNX Attention
// node (GQA, causal over a KV cache) is asked for its weights
// (qk_matmul_output, mode 3): every row sums to 1 and exactly the keys
// after the causal diagonal, shifted by the cache's length, weigh 0. There
// is no PyTorch softmax to compare with (models/export_opset23.py writes
// the graph with the ONNX helper).
func TestAttentionMapsOfAttentionNode(t *testing.T) {
	ds := filepath.Join(modelsDir, "llama_block_gqa", "test_data_set_0")
	m, err := onnx.Load(filepath.Join(modelsDir, "llama_block_gqa", "model.onnx"), onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fuse := range []bool{true, false} {
		out := t.TempDir()
		args := []string{"run", filepath.Join(modelsDir, "llama_block_gqa", "model.onnx"), "--attention-maps", out}
		if !fuse {
			args = append(args, "--no-fuse")
		}
		var past int
		for k, vi := range m.Graph.Inputs {
			f := filepath.Join(ds, fmt.Sprintf("input_%d.pb", k))
			args = append(args, "-i", fmt.Sprintf("%s=%s", vi.Name, f))
			if vi.Name == "past_key" {
				_, pk := readPb(t, f)
				past = pk.Shape[len(pk.Shape)-2]
			}
		}
		r := attnrun(t, args...)
		r.wantOK(t)
		if !strings.Contains(r.stderr, "1 Attention node(s) as their qk_matmul_output") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
		w := readNpy(t, filepath.Join(out, "core0.npy"))
		if len(w.Shape) != 4 || past == 0 {
			t.Fatalf("weights [%s], past %d", ir.ShapeString(w.Shape), past)
		}
		sq, sk := w.Shape[2], w.Shape[3]
		if sk != past+sq {
			t.Fatalf("weights [%s]: %d keys, want past %d + %d", ir.ShapeString(w.Shape), sk, past, sq)
		}
		v := w.Float32s()
		for row := 0; row < len(v)/sk; row++ {
			i, sum := row%sq, 0.0
			for j := 0; j < sk; j++ {
				x := v[row*sk+j]
				if (j > i+past) != (x == 0) {
					t.Fatalf("row %d (query %d) key %d: weight %v", row, i, j, x)
				}
				sum += float64(x)
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("row %d sums to %v", row, sum)
			}
		}
		files, _ := filepath.Glob(filepath.Join(out, "core0_b*_h*.png"))
		if len(files) != w.Shape[0]*w.Shape[1] {
			t.Errorf("%d heat maps for weights [%s]", len(files), ir.ShapeString(w.Shape))
		}
	}
}
