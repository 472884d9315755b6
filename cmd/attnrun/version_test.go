package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersion: `attnrun version` and `attnrun --version` print the same
// lines: version, commit, Go version and BLAS.
func TestVersion(t *testing.T) {
	r := attnrun(t, "version")
	r.wantOK(t)
	for _, args := range [][]string{{"--version"}, {"-v"}} {
		again := attnrun(t, args...)
		again.wantOK(t)
		if again.stdout != r.stdout {
			t.Errorf("attnrun %s printed\n%s\nattnrun version printed\n%s", args[0], again.stdout, r.stdout)
		}
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "attnrun ") || !strings.HasPrefix(lines[1], "commit:  ") ||
		lines[2] != "go:      "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH || lines[3] != "blas:    go (built-in cpu backend)" || r.stderr != "" {
		t.Errorf("%v", r)
	}
	timed(t, cmdWall, "version", "extra").wantError(t, 2, cmdWall, `version: unknown command "extra" for "attnrun version"`)
}

// TestVersionCommit builds attnrun in a throwaway git repository holding
// this tree, and checks the commit it reports is the repository's HEAD,
// marked -dirty once a file changes.
func TestVersionCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to check the commit stamp: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	// The tree as it is (tracked and untracked files, not ignored ones).
	files := gitOut(t, root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	for _, f := range strings.Split(strings.TrimSuffix(files, "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(repo, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitOut(t, repo, "init", "-q")
	gitOut(t, repo, "add", "-A")
	gitOut(t, repo, "-c", "user.name=attnrun test", "-c", "user.email=test@attnrun.invalid", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "version test")
	head := strings.TrimSpace(gitOut(t, repo, "rev-parse", "HEAD"))

	commitLine := func() string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "attnrun")
		build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/attnrun")
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("attnrun version: %v", err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "commit:  ") {
				return strings.TrimPrefix(l, "commit:  ")
			}
		}
		t.Fatalf("no commit line in\n%s", out)
		return ""
	}
	if got := commitLine(); !strings.HasPrefix(got, head+" (") {
		t.Errorf("clean tree: commit %q, want %s (time)", got, head)
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := commitLine(); !strings.HasPrefix(got, head+"-dirty (") {
		t.Errorf("changed tree: commit %q, want %s-dirty (time)", got, head)
	}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return string(out)
}
