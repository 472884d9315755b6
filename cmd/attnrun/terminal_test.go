package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: what the child writes to the
// returned terminal (its stderr) is read back from master.
func openPTY(t *testing.T) (master, term *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	term, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening /dev/pts/%d: %v", n, err)
	}
	return master, term
}

// attnrunOnTerminal runs attnrun with stderr on a pseudo-terminal and
// returns stdout and what reached the terminal.
func attnrunOnTerminal(t *testing.T, args ...string) (stdout, terminal string) {
	t.Helper()
	code, terminal, stdout := runOnTerminal(t, false, args...)
	if code != 0 {
		t.Fatalf("attnrun %s: exit %d\nstdout: %s\nterminal: %q", strings.Join(args, " "), code, stdout, terminal)
	}
	return stdout, terminal
}

// attnrunStdoutOnTerminal runs attnrun with stdout on a pseudo-terminal
// and returns its exit status, what reached the terminal and stderr.
func attnrunStdoutOnTerminal(t *testing.T, args ...string) (code int, terminal, stderr string) {
	t.Helper()
	return runOnTerminal(t, true, args...)
}

// runOnTerminal runs attnrun with stdout (onStdout) or stderr on a
// pseudo-terminal, and the other stream in a buffer.
func runOnTerminal(t *testing.T, onStdout bool, args ...string) (code int, terminal, other string) {
	t.Helper()
	master, term := openPTY(t)
	defer master.Close()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), "ATTNRUN_PLUGIN_DIR=")
	var buf bytes.Buffer
	if onStdout {
		cmd.Stdout, cmd.Stderr = term, &buf
	} else {
		cmd.Stdout, cmd.Stderr = &buf, term
	}
	var seen bytes.Buffer
	done := make(chan struct{})
	go func() {
		// Reading ends with EIO once no process holds the terminal open.
		_, _ = io.Copy(&seen, master)
		close(done)
	}()
	err := cmd.Run()
	term.Close()
	<-done
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("attnrun %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), seen.String(), buf.String()
}

// TestProgressOnlyOnATerminal: bench draws its progress bar when stderr is
// a terminal, and not with --quiet or --json, nor when stderr is a pipe;
// profile's bar says "profile".
func TestProgressOnlyOnATerminal(t *testing.T) {
	model := filepath.Join(modelsDir, "s003_self_attention", "model.onnx")
	args := []string{"bench", model, "-i", "x=random:3x32", "--iters", "30", "--warmup", "2"}

	stdout, terminal := attnrunOnTerminal(t, args...)
	if !strings.Contains(terminal, "\rbench [") || !strings.Contains(terminal, "] 32/32  last ") {
		t.Errorf("no progress bar on the terminal: %q", terminal)
	}
	if !strings.Contains(stdout, "latency:") || strings.Contains(stdout, "\r") {
		t.Errorf("stdout %q", stdout)
	}
	for _, flag := range []string{"--quiet", "-q", "--json"} {
		stdout, terminal := attnrunOnTerminal(t, append(args, flag)...)
		if terminal != "" {
			t.Errorf("%s: the terminal got %q", flag, terminal)
		}
		if stdout == "" {
			t.Errorf("%s: no results on stdout", flag)
		}
	}
	r := attnrun(t, args...) // stderr is a pipe
	r.wantOK(t)
	if r.stderr != "" {
		t.Errorf("stderr is a pipe, yet it got %q", r.stderr)
	}
	latency := regexp.MustCompile(`(?m)^latency: +p50 [0-9.]+ ms  p90 [0-9.]+ ms  p99 [0-9.]+ ms  min [0-9.]+ ms  max [0-9.]+ ms\n +mean [0-9.]+ ms  stddev [0-9.]+ ms$`)
	if !latency.MatchString(r.stdout) {
		t.Errorf("stdout lacks the latency lines (p50 … p99 … stddev):\n%s", r.stdout)
	}
	// profile draws the same bar, labelled with its own name.
	trace := filepath.Join(t.TempDir(), "trace.json")
	_, terminal = attnrunOnTerminal(t, "profile", model, "-i", "x=random:3x32", "--iters", "30", "--warmup", "2", "--trace", trace)
	if !strings.Contains(terminal, "\rprofile [") || !strings.Contains(terminal, "] 32/32  last ") || strings.Contains(terminal, "bench [") {
		t.Errorf("profile's progress bar on the terminal: %q", terminal)
	}
}
