package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ops/blas"
)

// version is the release version, set at link time with
// -ldflags "-X main.version=v1.2.3"; without it attnrun reports the main
// module's version from the build information ("devel" for a checkout).
var version string

// versionInfo is what `attnrun version` and `attnrun --version` print.
type versionInfo struct {
	Version string
	// Commit is the git revision the binary was built from, with "-dirty"
	// when the tree had changes; "" when the build was not stamped (go
	// build stamps it in a git clone unless -buildvcs=false).
	Commit     string
	CommitTime string
	Go         string // the Go toolchain that built the binary
	Platform   string
	BLAS       string // the matrix-product library of the built-in cpu backend
}

func currentVersion() versionInfo {
	v := versionInfo{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, BLAS: blas.Name()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if v.Version == "" {
			v.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if v.Commit != "" && modified {
			v.Commit += "-dirty"
		}
	}
	if v.Version == "" || v.Version == "(devel)" {
		v.Version = "devel"
	}
	return v
}

// short is the version and commit in one word, e.g. "devel+b034b1f4fd55",
// for server metadata.
func (v versionInfo) short() string {
	if len(v.Commit) >= 12 {
		return v.Version + "+" + v.Commit[:12]
	}
	return v.Version
}

func (v versionInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "attnrun %s\n", v.Version)
	switch {
	case v.Commit == "":
		b.WriteString("commit:  unknown (not stamped by go build: -buildvcs=false, or not built in a git clone)\n")
	case v.CommitTime != "":
		fmt.Fprintf(&b, "commit:  %s (%s)\n", v.Commit, v.CommitTime)
	default:
		fmt.Fprintf(&b, "commit:  %s\n", v.Commit)
	}
	fmt.Fprintf(&b, "go:      %s %s\n", v.Go, v.Platform)
	fmt.Fprintf(&b, "blas:    %s (built-in cpu backend)\n", v.BLAS)
	return b.String()
}

// setVersion gives root the --version flag and adds `attnrun version`;
// both print the same lines.
func setVersion(root *cobra.Command) {
	v := currentVersion()
	root.Version = v.Version
	// The template is text/template: any "{{" in the text is quoted.
	root.SetVersionTemplate(strings.ReplaceAll(v.String(), "{{", "{{`{{`}}"))
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print attnrun's version, commit, Go version and BLAS",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), v)
			return err
		},
	})
}
