package plugins_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/attnrun/attnrun/backends/cpu"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"gorgonia.org/tensor"
)

// newInProcessCPU runs the CPU backend inside this test process.
func newInProcessCPU(t testing.TB) *plugins.InProcess {
	p := plugins.NewInProcess(cpu.Name, func(st *plugins.StatusWriter) plugins.Server { return cpu.NewInProcessServer(st, nil) })
	t.Cleanup(p.Kill)
	return p
}

// TestInProcessRuns runs the mixed model (float32, bool and int64 tensors,
// outputs that are Identities of inputs) on the CPU backend inside this
// process: plain and bound outputs are right run after run, the caller's
// inputs are left as they were, and no output shares an input's memory.
func TestInProcessRuns(t *testing.T) {
	p := newInProcessCPU(t)
	info, err := p.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Pid != os.Getpid() || info.Details["in_process"] != "true" || info.Name != cpu.Name || len(info.Ops) == 0 || info.ProtocolVersion != plugins.ProtocolVersion {
		t.Errorf("info: pid %d (this process %d), details %v, name %q, %d ops, protocol %d", info.Pid, os.Getpid(), info.Details, info.Name, len(info.Ops), info.ProtocolVersion)
	}
	id := compile(t, p, mixedModel())
	for run := 0; run < 3; run++ {
		mc := newMixedCase(1000, 77, 13, float32(run))
		before := newMixedCase(1000, 77, 13, float32(run))
		out, err := p.Run(context.Background(), id, mc.in)
		if err != nil {
			t.Fatal(err)
		}
		mc.check(t, out)
		for name, d := range mc.in {
			if !equal(data(t, d), data(t, before.in[name])) {
				t.Errorf("run %d: input %q was written", run, name)
			}
		}
		// xi and ii are Identities of x and i: copies, not the inputs.
		data(t, out["xi"]).([]float32)[0] = -1
		data(t, out["ii"]).([]int64)[0] = -1
		if data(t, mc.in["x"]).([]float32)[0] == -1 || data(t, mc.in["i"]).([]int64)[0] == -1 {
			t.Errorf("run %d: an output shares an input's memory", run)
		}
	}
	const n, m, k = 5000, 77, 13
	into := map[string]*tensor.Dense{
		"y":  tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n))),
		"nb": tensor.New(tensor.WithShape(m), tensor.WithBacking(make([]bool, m))),
	}
	for run := 0; run < 3; run++ {
		mc := newMixedCase(n, m, k, float32(run))
		out, err := p.RunInto(context.Background(), id, mc.in, into)
		if err != nil {
			t.Fatal(err)
		}
		if out["y"] != into["y"] || out["nb"] != into["nb"] {
			t.Fatalf("run %d: bound outputs are not the bound tensors", run)
		}
		mc.check(t, out)
	}
	st, err := p.Stats(context.Background())
	if err != nil || st.Partitions != 1 || st.Runs != 6 {
		t.Errorf("stats %+v, %v: want 1 partition, 6 runs", st, err)
	}
}

// TestInProcessConcurrentRuns: 8 goroutines share one in-process backend
// (run with -race).
func TestInProcessConcurrentRuns(t *testing.T) {
	p := newInProcessCPU(t)
	id := compile(t, p, mixedModel())
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				mc := newMixedCase(500+g*10, 10+g, 3+g, float32(g*100+r))
				out, err := p.Run(context.Background(), id, mc.in)
				if err != nil {
					t.Error(err)
					return
				}
				for name, want := range mc.want {
					if !equal(data(t, out[name]), want) {
						t.Errorf("goroutine %d run %d: output %q differs", g, r, name)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
}

// TestInProcessAllBound: when a Run binds every output, the in-process
// backend computes into memory the partition reuses and copies out once;
// goroutines running at once, each with its own bound tensors, each get
// their own results (run with -race).
func TestInProcessAllBound(t *testing.T) {
	p := newInProcessCPU(t)
	id := compile(t, p, mixedModel())
	const n, m, k = 3000, 50, 7
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			into := allBound(n, m, k)
			for r := 0; r < 10; r++ {
				mc := newMixedCase(n, m, k, float32(g*100+r))
				out, err := p.RunInto(context.Background(), id, mc.in, into)
				if err != nil {
					t.Error(err)
					return
				}
				for name, d := range into {
					if out[name] != d {
						t.Errorf("output %q is not the bound tensor", name)
						return
					}
					if !equal(data(t, d), mc.want[name]) {
						t.Errorf("goroutine %d run %d: output %q differs", g, r, name)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// panicky is the CPU backend with a kernel bug: Run panics while the status
// page says node 1 is running.
type panicky struct {
	*cpu.Server
	status *plugins.StatusWriter
}

func (s panicky) Run(_ context.Context, id plugins.PartitionID, _ map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	s.status.Running(id, 1)
	panic("kernel bug")
}

// TestInProcessPanic: a panic in the backend's call is not the host's end:
// it is a *DiedError naming the node, the backend ends (so that a session
// starts a fresh one), and later calls say why.
func TestInProcessPanic(t *testing.T) {
	p := plugins.NewInProcess(cpu.Name, func(st *plugins.StatusWriter) plugins.Server {
		return panicky{cpu.NewInProcessServer(st, nil), st}
	})
	defer p.Kill()
	id := compile(t, p, mixedModel())
	_, err := p.Run(context.Background(), id, newMixedCase(10, 10, 10, 0).in)
	var died *plugins.DiedError
	if !errors.As(err, &died) || !died.InProcess {
		t.Fatalf("error %v (%T), want an in-process *DiedError", err, err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, `backend "cpu" (in process) panicked while running node "/`) || !strings.HasSuffix(msg, " of partition 0: panic: kernel bug") {
		t.Errorf("error %q", msg)
	}
	if !p.Exited() || p.ExitErr() == nil {
		t.Errorf("after the panic: exited %v, exit error %v", p.Exited(), p.ExitErr())
	}
	_, err = p.Run(context.Background(), id, newMixedCase(10, 10, 10, 0).in)
	if want := `run: backend "cpu" (in process) ended after panic: kernel bug`; err == nil || err.Error() != want {
		t.Errorf("run after the panic: %v, want %s", err, want)
	}
}

// TestInProcessCancelled: a Run whose context has ended returns an
// *InterruptedError matching the context's error, and the backend stays
// usable.
func TestInProcessCancelled(t *testing.T) {
	p := newInProcessCPU(t)
	id := compile(t, p, mixedModel())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Run(ctx, id, newMixedCase(10, 10, 10, 0).in)
	var intr *plugins.InterruptedError
	if !errors.As(err, &intr) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v (%T), want an *InterruptedError matching context.Canceled", err, err)
	}
	mc := newMixedCase(10, 10, 10, 1)
	out, err := p.Run(context.Background(), id, mc.in)
	if err != nil {
		t.Fatal(err)
	}
	mc.check(t, out)
	p.Kill()
	if _, err := p.Run(context.Background(), id, mc.in); err == nil || err.Error() != `run: backend "cpu" (in process) was shut down` {
		t.Errorf("run after Kill: %v", err)
	}
}

// releaseCounter is the CPU backend counting the OutputsReleased calls its
// protocol layer makes.
type releaseCounter struct {
	*cpu.Server
	released *atomic.Int64
}

func (s releaseCounter) OutputsReleased() {
	s.released.Add(1)
	s.Server.OutputsReleased()
}

// TestInProcessProfile: a profiled in-process Run reports the host's pid,
// the Server's step times inside its Run, and the host's spans in order
// (inputs, call, outputs, all within Host); a Run that binds every output
// tells the Server when they are copied out (its run memory is idle from
// then on, as in a backend process), one that does not, never.
func TestInProcessProfile(t *testing.T) {
	var released atomic.Int64
	p := plugins.NewInProcess(cpu.Name, func(st *plugins.StatusWriter) plugins.Server {
		return releaseCounter{cpu.NewInProcessServer(st, nil), &released}
	})
	defer p.Kill()
	id := compile(t, p, mixedModel())
	const n, m, k = 3000, 50, 7
	into := allBound(n, m, k)
	for _, bound := range []bool{false, true} {
		var prof plugins.RunProfile
		mc := newMixedCase(n, m, k, 1)
		var b map[string]*tensor.Dense
		if bound {
			b = into
		}
		out, err := p.RunInto(plugins.WithProfile(context.Background(), &prof), id, mc.in, b)
		if err != nil {
			t.Fatal(err)
		}
		mc.check(t, out)
		if prof.Pid != os.Getpid() || len(prof.Steps) == 0 {
			t.Fatalf("bound %v: pid %d (this process %d), %d steps", bound, prof.Pid, os.Getpid(), len(prof.Steps))
		}
		for _, st := range prof.Steps {
			if st.Name == "" || st.OpType == "" || st.Start.Before(prof.Run.Start) || st.End().After(prof.Run.End()) {
				t.Errorf("bound %v: step %+v outside the run %+v", bound, st, prof.Run)
			}
		}
		if prof.Run != prof.Call || prof.WriteInputs.Start.Before(prof.Host.Start) || prof.Call.Start.Before(prof.WriteInputs.End()) ||
			prof.ReadOutputs.Start.Before(prof.Call.End()) || prof.ReadOutputs.End().After(prof.Host.End()) || prof.Host.Duration <= 0 {
			t.Errorf("bound %v: spans out of order: host %+v, inputs %+v, call %+v, run %+v, outputs %+v", bound, prof.Host, prof.WriteInputs, prof.Call, prof.Run, prof.ReadOutputs)
		}
		want := int64(0)
		if bound {
			want = 1
		}
		if got := released.Load(); got != want {
			t.Errorf("bound %v: OutputsReleased called %d times, want %d", bound, got, want)
		}
	}
}
