package main

import (
	"fmt"
	"image/png"
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
	if len(dirs) < 20 {
		t.Fatalf("%d models with PyTorch attention weights, want every model in %s (models/export.py --intermediates)", len(dirs), modelsDir)
	}
	for _, wf := range dirs {
		ds := filepath.Dir(wf)
		caseDir := filepath.Dir(ds)
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
				// Until FusedAttention can write the weights, every core runs
				// unfused when they are asked for.
				if !strings.Contains(r.stderr, "attention cores ran unfused, their Softmax writing the weights") {
					t.Errorf("stderr does not say the cores ran unfused:\n%s", r.stderr)
				}
				index, err := os.ReadFile(filepath.Join(out, "index.html"))
				if err != nil {
					t.Fatal(err)
				}
				want, _ := filepath.Glob(filepath.Join(ds, "attention_weights_*.npy"))
				got, _ := filepath.Glob(filepath.Join(out, "core*.npy"))
				if len(got) != len(want) {
					t.Fatalf("%d cores written, PyTorch computed %d softmaxes", len(got), len(want))
				}
				pngs := 0
				for k := range want {
					w := readNpy(t, filepath.Join(out, fmt.Sprintf("core%d.npy", k)))
					ref := readNpy(t, filepath.Join(ds, fmt.Sprintf("attention_weights_%d.npy", k)))
					scores := readNpy(t, filepath.Join(ds, fmt.Sprintf("attention_scores_%d.npy", k)))
					assertClose(t, fmt.Sprintf("core %d vs PyTorch's weights", k), w, ref, 1e-5)
					fromScores := softmaxLast(scores)
					for i, v := range w.Float32s() {
						if d := math.Abs(float64(v) - fromScores[i]); !(d <= 1e-5) {
							t.Fatalf("core %d: weight %d is %v, softmax of PyTorch's scores gives %v", k, i, v, fromScores[i])
						}
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
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != 614 || b.Dy() != 480 {
		t.Errorf("%s: %dx%d pixels, want 614x480", path, b.Dx(), b.Dy())
	}
}
