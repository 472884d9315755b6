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
// backend against conformance/expectations/<backend>.txt. The suite lives at
// $ONNX_NODE_SUITE (default DefaultSuiteDir, from Debian's
// libonnx-testdata). When it is missing the test fails if CI=true and is
// skipped, loudly, otherwise. $ATTNRUN_BIN names a prebuilt attnrun;
// otherwise the test builds one.
func TestNodeSuite(t *testing.T) {
	dir := os.Getenv("ONNX_NODE_SUITE")
	if dir == "" {
		dir = DefaultSuiteDir
	}
	if _, err := os.Stat(dir); err != nil {
		msg := "ONNX node suite NOT RUN: " + err.Error() +
			" (install it with `apt-get install libonnx-testdata`, or set ONNX_NODE_SUITE)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("!!!!!!!! " + msg + " !!!!!!!!")
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
		t.Run(b.Name, func(t *testing.T) {
			exp, err := ReadExpectations(filepath.Join("expectations", b.Name+".txt"))
			if err != nil {
				t.Fatalf("backend %s is available but has no usable expectations file: %v "+
					"(create it with go run ./conformance/nodesuite --backend %s --update)", b.Name, err, b.Name)
			}
			rep, err := Run(ctx, Config{
				Attnrun: bin, Backend: b.Name, SuiteDir: dir, Expectations: exp,
				Rtol: SuiteRtol, Atol: SuiteAtol,
			})
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
