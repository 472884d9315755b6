package plugins_test

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/plugins"
)

// maxRSSEnv makes this test binary print plugins.ProcessMaxRSS and exit.
const maxRSSEnv = "ATTNRUN_TEST_PRINT_MAXRSS"

// TestProcessMaxRSSIsOwn checks that a process's peak RSS is its own: a
// child started by a parent that holds 256 MiB reports far less (getrusage's
// ru_maxrss would carry the parent's 256 MiB across fork and exec).
func TestProcessMaxRSSIsOwn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux's")
	}
	big := make([]byte, 256<<20)
	for i := 0; i < len(big); i += 4096 {
		big[i] = 1
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), maxRSSEnv+"=1")
	out, err := cmd.Output()
	runtime.KeepAlive(big)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	if n <= 0 || n >= 128<<20 {
		t.Fatalf("child's peak RSS = %d bytes; want its own (a test binary's few MiB), not its parent's 256 MiB", n)
	}
	if own := plugins.ProcessMaxRSS(); own < 256<<20 {
		t.Fatalf("this process's peak RSS = %d bytes, want at least the 256 MiB it holds", own)
	}
}
