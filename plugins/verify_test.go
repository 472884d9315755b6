package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/backends/cpu"
	"github.com/attnrun/attnrun/plugins"
	"golang.org/x/sys/unix"
)

func unixMkfifo(path string) error { return unix.Mkfifo(path, 0o644) }

func writeMode(t *testing.T, path, text string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func sha(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// TestDiscoverVerifies checks each refusal of plugin verification, and that
// accepted files carry their SHA-256.
func TestDiscoverVerifies(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, plugins.ExecutablePrefix+name) }
	good := writeMode(t, p("good"), "#!/bin/sh\n", 0o755)
	writeMode(t, filepath.Join(dir, "inside"), "#!/bin/sh\n", 0o755)
	if err := os.Symlink("inside", p("linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/sh", p("shell")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	writeMode(t, filepath.Join(dir, "sub", "x"), "#!/bin/sh\n", 0o755)
	if err := os.Symlink("sub/x", p("insub")); err != nil {
		t.Fatal(err)
	}
	writeMode(t, p("worldw"), "#!/bin/sh\n", 0o757)
	writeMode(t, p("groupw"), "#!/bin/sh\n", 0o775)
	writeMode(t, p("setuid"), "#!/bin/sh\n", 0o755|os.ModeSetuid)
	writeMode(t, p("setgid"), "#!/bin/sh\n", 0o755|os.ModeSetgid)
	if err := unixMkfifo(p("fifo")); err != nil {
		t.Fatal(err)
	}
	wantOther := ""
	if nobody, err := user.Lookup("nobody"); err == nil && os.Geteuid() == 0 {
		other := writeMode(t, p("other"), "#!/bin/sh\n", 0o755)
		uid, _ := strconv.Atoi(nobody.Uid)
		if err := os.Chown(other, uid, -1); err != nil {
			t.Fatal(err)
		}
		wantOther = fmt.Sprintf("other: owned by uid %d (nobody), not by root or the user running attnrun", uid)
	}
	got, err := plugins.Discover(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got {
		lines = append(lines, c.Name+": "+strings.ReplaceAll(c.Reason, dir, "DIR"))
		if c.Reason == "" && c.SHA256 != sha(t, c.Path) {
			t.Errorf("%s: SHA-256 %q", c.Name, c.SHA256)
		}
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	want := []string{
		"fifo: not a regular file",
		"good: ",
		"groupw: writable by group or others (mode -rwxrwxr-x)",
		"insub: symlink to DIR/sub/x: its directory: writable by group or others (mode drwxrwxrwx)",
		"linked: ",
	}
	if wantOther != "" {
		want = append(want, wantOther)
	}
	want = append(want,
		"setgid: setuid or setgid (mode grwxr-xr-x)",
		"setuid: setuid or setgid (mode urwxr-xr-x)",
		"shell: symlink to "+sh+", outside the plugin directory",
		"worldw: writable by group or others (mode -rwxr-xrwx)",
	)
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("Discover:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got[1].SHA256 != sha(t, good) {
		t.Errorf("good: SHA-256 %q", got[1].SHA256)
	}

	// A group-writable plugin directory refuses everything in it.
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	got, err = plugins.Discover(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got {
		if c.Reason != "plugin directory "+dir+": writable by group or others (mode drwxrwx---)" {
			t.Errorf("%s in a group-writable directory: %q", c.Name, c.Reason)
		}
	}
}

// TestLockFile checks pinning: matches, mismatches, unlisted plugins, a
// malformed or writable lock file.
func TestLockFile(t *testing.T) {
	dir := t.TempDir()
	a := writeMode(t, filepath.Join(dir, "attnrun-backend-a"), "#!/bin/sh\necho a\n", 0o755)
	writeMode(t, filepath.Join(dir, "attnrun-backend-b"), "#!/bin/sh\necho b\n", 0o755)
	writeMode(t, filepath.Join(dir, "attnrun-backend-c"), "#!/bin/sh\necho c\n", 0o755)
	lock := filepath.Join(dir, plugins.LockFileName)
	zero := strings.Repeat("0", 64)
	cases := []struct {
		name, lock string
		mode       os.FileMode
		want       []string
	}{
		{"pins", fmt.Sprintf("# comment\n\n%s  attnrun-backend-a\n%s *%s/attnrun-backend-b\n", sha(t, a), strings.ToUpper(zero), dir), 0o644, []string{
			"a: ",
			"b: SHA-256 " + sha(t, filepath.Join(dir, "attnrun-backend-b")) + " does not match " + zero + " pinned in LOCK",
			"c: not pinned in LOCK",
		}},
		{"malformed", "not a hash  attnrun-backend-a\n", 0o644, []string{
			`a: lock file LOCK: line 1: want "<sha256 hex>  <file name>", got "not a hash  attnrun-backend-a"`,
			`b: lock file LOCK: line 1: want "<sha256 hex>  <file name>", got "not a hash  attnrun-backend-a"`,
			`c: lock file LOCK: line 1: want "<sha256 hex>  <file name>", got "not a hash  attnrun-backend-a"`,
		}},
		{"writable", sha(t, a) + "  attnrun-backend-a\n", 0o666, []string{
			"a: lock file LOCK: writable by group or others (mode -rw-rw-rw-)",
			"b: lock file LOCK: writable by group or others (mode -rw-rw-rw-)",
			"c: lock file LOCK: writable by group or others (mode -rw-rw-rw-)",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeMode(t, lock, c.lock, c.mode)
			got, err := plugins.Discover(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, cand := range got {
				lines = append(lines, cand.Name+": "+strings.ReplaceAll(cand.Reason, lock, "LOCK"))
			}
			if strings.Join(lines, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
	os.Remove(lock)
	if _, _, err := plugins.OpenPlugin(dir, "a", filepath.Join(dir, "missing.lock")); err == nil || !strings.Contains(err.Error(), "missing.lock: no such file") {
		t.Errorf("a named lock file that is missing: %v", err)
	}
}

// TestLaunchRunsTheVerifiedFile: the file OpenPlugin checked is what
// Launch executes, even when its name is replaced in between.
func TestLaunchRunsTheVerifiedFile(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := writeMode(t, filepath.Join(dir, "attnrun-backend-swapped"), fmt.Sprintf("#!/bin/sh\nexec %q\n", self), 0o755)
	writeMode(t, filepath.Join(dir, plugins.LockFileName), sha(t, path)+"  attnrun-backend-swapped\n", 0o644)
	f, _, err := plugins.OpenPlugin(dir, "swapped", "")
	if err != nil {
		t.Fatal(err)
	}
	// Replace the name with another file, as an attacker with write access
	// to the directory would.
	evil := writeMode(t, filepath.Join(dir, "evil"), "#!/bin/sh\necho evil\nexit 7\n", 0o755)
	if err := os.Rename(evil, path); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path)
	cmd.Env = []string{cpu.ServeEnv + "=" + cpu.Name}
	p, err := plugins.Launch(context.Background(), plugins.LaunchSpec{Name: "swapped", Cmd: cmd, Exe: f})
	if err != nil {
		t.Fatalf("the verified file did not run: %v", err)
	}
	p.Kill()
	// Verifying again sees the new file, which the lock refuses.
	if _, _, err := plugins.OpenPlugin(dir, "swapped", ""); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("swapped plugin: %v", err)
	}
}
