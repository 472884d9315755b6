package session

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestInProcessOption runs the tiny model with the CPU backend inside this
// process: it reports the host's pid, computes the same results (plain and
// bound outputs), honours a cancelled context, still takes the CPU backend's
// fallback nodes from a plugin running in its own process (logged as
// usual), and refuses runs once closed.
func TestInProcessOption(t *testing.T) {
	s, _ := openTiny(t, Options{InProcess: true})
	bs := s.Backends()
	if len(bs) != 1 || bs[0].Name != CPU || bs[0].Pid != os.Getpid() || bs[0].Details["in_process"] != "true" || !bs[0].Available {
		t.Fatalf("backends %+v, want the cpu backend in this process (pid %d)", bs, os.Getpid())
	}
	in, want := tinyInputs()
	out, err := s.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y", out["y"], []int{2, 3}, want, 1e-6)
	y := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(make([]float32, 6)))
	out, err = s.RunWith(context.Background(), in, RunOptions{Into: map[string]*tensor.Dense{"y": y}})
	if err != nil {
		t.Fatal(err)
	}
	if out["y"] != y {
		t.Error("the bound output is not the bound tensor")
	}
	checkClose(t, "bound y", y, []int{2, 3}, want, 1e-6)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, in); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v, want an error matching context.Canceled", err)
	}

	p, logs := openTiny(t, Options{Backend: "picky", PluginDir: pluginDir(t), InProcess: true})
	bs = p.Backends()
	if len(bs) != 2 || bs[0].Name != "picky" || bs[0].Pid == os.Getpid() || bs[1].Name != CPU || bs[1].Pid != os.Getpid() {
		t.Errorf("backends %+v: want picky in a process, cpu in this one", bs)
	}
	if !strings.Contains(logs.String(), `node "/Softmax" (Softmax) falls back from backend "picky" to "cpu"`) {
		t.Errorf("fallback not logged; log:\n%s", logs)
	}
	out, err = p.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y with fallback", out["y"], []int{2, 3}, want, 1e-6)

	s.Close()
	if _, err := s.Run(context.Background(), in); err == nil || !strings.Contains(err.Error(), "session is closed") {
		t.Errorf("run after Close: %v", err)
	}
}
