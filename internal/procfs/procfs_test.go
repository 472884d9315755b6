package procfs

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestStateChildrenRSS(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer cmd.Process.Kill()
	if st, ppid := State(pid); st == "" || ppid != os.Getpid() {
		t.Errorf("sleep: state %q, parent %d (want %d)", st, ppid, os.Getpid())
	}
	if !slices.Contains(Children(os.Getpid()), pid) {
		t.Errorf("children %v lack %d", Children(os.Getpid()), pid)
	}
	if RSS(os.Getpid()) <= 0 {
		t.Errorf("own RSS %d", RSS(os.Getpid()))
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, _ := State(pid); st == "T" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never seen stopped")
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !Gone(pid) {
		t.Errorf("reaped process not gone: %v", pid)
	}
}
