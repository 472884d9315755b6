package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeGoVersion: the Go version the README asks for is the go.mod's.
func TestReadmeGoVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The line of "Set up a fresh machine" that names what the build needs.
	line := regexp.MustCompile(`(?m)^.*all you need to build.*$`).Find(readme)
	if line == nil {
		t.Fatal("README.md has no line saying what the build needs")
	}
	if want := "Go " + string(m[1]) + " or newer"; !strings.Contains(string(line), want) {
		t.Errorf("README.md says %q; go.mod says go %s, so it should say %q", line, m[1], want)
	}
}
