package conformance

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/attnrun/attnrun/runtime/session"
)

// TestNodeSuite runs ONNX's node tests for every op of every available
// backend against the expectations files, for both suites:
//
//   - Debian's onnx 1.12 data at $ONNX_NODE_SUITE (default DefaultSuiteDir,
//     from libonnx-testdata), against conformance/expectations/<backend>.txt.
//     When it is missing the test fails if CI=true and is skipped, loudly,
//     otherwise.
//   - ONNX 1.22's shared/onnx-node tree ($ONNX122_NODE_SUITE, or
//     ../shared/onnx-node beside the repository: see FindONNX122), against
//     conformance/expectations/<backend>-onnx122.txt. When it is absent that
//     part is skipped with a loud message.
//
// $ATTNRUN_BIN names a prebuilt attnrun; otherwise the test builds one.
func TestNodeSuite(t *testing.T) {
	dir := os.Getenv("ONNX_NODE_SUITE")
	if dir == "" {
		dir = DefaultSuiteDir
	}
	suites := []Suite{DebianSuite(dir)}
	if _, err := os.Stat(dir); err != nil {
		msg := "ONNX node suite NOT RUN: " + err.Error() +
			" (install it with `apt-get install libonnx-testdata`, or set ONNX_NODE_SUITE)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Log("!!!!!!!! " + msg + " !!!!!!!!")
		suites = nil
	}
	if root, tried := FindONNX122("."); root != "" {
		suites = append(suites, ONNX122Suite(root))
	} else {
		t.Log("!!!!!!!! " + MissingMessage("onnx-1.22", tried) + " !!!!!!!!")
	}
	if len(suites) == 0 {
		t.Skip("!!!!!!!! no ONNX node suite to run !!!!!!!!")
	}
	bin := os.Getenv("ATTNRUN_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "attnrun")
		build := exec.Command("go", "build", "-o", bin, "github.com/attnrun/attnrun/cmd/attnrun")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building attnrun: %v\n%s", err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	list, err := session.ListBackends(ctx, session.Options{SelfExe: bin, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range list {
		if !b.Available {
			t.Logf("backend %s is not available (%s): its node suite is not run", b.Name, b.Reason)
			continue
		}
		for _, s := range suites {
			t.Run(b.Name+"/"+s.ID, func(t *testing.T) {
				// The test runs in conformance/: the file is relative to the root.
				exp, err := ReadExpectations(filepath.Join("..", s.ExpectationsFile(b.Name)))
				if err != nil {
					t.Fatalf("backend %s is available but has no usable expectations file: %v "+
						"(create it with go run ./conformance/nodesuite --backend %s --suite %s --update)", b.Name, err, b.Name, s.ID)
				}
				rep, err := Run(ctx, Config{Attnrun: bin, Backend: b.Name, Suite: s, Expectations: exp})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range rep.Problems {
					t.Error(p)
				}
				t.Log(rep.Summary())
			})
		}
	}
}
