package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOutputPathsCheckedFirst: an output path that cannot be written fails
// at once, naming the flag, before any backend starts (so before a run whose
// results would be lost); and --out creates the directories it names.
func TestOutputPathsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(modelsDir, "s000_multi_head", "model.onnx")
	missing := filepath.Join(dir, "no", "such")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"profile", model, "-i", "x=random:1x4x32", "--trace", filepath.Join(missing, "t.json")}, "--trace " + filepath.Join(missing, "t.json") + ": stat " + missing + ": no such file or directory"},
		{[]string{"bench", model, "-i", "x=random:1x4x32", "--profile", filepath.Join(file, "t.json")}, "--profile " + filepath.Join(file, "t.json") + ": " + file + " is not a directory"},
		{[]string{"run", model, "-i", "x=random:1x4x32", "--out", filepath.Join(file, "out")}, "--out " + filepath.Join(file, "out") + ": mkdir "},
		{[]string{"run", model, "-i", "x=random:1x4x32", "--attention-maps", filepath.Join(file, "maps")}, "--attention-maps " + filepath.Join(file, "maps") + ": mkdir "},
	} {
		r := attnrunWith(t, runOpts{watch: true}, c.args...)
		r.wantError(t, 1, cmdWall, c.want)
		if len(r.children) != 0 {
			t.Errorf("%v: started %d processes before refusing the path", c.args, len(r.children))
		}
	}
	out := filepath.Join(dir, "a", "b")
	attnrun(t, "run", model, "-i", "x=random:1x4x32", "--out", out).wantOK(t)
	if _, err := os.Stat(filepath.Join(out, "y.npy")); err != nil {
		t.Error(err)
	}
}
