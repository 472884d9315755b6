package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/attnrun/attnrun/internal/procfs"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"gorgonia.org/tensor"
)

// TestDoorbell: Runs whose tensors lie in the shared region ring the
// doorbell instead of calling Run over gRPC, and give the same answers;
// with NoDoorbellEnv=1, or without a region, every Run goes over gRPC.
func TestDoorbell(t *testing.T) {
	cases := []struct {
		name string
		env  string
		spec plugins.LaunchSpec
		want uint64 // doorbell Runs out of 5
	}{
		{"doorbell", "", plugins.LaunchSpec{}, 5},
		{"no doorbell", "1", plugins.LaunchSpec{}, 0},
		{"no region", "", plugins.LaunchSpec{SharedBytes: -1}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(plugins.NoDoorbellEnv, c.env)
			p := launchCPU(t, c.spec)
			id := compile(t, p, mixedModel())
			for run := 0; run < 5; run++ {
				mc := newMixedCase(1000+run, 77, 13, float32(run))
				out, err := p.Run(context.Background(), id, mc.in)
				if err != nil {
					t.Fatal(err)
				}
				mc.check(t, out)
			}
			if got := p.DoorbellRuns(); got != c.want {
				t.Errorf("%d Runs through the doorbell, want %d", got, c.want)
			}
		})
	}
}

// expandModel is y = Expand(x, [rows, n]): an output rows times its input.
func expandModel(rows, n int64) *ir.Model {
	return &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name:             "expand",
			Nodes:            []*ir.Node{{Name: "/Expand", OpType: "Expand", Inputs: []string{"x", "shape"}, Outputs: []string{"y"}}},
			Inputs:           []*ir.ValueInfo{vi("x", ir.Float, "n")},
			Outputs:          []*ir.ValueInfo{vi("y", ir.Float, "r", "n")},
			Initializers:     map[string]*ir.Tensor{"shape": {DType: ir.Int64, Shape: []int{2}, Data: []int64{rows, n}}},
			InitializerOrder: []string{"shape"},
		},
	}
}

// TestDoorbellLargeResponse: an output that fits neither the region (it
// may not grow past 64 KiB) nor the doorbell's response area travels
// inline: the doorbell says so and the Run goes over gRPC, with the right
// answer; the next small Run rings the doorbell again.
func TestDoorbellLargeResponse(t *testing.T) {
	p := launchCPU(t, plugins.LaunchSpec{SharedBytes: 64 * kib, SharedMaxBytes: 64 * kib})
	const rows, n = 512, 1024 // 2 MiB of output from 4 KiB of input
	id := compile(t, p, expandModel(rows, n))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i) - 0.5
	}
	out, err := p.Run(context.Background(), id, map[string]*tensor.Dense{"x": tensor.New(tensor.WithShape(n), tensor.WithBacking(x))})
	if err != nil {
		t.Fatal(err)
	}
	y := out["y"].Data().([]float32)
	if len(y) != rows*n {
		t.Fatalf("y has %d elements, want %d", len(y), rows*n)
	}
	for i, v := range y {
		if v != x[i%n] {
			t.Fatalf("y[%d] = %v, want %v", i, v, x[i%n])
		}
	}
	if got := p.DoorbellRuns(); got != 0 {
		t.Errorf("%d Runs answered through the doorbell, want 0 (the response did not fit)", got)
	}
	id2 := compile(t, p, mixedModel())
	mc := newMixedCase(100, 10, 10, 3)
	out, err = p.Run(context.Background(), id2, mc.in)
	if err != nil {
		t.Fatal(err)
	}
	mc.check(t, out)
	if got := p.DoorbellRuns(); got != 1 {
		t.Errorf("%d Runs answered through the doorbell, want 1", got)
	}
}

// TestDoorbellStoppedBackend: a Run waiting on the doorbell of a stopped
// backend (SIGSTOP: nothing answers) returns soon after its context ends,
// with the context's error; and one whose stopped backend is then killed
// (SIGKILL, from outside the host) fails with a *DiedError instead of
// waiting for ever. Both with GOMAXPROCS 1, where the host sleeps in a
// futex the Go runtime knows of, and with 2, where it sleeps in a raw one
// holding its P (futexWaitHolding): the context's wake-up and the death
// check must reach it either way.
func TestDoorbellStoppedBackend(t *testing.T) {
	for _, tc := range []struct {
		c     string
		procs int
	}{{"cancel", 2}, {"kill", 2}, {"cancel", 1}, {"kill", 1}} {
		c := tc.c
		t.Run(fmt.Sprintf("%s/GOMAXPROCS=%d", c, tc.procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			p := launchCPU(t, plugins.LaunchSpec{})
			id := compile(t, p, mixedModel())
			mc := newMixedCase(1000, 10, 10, 1)
			if _, err := p.Run(context.Background(), id, mc.in); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitStopped(t, p.Pid())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := p.Run(ctx, id, mc.in)
				done <- err
			}()
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			if c == "cancel" {
				cancel()
			} else if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("the Run did not return within 5 s of the %s", c)
			}
			t.Logf("returned %v after the %s: %v", time.Since(start), c, err)
			var died *plugins.DiedError
			switch {
			case c == "cancel" && !errors.Is(err, context.Canceled):
				t.Fatalf("got %v, want context.Canceled", err)
			case c == "kill" && !errors.As(err, &died):
				t.Fatalf("got %v (%T), want a *DiedError", err, err)
			}
			if p.DoorbellRuns() != 1 {
				t.Errorf("%d Runs answered through the doorbell, want 1 (the first)", p.DoorbellRuns())
			}
		})
	}
}

// waitStopped waits until every thread of process pid is stopped (kill
// returns before the signal has reached them all).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if procfs.Stopped(pid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within 5 s of SIGSTOP", pid)
		}
	}
}
