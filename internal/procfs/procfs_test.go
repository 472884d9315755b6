package procfs

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
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
	if hwm, err := Size(os.Getpid(), "VmHWM"); err != nil || hwm < RSS(os.Getpid())/2 {
		t.Errorf("own VmHWM %d, %v", hwm, err)
	}
	if _, err := Size(os.Getpid(), "VmNothing"); err == nil {
		t.Error("a missing field read without an error")
	}
	if Stopped(pid) || Stopped(os.Getpid()) {
		t.Errorf("running processes seen stopped: sleep %v, this test %v", Stopped(pid), Stopped(os.Getpid()))
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, _ := State(pid); st == "T" && Stopped(pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never seen stopped")
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !Gone(pid) || Stopped(pid) {
		t.Errorf("reaped process not gone (%v) or seen stopped (%v): %v", Gone(pid), Stopped(pid), pid)
	}
}

func TestWithEnv(t *testing.T) {
	mark := "PROCFS_TEST_MARK=" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if got := WithEnv(mark); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("WithEnv(%q) = %v, want [%d]", mark, got, cmd.Process.Pid)
	}
	if got := WithEnv(mark + "0"); len(got) != 0 {
		t.Errorf("a longer value matched: %v", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := WithEnv(mark); len(got) != 0 {
		t.Errorf("after the process ended: %v", got)
	}
}
