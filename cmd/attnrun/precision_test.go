package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ops/blas"
)

// TestPrecisionFlag checks --precision on the real binary: bf16 conform
// passes the bundled models under the looser tolerance it announces, run
// and bench accept it (bench reports it), and an unknown precision is a
// usage error.
func TestPrecisionFlag(t *testing.T) {
	attnrun(t, "run", "--precision", "fp16", filepath.Join(modelsDir, "s003_self_attention", "model.onnx"), "-i", "x=random").
		wantError(t, 2, cmdWall, `--precision: unknown precision "fp16" (want fp32 or bf16)`)
	if !blas.BF16Fast() {
		t.Skip("no AVX512_BF16 on this CPU: bf16 is refused (backends/cpu tests the refusal)")
	}
	r := attnrun(t, "conform", "--precision", "bf16", "-q", modelsDir)
	r.wantOK(t)
	if !strings.HasPrefix(r.stdout, "precision bf16: tolerance rtol 0.02 atol 0.01") || !strings.Contains(r.stdout, " passed, 0 failed") {
		t.Errorf("conform --precision bf16 output:\n%s", r.stdout)
	}
	// A case with its own bf16 tolerance (bf16_tolerance.json) is held to
	// it and says why; --atol puts it back under the flags'.
	r = attnrun(t, "conform", "--precision", "bf16", filepath.Join(modelsDir, "swinv2_window_attention"))
	r.wantOK(t)
	if !strings.Contains(r.stdout, "(its own bf16 tolerance rtol 0.1 atol 0.1: cosine attention") {
		t.Errorf("conform --precision bf16 on Swin V2 does not give its tolerance:\n%s", r.stdout)
	}
	r = attnrun(t, "conform", "--precision", "bf16", "--atol", "0.01", filepath.Join(modelsDir, "swinv2_window_attention"))
	if r.code != 1 || strings.Contains(r.stdout, "its own bf16 tolerance") {
		t.Errorf("conform --precision bf16 --atol 0.01 on Swin V2: exit %d\n%s", r.code, r.stdout)
	}
	attnrun(t, "run", "--precision", "BF16", filepath.Join(modelsDir, "s000_multi_head", "model.onnx"), "-i", "x=random:1x8x32").wantOK(t)
	r = attnrun(t, "bench", "--precision", "bf16", filepath.Join(modelsDir, "s003_self_attention", "model.onnx"), "-i", "x=random:3x32", "-n", "3", "--warmup", "1", "--json")
	r.wantOK(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var res struct {
		Precision string `json:"precision"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Precision != "bf16" {
		t.Errorf("bench --json precision %q (%v)", res.Precision, err)
	}
}
