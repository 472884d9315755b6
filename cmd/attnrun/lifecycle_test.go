package main

// Regression tests for issue 9 against the real attnrun binary: signals
// (Ctrl-C ignored while a backend was stopped; SIGTERM and SIGHUP leaking
// go-plugin's socket directory and the backend), plugins that hang
// `attnrun backends` and `--backend x`, and plugin verification.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attnrun/attnrun/internal/procfs"
)

// procState is the state letter of /proc/PID/stat ("T": stopped), ""
// when the process is gone.
func procState(pid int) string {
	st, _ := procfs.State(pid)
	return st
}

// gone reports whether pid has ended (or is a zombie).
var gone = procfs.Gone

// waitGone waits up to limit for pid to end, failing the test (and killing
// the process) if it does not.
func waitGone(t *testing.T, pid int, limit time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !gone(pid) {
		if time.Now().After(deadline) {
			st := procState(pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s (pid %d) still there in state %s after %v", what, pid, st, limit)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// socketDirs lists go-plugin's socket directories under dir.
func socketDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "plugin-dir*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// signalRun is an attnrun bench running until it is signalled.
type signalRun struct {
	cmd     *exec.Cmd
	stderr  *bytes.Buffer
	backend int
	tmp     string // attnrun's TMPDIR
	waited  chan struct{}
}

// startBench starts a long bench with its own TMPDIR and waits until its
// backend runs and the first runs are done.
func startBench(t *testing.T) *signalRun {
	t.Helper()
	bin, err := filepath.Abs(binPath)
	if err != nil {
		t.Fatal(err)
	}
	r := &signalRun{tmp: t.TempDir(), stderr: &bytes.Buffer{}, waited: make(chan struct{})}
	model := filepath.Join(modelsDir, "s000_multi_head", "model.onnx")
	r.cmd = exec.Command(bin, "bench", model, "-i", "x=random:1x16x32", "--iters", "100000000", "--warmup", "0")
	r.cmd.Env = append(os.Environ(), "TMPDIR="+r.tmp, "ATTNRUN_PLUGIN_DIR=")
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = r.cmd.Wait()
		close(r.waited)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.waited
		if r.backend > 0 && !gone(r.backend) {
			_ = syscall.Kill(r.backend, syscall.SIGKILL)
		}
	})
	tasks := filepath.Join("/proc", strconv.Itoa(r.cmd.Process.Pid), "task")
	deadline := time.Now().Add(30 * time.Second)
	for r.backend == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no backend child of attnrun after 30 s; stderr:\n%s", r.stderr)
		}
		if kids := childrenOf(r.cmd.Process.Pid, tasks); len(kids) > 0 {
			r.backend = kids[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a few hundred runs
	// The first child seen may be the Go runtime's short-lived pidfd probe
	// (os/exec forks one at its first use); by now only the backend is left.
	kids := childrenOf(r.cmd.Process.Pid, tasks)
	if len(kids) != 1 {
		t.Fatalf("attnrun has children %v, want just its backend; stderr:\n%s", kids, r.stderr)
	}
	r.backend = kids[0]
	return r
}

// signal sends sig to attnrun and returns how long it took to exit.
func (r *signalRun) signal(t *testing.T, sig syscall.Signal) time.Duration {
	t.Helper()
	start := time.Now()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.waited:
		return time.Since(start)
	case <-time.After(20 * time.Second):
		t.Fatalf("attnrun still running 20 s after %v; stderr:\n%s", sig, r.stderr)
		return 0
	}
}

// TestSignalsExitPromptly: Ctrl-C (SIGINT), SIGTERM and SIGHUP end `attnrun
// bench` within 1 s with status 128+n, whether the backend is healthy or
// stopped (SIGSTOP; Ctrl-C used to be ignored then, twice), and leave no
// backend (stopped or not) and no /tmp/plugin-dir* behind.
func TestSignalsExitPromptly(t *testing.T) {
	cases := []struct {
		sig  syscall.Signal
		name string
		stop bool
	}{
		{syscall.SIGINT, "SIGINT", false},
		{syscall.SIGINT, "SIGINT", true},
		{syscall.SIGTERM, "SIGTERM", true},
		{syscall.SIGHUP, "SIGHUP", true},
	}
	for _, c := range cases {
		name := c.name + " healthy backend"
		if c.stop {
			name = c.name + " stopped backend"
		}
		t.Run(name, func(t *testing.T) {
			// A stall of a loaded machine is not a slow exit, a repeatable
			// one is: up to three tries, the fastest counts.
			var best time.Duration
			for try := 0; try < 3; try++ {
				r := startBench(t)
				if c.stop {
					if err := syscall.Kill(r.backend, syscall.SIGSTOP); err != nil {
						t.Fatal(err)
					}
					for !procfs.Stopped(r.backend) {
						time.Sleep(time.Millisecond)
					}
				}
				took := r.signal(t, c.sig)
				if try == 0 || took < best {
					best = took
				}
				if code := r.cmd.ProcessState.ExitCode(); code != 128+int(c.sig) {
					t.Errorf("exit status %d, want %d; stderr:\n%s", code, 128+int(c.sig), r.stderr)
				}
				if line := "attnrun: interrupted (" + c.name + ")\n"; !strings.HasSuffix("\n"+r.stderr.String(), "\n"+line) {
					t.Errorf("stderr does not end with the interruption line:\n%q", r.stderr)
				}
				waitGone(t, r.backend, 2*time.Second, "backend")
				if dirs := socketDirs(t, r.tmp); len(dirs) > 0 {
					t.Errorf("left behind: %v", dirs)
				}
				t.Logf("try %d: exited %v after %s", try, took, c.name)
				if best <= time.Second {
					break
				}
			}
			if best > time.Second {
				t.Errorf("attnrun took %v to exit after %s (best of 3), want ≤ 1 s", best, c.name)
			}
		})
	}
}

// hostilePlugins makes a plugin directory of backends that used to hang
// attnrun: "silent" handshakes and then never answers (it stops itself in
// Info); "holder" is a wrapper script that leaves a child holding its
// stdout and stderr, then execs the real backend; "holdout" leaves such a
// child and exits without a handshake. Each script appends its pid to
// pids, and the children's pids to children.
func hostilePlugins(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(binPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pids, kids := filepath.Join(dir, "pids"), filepath.Join(dir, "children")
	scripts := map[string]string{
		"silent":  fmt.Sprintf("echo $$ >> %q\nATTNRUN_SERVE_BACKEND=cpu ATTNRUN_CPU_FAULT=stop-in:Info exec %q\n", pids, bin),
		"holder":  fmt.Sprintf("echo $$ >> %q\nsleep 300 &\necho $! >> %q\nATTNRUN_SERVE_BACKEND=cpu exec %q\n", pids, kids, bin),
		"holdout": fmt.Sprintf("echo $$ >> %q\nsleep 300 &\necho $! >> %q\necho not a plugin\nexit 1\n", pids, kids),
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(dir, "attnrun-backend-"+name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, f := range []string{pids, kids} {
			data, _ := os.ReadFile(f)
			for _, p := range strings.Fields(string(data)) {
				if pid, _ := strconv.Atoi(p); pid > 0 && !gone(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	return dir
}

// readPids reads a file of pids, one a line.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %q", path, f)
		}
		out = append(out, n)
	}
	return out
}

// TestHostilePluginsBounded: `attnrun backends` and `--backend silent`
// return in bounded time (the Info deadline) instead of hanging, and every
// plugin process and wrapper child is gone afterwards (killed as a process
// group).
func TestHostilePluginsBounded(t *testing.T) {
	const limit = 12 * time.Second // InfoTimeout (5 s) and margin
	dir := hostilePlugins(t)
	tmp := t.TempDir()
	o := runOpts{env: map[string]string{"TMPDIR": tmp}}
	r := attnrunWith(t, o, "backends", "--plugin-dir", dir)
	r.wantOK(t)
	if r.wall > wallLimit(t, limit) {
		t.Errorf("backends took %v", r.wall)
	}
	for _, want := range []string{
		"\nholder 0.1.0\n",
		"\nholdout  unavailable: launch backend \"holdout\" (" + dir + "/attnrun-backend-holdout): Unrecognized remote plugin message: not a plugin",
		"\nsilent  unavailable: backend \"silent\" (pid ",
		") did not answer info within 5s and was killed\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	t.Logf("attnrun backends with hostile plugins: %v", r.wall)

	model := filepath.Join(modelsDir, "s003_self_attention", "model.onnx")
	r = attnrunWith(t, o, "run", model, "-i", "x=random:3x32", "--backend", "silent", "--plugin-dir", dir)
	r.wantError(t, 1, limit, `backend "silent" (pid `, "did not answer info within 5s and was killed")

	for _, pid := range append(readPids(t, filepath.Join(dir, "pids")), readPids(t, filepath.Join(dir, "children"))...) {
		waitGone(t, pid, 2*time.Second, "plugin process or its child")
	}
	if dirs := socketDirs(t, tmp); len(dirs) > 0 {
		t.Errorf("left behind: %v", dirs)
	}
}

// TestBackendsRefusesUnsafePlugins: plugin verification. Every variant is a
// script that would record that it ran; refused ones are listed with the
// reason and never run.
func TestBackendsRefusesUnsafePlugins(t *testing.T) {
	bin, err := filepath.Abs(binPath)
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody:", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	if os.Geteuid() != 0 {
		t.Skip("chown to nobody needs root")
	}
	script := func(dir, name string) string {
		return fmt.Sprintf("#!/bin/sh\ntouch %q\nATTNRUN_SERVE_BACKEND=cpu exec %q\n", filepath.Join(dir, "ran-"+name), bin)
	}
	write := func(dir, file, text string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, []byte(text), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sum := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		return hex.EncodeToString(h[:])
	}
	ran := func(dir, name string) bool {
		_, err := os.Stat(filepath.Join(dir, "ran-"+name))
		return err == nil
	}

	dir := t.TempDir()
	good := write(dir, "attnrun-backend-good", script(dir, "good"), 0o755)
	write(dir, "real-backend", script(dir, "linked"), 0o755)
	if err := os.Symlink("real-backend", filepath.Join(dir, "attnrun-backend-linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/sh", filepath.Join(dir, "attnrun-backend-shell")); err != nil {
		t.Fatal(err)
	}
	write(dir, "attnrun-backend-worldw", script(dir, "worldw"), 0o757)
	write(dir, "attnrun-backend-groupw", script(dir, "groupw"), 0o775)
	write(dir, "attnrun-backend-setuid", script(dir, "setuid"), 0o755|os.ModeSetuid)
	write(dir, "attnrun-backend-setgid", script(dir, "setgid"), 0o755|os.ModeSetgid)
	other := write(dir, "attnrun-backend-other", script(dir, "other"), 0o755)
	if err := os.Chown(other, uid, -1); err != nil {
		t.Fatal(err)
	}
	r := attnrun(t, "backends", "--plugin-dir", dir)
	r.wantOK(t)
	cases := []struct {
		name, want string
		runs       bool
	}{
		{"good", "\ngood 0.1.0\n  executable: " + good + "\n  sha256: " + sum(good) + "\n", true},
		{"linked", "\nlinked 0.1.0\n  executable: " + filepath.Join(dir, "attnrun-backend-linked") + "\n", true},
		{"shell", "\nshell  unavailable: symlink to ", false},
		{"worldw", "\nworldw  unavailable: writable by group or others (mode -rwxr-xrwx)\n", false},
		{"groupw", "\ngroupw  unavailable: writable by group or others (mode -rwxrwxr-x)\n", false},
		{"setuid", "\nsetuid  unavailable: setuid or setgid (mode urwxr-xr-x)\n", false},
		{"setgid", "\nsetgid  unavailable: setuid or setgid (mode grwxr-xr-x)\n", false},
		{"other", fmt.Sprintf("\nother  unavailable: owned by uid %d (nobody), not by root or the user running attnrun\n", uid), false},
	}
	for _, c := range cases {
		if !strings.Contains(r.stdout, c.want) {
			t.Errorf("%s: stdout lacks %q", c.name, c.want)
		}
		if ran(dir, c.name) != c.runs {
			t.Errorf("%s: ran %v, want %v", c.name, ran(dir, c.name), c.runs)
		}
	}
	if !strings.Contains(r.stdout, "outside the plugin directory\n") {
		t.Errorf("shell: no reason")
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", r.stdout)
	}
	// --backend on a refused plugin: refused, not run.
	model := filepath.Join(modelsDir, "s003_self_attention", "model.onnx")
	r = attnrun(t, "run", model, "-i", "x=random:3x32", "--backend", "worldw", "--plugin-dir", dir)
	r.wantError(t, 1, cmdWall, `backend "worldw": `+dir+`/attnrun-backend-worldw is refused: writable by group or others`)
	if ran(dir, "worldw") {
		t.Error("worldw ran")
	}

	t.Run("world-writable directory", func(t *testing.T) {
		dir := t.TempDir()
		write(dir, "attnrun-backend-good", script(dir, "good"), 0o755)
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		r := attnrun(t, "backends", "--plugin-dir", dir)
		r.wantOK(t)
		if want := fmt.Sprintf("\ngood  unavailable: plugin directory %s: writable by group or others (mode drwxrwxrwx)\n", dir); !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
		if ran(dir, "good") {
			t.Error("a plugin in a world-writable directory ran")
		}
	})

	t.Run("lock file", func(t *testing.T) {
		dir := t.TempDir()
		pinned := write(dir, "attnrun-backend-pinned", script(dir, "pinned"), 0o755)
		changed := write(dir, "attnrun-backend-changed", script(dir, "changed"), 0o755)
		write(dir, "attnrun-backend-unpinned", script(dir, "unpinned"), 0o755)
		stale := strings.Repeat("ab", 32)
		lock := fmt.Sprintf("# sha256sum attnrun-backend-*\n%s  attnrun-backend-pinned\n%s  attnrun-backend-changed\n", sum(pinned), stale)
		write(dir, "attnrun-plugins.lock", lock, 0o644)
		r := attnrun(t, "backends", "--plugin-dir", dir)
		r.wantOK(t)
		for _, want := range []string{
			"\npinned 0.1.0\n  executable: " + pinned + "\n  sha256: " + sum(pinned) + "\n",
			fmt.Sprintf("\nchanged  unavailable: SHA-256 %s does not match %s pinned in %s\n  executable: %s\n  sha256: %s\n", sum(changed), stale, filepath.Join(dir, "attnrun-plugins.lock"), changed, sum(changed)),
			fmt.Sprintf("\nunpinned  unavailable: not pinned in %s\n", filepath.Join(dir, "attnrun-plugins.lock")),
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
			}
		}
		if !ran(dir, "pinned") || ran(dir, "changed") || ran(dir, "unpinned") {
			t.Errorf("ran: pinned %v changed %v unpinned %v", ran(dir, "pinned"), ran(dir, "changed"), ran(dir, "unpinned"))
		}
		// --plugin-lock names a lock file elsewhere; one that pins nothing
		// here refuses every plugin.
		elsewhere := write(t.TempDir(), "other.lock", stale+"  attnrun-backend-nothing\n", 0o644)
		r = attnrun(t, "run", model, "-i", "x=random:3x32", "--backend", "pinned", "--plugin-dir", dir, "--plugin-lock", elsewhere)
		r.wantError(t, 1, cmdWall, `backend "pinned": `+pinned+` is refused: not pinned in `+elsewhere)
	})
}
