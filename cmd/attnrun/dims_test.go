package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// sharedDimModel is models/s001_cross_attention_shared_dim: a real PyTorch
// export of seed 001's CrossAttention whose dynamic_axes name both the
// decoder length (x) and the encoder length (enc, enc_mask) "S".
const sharedDimModel = "s001_cross_attention_shared_dim"

// TestSharedDimParam: inputs that give one dim_param two sizes run, as in
// ONNX Runtime, with one warning naming the dim and the inputs, and give
// PyTorch's result; --strict-dims refuses them.
func TestSharedDimParam(t *testing.T) {
	dir := filepath.Join(modelsDir, sharedDimModel)
	model := filepath.Join(dir, "model.onnx")
	inputs := func(set int) []string {
		ds := filepath.Join(dir, fmt.Sprintf("test_data_set_%d", set))
		return []string{"-i", "x=" + filepath.Join(ds, "input_0.pb"), "-i", "enc=" + filepath.Join(ds, "input_1.pb"), "-i", "enc_mask=" + filepath.Join(ds, "input_2.pb")}
	}
	const warning = `attnrun: warning: inputs give dim_param "S" different sizes: "x" dim 1 = 5, "enc" dim 1 = 9, "enc_mask" dim 1 = 9; running with each input's own size, as ONNX Runtime does (--strict-dims refuses)`

	for _, noFuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("run no-fuse=%v", noFuse), func(t *testing.T) {
			out := t.TempDir()
			args := append([]string{"run", model, "--out", out, fmt.Sprintf("--no-fuse=%v", noFuse)}, inputs(0)...)
			r := attnrun(t, args...)
			r.wantOK(t)
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if len(lines) != 2 || lines[0] != warning || !ranLine.MatchString(lines[1]+"\n") {
				t.Fatalf("stderr:\n%s\nwant the warning\n%s\nthen the ran line", r.stderr, warning)
			}
			_, want := readPb(t, filepath.Join(dir, "test_data_set_0", "output_0.pb"))
			got := readNpy(t, filepath.Join(out, "y.npy"))
			assertClose(t, "y", got, want, 1e-5)
			if !strings.HasPrefix(r.stdout, "y: float32 [2x5x32] ") {
				t.Errorf("stdout %q", r.stdout)
			}
		})
	}
	t.Run("bench warns once", func(t *testing.T) {
		r := attnrun(t, append([]string{"bench", model, "--iters", "5", "--warmup", "2", "--json"}, inputs(1)...)...)
		r.wantOK(t)
		if n := strings.Count(r.stderr, "warning: inputs give dim_param"); n != 1 {
			t.Errorf("%d warnings over 7 runs, want 1:\n%s", n, r.stderr)
		}
	})
	t.Run("strict-dims refuses", func(t *testing.T) {
		timed(t, cmdWall, append([]string{"run", model, "--strict-dims"}, inputs(0)...)...).wantError(t, 1, cmdWall,
			`input "enc" dim 1 (S) is 9, but x dim 1 set S=5 (refused: strict dims)`)
	})
	t.Run("conform, fused and not, strict and not", func(t *testing.T) {
		for _, noFuse := range []string{"--no-fuse=false", "--no-fuse=true"} {
			r := attnrun(t, "conform", noFuse, dir)
			r.wantOK(t)
			if !strings.HasPrefix(r.stdout, "PASS "+sharedDimModel+" ") || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `dim_param "S"`) {
				t.Errorf("%v", r)
			}
		}
		r := timed(t, cmdWall, "conform", "--strict-dims", dir)
		r.wantError(t, 1, cmdWall, "1 of 1 cases failed")
		if !strings.HasPrefix(r.stdout, "FAIL "+sharedDimModel+": test_data_set_0: input \"enc\" dim 1 (S) is 9, but x dim 1 set S=5") {
			t.Errorf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("across a partition boundary", func(t *testing.T) {
		// picky refuses Softmax, so the scores cross from one backend
		// process to the other, typed [batch, 4, S, S] by the host.
		r := attnrun(t, "conform", "--no-fuse", "--backend", "picky", "--plugin-dir", pluginDir(t), dir)
		r.wantOK(t)
		if !strings.HasPrefix(r.stdout, "PASS "+sharedDimModel+" ") {
			t.Errorf("%v", r)
		}
	})
}
