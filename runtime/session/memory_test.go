package session

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/internal/procfs"
	"github.com/attnrun/attnrun/plugins"
)

// vmRSS reads a process's resident set size from /proc/<pid>/status.
func vmRSS(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmRSS") }

// vmHWM reads a process's peak resident set size.
func vmHWM(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmHWM") }

// procStatus reads a size field of /proc/<pid>/status in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	n, err := procfs.Size(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// backendPeak is the backend's peak RSS (getrusage in the backend).
func backendPeak(t *testing.T, s *Session) int64 {
	t.Helper()
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st[CPU].MaxRSSBytes
}

func randomDense(r *rand.Rand, shape ...int) *tensor.Dense {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = r.Float32()*2 - 1
	}
	return dense(shape, data)
}

// TestSweepPeakBounded: running one model over many sequence lengths keeps
// the backend's peak memory near what the largest length alone needs. Each
// cached plan used to keep an arena of its own (300 lengths on a 19 MB
// model peaked at 5.46 GiB against 252 MiB for the largest length alone);
// arenas are now shared by every plan and the plan cache is bounded by
// bytes. (Before, this sweep peaked at 483 MiB against 40 MiB; now at
// about 55 MiB.)
func TestSweepPeakBounded(t *testing.T) {
	model := "../../models/s004_param_free/model.onnx" // softmax(x xᵀ) x, x: [batch, seq, 32]
	const largest = 1536
	r := rand.New(rand.NewSource(1))
	peak := func(seqs []int) int64 {
		// Unfused, so that each length's plan has seq×seq score buffers.
		s, err := Open(context.Background(), model, Options{Logf: t.Logf, NoFuse: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, seq := range seqs {
			if _, err := s.Run(context.Background(), map[string]*tensor.Dense{"x": randomDense(r, 1, seq, 32)}); err != nil {
				t.Fatal(err)
			}
		}
		return backendPeak(t, s)
	}
	single := peak([]int{largest, largest})
	var sweep []int
	for seq := 12; seq <= largest; seq += 12 {
		sweep = append(sweep, seq)
	}
	swept := peak(sweep)
	t.Logf("backend peak RSS: %d MiB for seq %d alone, %d MiB for %d lengths 12..%d", single>>20, largest, swept>>20, len(sweep), largest)
	if swept > 2*single {
		t.Errorf("the sweep peaked at %d MiB, the largest length alone at %d MiB", swept>>20, single>>20)
	}
}

// TestIdleShrink: after one large request, the shared region and the
// backend's run memory shrink back once the session is idle (they stayed at
// 3.2 GiB for minutes after an 800 MiB request). ATTNRUN_SHRINK_MB sets the
// request's size (default 256).
func TestIdleShrink(t *testing.T) {
	if raceDetector {
		// The race detector's shadow of the request's memory stays
		// resident after the memory is given back (host 72 → 1533 → 802
		// MiB, backend 46 → 1072 → 706 MiB idle under -race).
		t.Skip("resident sizes under -race include the race detector's shadow memory, which is not given back; run without -race")
	}
	t.Setenv(plugins.IdleReleaseEnv, "300ms")
	mb := 256
	if v, err := strconv.Atoi(os.Getenv("ATTNRUN_SHRINK_MB")); err == nil && v > 0 {
		mb = v
	}
	s, _ := openTiny(t, Options{})
	pid := s.Backends()[0].Pid
	small, _ := tinyInputs()
	if _, err := s.Run(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	settle := func() {
		runtime.GC()
		debug.FreeOSMemory()
	}
	settle()
	hostBefore, backBefore := vmRSS(t, os.Getpid()), vmRSS(t, pid)
	// x: [batch, 4] and r: [batch, 3] float32, mb MiB in all.
	batch := mb << 20 / 28
	r := rand.New(rand.NewSource(3))
	big := map[string]*tensor.Dense{"x": randomDense(r, batch, 4), "r": randomDense(r, batch, 3)}
	out, err := s.Run(context.Background(), big)
	if err != nil {
		t.Fatal(err)
	}
	if got := out["y"].Shape(); got[0] != batch {
		t.Fatalf("output shape %v", got)
	}
	hostPeak, backPeak := vmRSS(t, os.Getpid()), vmRSS(t, pid)
	shared := func() int64 { return s.pools[0].members[0].current().p.(*plugins.Process).SharedBytes() }
	region := shared()
	big, out = nil, nil
	// Idle for a while: the region shrinks, the backend drops its arenas.
	deadline := time.Now().Add(10 * time.Second)
	var hostAfter, backAfter int64
	for time.Now().Before(deadline) {
		time.Sleep(400 * time.Millisecond)
		settle()
		hostAfter, backAfter = vmRSS(t, os.Getpid()), vmRSS(t, pid)
		if hostAfter < hostBefore+64<<20 && backAfter < backBefore+64<<20 {
			break
		}
	}
	t.Logf("request of %d MiB: host RSS %d → %d → %d MiB, backend RSS %d → %d → %d MiB (before → after the request → idle); region %d → %d MiB",
		mb, hostBefore>>20, hostPeak>>20, hostAfter>>20, backBefore>>20, backPeak>>20, backAfter>>20, region>>20, shared()>>20)
	if backPeak < backBefore+int64(mb)<<20/2 || hostPeak < hostBefore+int64(mb)<<20/2 {
		t.Fatalf("the request did not grow the processes (host %d → %d, backend %d → %d MiB): nothing to shrink", hostBefore>>20, hostPeak>>20, backBefore>>20, backPeak>>20)
	}
	if hostAfter > hostBefore+64<<20 || backAfter > backBefore+64<<20 {
		smaps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		t.Errorf("idle after the request: host RSS %d MiB (was %d), backend %d MiB (was %d); backend's smaps_rollup:\n%s", hostAfter>>20, hostBefore>>20, backAfter>>20, backBefore>>20, smaps)
	}
	if got := shared(); got > plugins.DefaultSharedBytes {
		t.Errorf("the shared region is %d MiB after idling", got>>20)
	}
	// And it still runs.
	if _, err := s.Run(context.Background(), small); err != nil {
		t.Fatal(err)
	}
}

// TestInProcessIdleShrink: with the CPU backend in process, a large run
// whose outputs are all bound (computed into memory the partition reuses,
// then copied into the caller's tensors) leaves the host's RSS where it was
// once the session has been idle a while: the partition's run memory is
// released after the outputs are copied out, as in a backend process.
func TestInProcessIdleShrink(t *testing.T) {
	if raceDetector {
		t.Skip("resident sizes under -race include the race detector's shadow memory, which is not given back; run without -race")
	}
	const idle = 300 * time.Millisecond
	t.Setenv(plugins.IdleReleaseEnv, idle.String())
	s, _ := openTiny(t, Options{InProcess: true})
	small, _ := tinyInputs()
	if _, err := s.Run(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * idle) // the small run's idle release is over
	settle := func() {
		runtime.GC()
		debug.FreeOSMemory()
	}
	settle()
	before := vmRSS(t, os.Getpid())
	const mb = 256
	batch := mb << 20 / 28 // x: [batch, 4], r and y: [batch, 3] float32
	r := rand.New(rand.NewSource(4))
	big := map[string]*tensor.Dense{"x": randomDense(r, batch, 4), "r": randomDense(r, batch, 3)}
	y := dense([]int{batch, 3}, make([]float32, batch*3))
	if _, err := s.RunWith(context.Background(), big, RunOptions{Into: map[string]*tensor.Dense{"y": y}}); err != nil {
		t.Fatal(err)
	}
	peak := vmRSS(t, os.Getpid())
	big, y = nil, nil
	var after int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(400 * time.Millisecond)
		settle()
		if after = vmRSS(t, os.Getpid()); after < before+64<<20 {
			break
		}
	}
	t.Logf("request of %d MiB in process: RSS %d → %d → %d MiB (before → after the request → idle)", mb, before>>20, peak>>20, after>>20)
	if peak < before+mb<<20/2 {
		t.Fatalf("the request did not grow the process (%d → %d MiB): nothing to shrink", before>>20, peak>>20)
	}
	if after > before+64<<20 {
		t.Errorf("idle after the request: RSS %d MiB (was %d)", after>>20, before>>20)
	}
}
