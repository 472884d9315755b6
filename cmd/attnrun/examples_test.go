package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ops/blas"
	"github.com/spf13/cobra"
)

// TestHelpExamplesRun runs every example of every command's --help that a
// user can paste as it is: those on the bundled models/ (or on a file that
// exists, such as libonnx-testdata's), without shell redirection. They run in
// a scratch directory holding a link to models/, so files they write (a
// profile's trace) land there. Examples on a placeholder model.onnx are
// skipped.
func TestHelpExamplesRun(t *testing.T) {
	dir := t.TempDir()
	models, err := filepath.Abs(modelsDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(models, filepath.Join(dir, "models")); err != nil {
		t.Fatal(err)
	}
	ran := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range strings.Split(c.Example, "\n") {
			args := strings.Fields(line)
			if len(args) < 3 || args[0] != "attnrun" || strings.ContainsAny(line, "<>|") {
				continue
			}
			path := args[2] // the model, or conform's directory
			if c.Name() == "conform" {
				path = args[len(args)-1]
			}
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			if _, err := os.Stat(path); err != nil {
				t.Logf("skipped (no %s): %s", path, line)
				continue
			}
			if strings.Contains(line, "bf16") && !blas.BF16Fast() {
				t.Logf("skipped (no AVX512_BF16): %s", line)
				continue
			}
			attnrunWith(t, runOpts{dir: dir}, args[1:]...).wantOK(t)
			ran++
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(&globalFlags{}))
	if ran < 4 {
		t.Errorf("ran %d help examples; want at least the run, bench, profile and conform ones on models/", ran)
	}
}
