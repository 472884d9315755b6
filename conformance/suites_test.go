package conformance

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ops"
)

// TestFindONNX122 lays out a main checkout and a git worktree of it, with
// shared/onnx-node beside the main checkout only, and finds the tree from
// inside each.
func TestFindONNX122(t *testing.T) {
	t.Setenv("ONNX122_NODE_SUITE", "")
	top := t.TempDir()
	main := filepath.Join(top, "main")
	wt := filepath.Join(top, "wt", "feature")
	shared := filepath.Join(top, "shared", "onnx-node")
	for _, d := range []string{filepath.Join(main, ".git", "worktrees", "feature"), filepath.Join(main, "pkg"), filepath.Join(wt, "pkg"), filepath.Join(shared, "node")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(main, "go.mod"), "module x\n")
	write(filepath.Join(wt, "go.mod"), "module x\n")
	write(filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(main, ".git", "worktrees", "feature")+"\n")
	write(filepath.Join(main, ".git", "worktrees", "feature", "commondir"), "../..\n")
	for _, start := range []string{filepath.Join(main, "pkg"), filepath.Join(wt, "pkg")} {
		got, tried := FindONNX122(start)
		if got != shared {
			t.Errorf("from %s: found %q (tried %v), want %s", start, got, tried, shared)
		}
	}
	if err := os.RemoveAll(filepath.Join(top, "shared")); err != nil {
		t.Fatal(err)
	}
	got, tried := FindONNX122(filepath.Join(wt, "pkg"))
	if got != "" || len(tried) != 2 {
		t.Errorf("without the tree: found %q, tried %v", got, tried)
	}
	if msg := MissingMessage("onnx-1.22", tried); !strings.Contains(msg, "NOT RUN") || !strings.Contains(msg, tried[1]) {
		t.Errorf("message %q", msg)
	}
	t.Setenv("ONNX122_NODE_SUITE", "/elsewhere")
	if got, _ := FindONNX122(wt); got != "/elsewhere" {
		t.Errorf("$ONNX122_NODE_SUITE ignored: %q", got)
	}
}

func TestSuiteFiles(t *testing.T) {
	s := ONNX122Suite("/x")
	if f := s.ExpectationsFile("cpu"); f != filepath.Join("conformance", "expectations", "cpu-onnx122.txt") {
		t.Errorf("expectations %s", f)
	}
	if f := DebianSuite("").ExpectationsFile("gpu"); f != filepath.Join("conformance", "expectations", "gpu.txt") {
		t.Errorf("expectations %s", f)
	}
	if d := s.CaseDir("node-opset24/test_a"); d != "/x/node-opset24/test_a" {
		t.Errorf("twin case dir %s", d)
	}
	if d := s.CaseDir("test_a"); d != "/x/node/test_a" {
		t.Errorf("case dir %s", d)
	}
	if s.Rtol != 1e-3 || s.Atol != 1e-7 {
		t.Errorf("tolerance %g %g, want upstream's", s.Rtol, s.Atol)
	}
}

// TestAssignMatchesCasesTSV checks the prefix rule that assigns cases to
// ops against shared/onnx-node's cases.tsv, which lists each case's op (the
// graph's op types): every case of a registered op is assigned to it, and
// no case of another op is. An _expanded case belongs to its base case's op
// (cases.tsv gives the expansion's op for some, Cast for CastLike's).
func TestAssignMatchesCasesTSV(t *testing.T) {
	root, tried := FindONNX122(".")
	if root == "" {
		t.Skip("!!!!!!!! " + MissingMessage("onnx-1.22", tried) + " !!!!!!!!")
	}
	f, err := os.Open(filepath.Join(root, "cases.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	claimed := map[string]bool{}
	var claimedList []string
	for _, s := range ops.Schemas() {
		if s.Domain == ops.DomainONNX && !claimed[s.OpType] {
			claimed[s.OpType] = true
			claimedList = append(claimedList, s.OpType)
		}
	}
	opOf := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) < 4 || cols[0] == "case" || strings.Contains(cols[3], ",") {
			continue // header, or a twin whose expanded graph lists several ops
		}
		opOf[cols[0]] = cols[3]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for c, op := range opOf {
		if base, _, ok := strings.Cut(c, "_expanded"); ok && opOf[base] != "" {
			op = opOf[base]
		}
		if claimed[op] {
			want[c] = op
		} else {
			want[c] = ""
		}
	}
	names := make([]string, 0, len(want))
	for c := range want {
		names = append(names, c)
	}
	got, err := Assign(names, claimedList)
	if err != nil {
		t.Fatal(err)
	}
	for c, op := range want {
		if got[c] != op {
			t.Errorf("%s: assigned to %q, cases.tsv says %q", c, got[c], op)
		}
	}
}
