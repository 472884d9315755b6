package session

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/attnrun/attnrun/backends/cpu"
)

// TestBackendDiesInFusedStep: a backend that dies while running a fused
// step is reported with the fused node and the nodes it replaced (before,
// the error named only the last original node, /Add, as if it ran alone).
func TestBackendDiesInFusedStep(t *testing.T) {
	t.Setenv(cpu.FaultEnv, "kill-before:FusedMatMul")
	s, _ := openTiny(t, Options{})
	os.Unsetenv(cpu.FaultEnv)
	pid := s.Backends()[0].Pid
	in, _ := tinyInputs()
	_, err := s.Run(context.Background(), in)
	want := fmt.Sprintf(`backend "cpu" (pid %d) died while running fused node "/MatMul/FusedMatMul" (com.attnrun:FusedMatMul, replacing "/MatMul", "/Add") of partition 0: signal: killed`, pid)
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant    %s", err, want)
	}
}
