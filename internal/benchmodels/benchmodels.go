// Package benchmodels finds the benchmark models that
// `models/export.py --bench DIR` (`make bench-models`) writes: exports at
// C=768 too large to commit, which the Go benchmarks skip when absent.
package benchmodels

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the directory of the benchmark models: $ATTNRUN_BENCH_MODELS,
// else the repository's bench/models (make's default BENCH_MODELS) when it
// exists, else /tmp/bench_models.
func Dir() string {
	if d := os.Getenv("ATTNRUN_BENCH_MODELS"); d != "" {
		return d
	}
	// Tests run in their package's directory: the repository is the
	// nearest parent holding go.mod.
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				if st, err := os.Stat(filepath.Join(d, "bench", "models")); err == nil && st.IsDir() {
					return filepath.Join(d, "bench", "models")
				}
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "/tmp/bench_models"
}

// Path returns the model.onnx of the benchmark model name, skipping tb
// (with how to make the models) when it is absent.
func Path(tb testing.TB, name string) string {
	tb.Helper()
	path := filepath.Join(Dir(), name, "model.onnx")
	if _, err := os.Stat(path); err != nil {
		tb.Skipf("benchmark model %s not found (make bench-models, or /usr/bin/python3 models/export.py --bench DIR and set ATTNRUN_BENCH_MODELS=DIR)", path)
	}
	return path
}
