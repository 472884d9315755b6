package gpu_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// noCgoEnv enables the CGO_ENABLED=0 variant of TestUnavailableEndToEnd.
const noCgoEnv = "ATTNRUN_TEST_NOCGO"

// build compiles a main package of the module into dir.
func build(t *testing.T, dir, pkg string, env ...string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// run executes a command and returns stdout, stderr and the exit status.
func run(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestUnavailableEndToEnd builds attnrun and the gpu plugin (with and
// without cgo) and checks, on a machine without a usable GPU, that the
// plugin starts and reports why, that `attnrun backends` lists it as
// unavailable with that reason, and that `attnrun run --backend gpu` fails
// with the reason and exit status 1 instead of falling back or panicking.
func TestUnavailableEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	tmp := t.TempDir()
	attnrun := build(t, tmp, "./cmd/attnrun")
	model, err := filepath.Abs("../../models/s000_multi_head/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		env    []string
		reason string // a prefix of the expected reason
	}{
		{"cgo", []string{"CGO_ENABLED=1"}, ""},
		{"nocgo", []string{"CGO_ENABLED=0"}, "built without cgo (CGO_ENABLED=0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "nocgo" && os.Getenv(noCgoEnv) != "1" {
				// A CGO_ENABLED=0 build recompiles net and everything above
				// it: too slow for every run.
				t.Skipf("set %s=1 to build and check the plugin without cgo", noCgoEnv)
			}
			dir := filepath.Join(tmp, c.name)
			plugin := build(t, dir, "./cmd/attnrun-backend-gpu", c.env...)
			if err := os.Rename(plugin, filepath.Join(dir, "attnrun-backend-gpu")); err != nil {
				t.Fatal(err)
			}
			probeOut, _, code := run(t, nil, filepath.Join(dir, "attnrun-backend-gpu"), "--probe")
			if code == 0 {
				t.Skip("this machine has a usable GPU:\n" + probeOut)
			}
			var reason string
			for _, l := range strings.Split(probeOut, "\n") {
				if r, ok := strings.CutPrefix(l, "unavailable: "); ok {
					reason = r
				}
			}
			if code != 1 || reason == "" || !strings.HasPrefix(reason, c.reason) || !strings.Contains(probeOut, "cuda: unavailable") {
				t.Fatalf("probe exit %d, output:\n%s", code, probeOut)
			}
			if c.name == "cgo" && !strings.Contains(reason, "libcuda.so.1 not found") && !strings.HasPrefix(reason, "cuInit failed") &&
				!strings.Contains(reason, "no CUDA device") {
				t.Errorf("unexpected reason %q", reason)
			}

			stdout, stderr, code := run(t, nil, attnrun, "backends", "--plugin-dir", dir)
			want := "gpu  unavailable: " + reason + "\n  executable: " + filepath.Join(dir, "attnrun-backend-gpu") + "\n"
			if code != 0 || !strings.Contains(stdout, want) || !strings.HasPrefix(stdout, "cpu ") {
				t.Errorf("attnrun backends: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a line block:\n%s", code, stdout, stderr, want)
			}

			wantErr := "attnrun: backend \"gpu\" is unavailable: " + reason + "\n"
			for _, args := range [][]string{
				{"run", "--plugin-dir", dir, "--backend", "gpu", model, "-i", "x=random:1x16x32"},
				{"run", "--backend", "gpu", model, "-i", "x=random:1x16x32"}, // plugin dir from the environment
			} {
				env := []string{"ATTNRUN_PLUGIN_DIR=" + dir}
				stdout, stderr, code := run(t, env, attnrun, args...)
				if code != 1 || stderr != wantErr || stdout != "" || strings.Contains(stderr, "panic") {
					t.Errorf("attnrun %s: exit %d\nstdout: %q\nstderr: %q\nwant stderr %q", strings.Join(args, " "), code, stdout, stderr, wantErr)
				}
			}
		})
	}
}
