package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/attnrun/attnrun/backends/cpu"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"gorgonia.org/tensor"
)

// TestMain lets this test binary serve as the echo backend, or print its
// peak RSS (TestProcessMaxRSSIsOwn); as the CPU
// backend (launchCPU re-executes it with ATTNRUN_SERVE_BACKEND=cpu) it
// serves from package cpu's init, before TestMain.
func TestMain(m *testing.M) {
	if os.Getenv(echoEnv) == "1" {
		plugins.Serve(echoServer{})
		os.Exit(0)
	}
	if os.Getenv(maxRSSEnv) == "1" {
		fmt.Println(plugins.ProcessMaxRSS())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// echoEnv makes this test binary serve echoServer.
const echoEnv = "ATTNRUN_TEST_ECHO_BACKEND"

// echoServer is a backend whose Run returns its inputs themselves as
// outputs: the output tensors are the backend's views of the shared region.
type echoServer struct{}

func (echoServer) Info(context.Context) (*plugins.Info, error) {
	return &plugins.Info{Name: "echo", ProtocolVersion: plugins.ProtocolVersion}, nil
}
func (echoServer) Capability(_ context.Context, q []plugins.NodeQuery) ([]plugins.Verdict, error) {
	return make([]plugins.Verdict, len(q)), nil
}
func (echoServer) Compile(context.Context, []byte, plugins.CompileOptions) (plugins.PartitionID, []plugins.NodeRef, error) {
	return 7, nil, nil
}
func (echoServer) Run(_ context.Context, _ plugins.PartitionID, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	return in, nil
}
func (echoServer) Release(context.Context, plugins.PartitionID) error { return nil }
func (echoServer) Stats(context.Context) (*plugins.Stats, error)      { return &plugins.Stats{}, nil }

// launchCPU starts this test binary as the CPU backend.
func launchCPU(t testing.TB, spec plugins.LaunchSpec, env ...string) *plugins.Process {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append([]string{cpu.ServeEnv + "=" + cpu.Name}, env...)
	spec.Name, spec.Cmd = "cpu", cmd
	p, err := plugins.Launch(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func vi(name string, dt ir.DType, dims ...string) *ir.ValueInfo {
	shape := make(ir.Shape, len(dims))
	for i, d := range dims {
		shape[i] = ir.Dim{Param: d}
	}
	return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: dt, Shape: shape, RankKnown: true}}
}

// mixedModel has three inputs of different element types and four outputs,
// two of which (Identity) alias an input inside the backend:
//
//	y  = x + 1      float32[n]
//	xi = x          float32[n]
//	nb = not b      bool[m]
//	ii = i          int64[k]
func mixedModel() *ir.Model {
	return &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name: "mixed",
			Nodes: []*ir.Node{
				{Name: "/Add", OpType: "Add", Inputs: []string{"x", "one"}, Outputs: []string{"y"}},
				{Name: "/IdX", OpType: "Identity", Inputs: []string{"x"}, Outputs: []string{"xi"}},
				{Name: "/Not", OpType: "Not", Inputs: []string{"b"}, Outputs: []string{"nb"}},
				{Name: "/IdI", OpType: "Identity", Inputs: []string{"i"}, Outputs: []string{"ii"}},
			},
			Inputs:           []*ir.ValueInfo{vi("x", ir.Float, "n"), vi("b", ir.Bool, "m"), vi("i", ir.Int64, "k")},
			Outputs:          []*ir.ValueInfo{vi("y", ir.Float, "n"), vi("xi", ir.Float, "n"), vi("nb", ir.Bool, "m"), vi("ii", ir.Int64, "k")},
			Initializers:     map[string]*ir.Tensor{"one": ir.Scalar(float32(1))},
			InitializerOrder: []string{"one"},
		},
	}
}

// mixedCase holds inputs for mixedModel and the outputs it must give.
type mixedCase struct {
	in   map[string]*tensor.Dense
	want map[string]any
}

// allBound makes tensors to bind every output of mixedModel for a case of
// newMixedCase(n, m, k, ...).
func allBound(n, m, k int) map[string]*tensor.Dense {
	return map[string]*tensor.Dense{
		"y":  tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n))),
		"xi": tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n))),
		"nb": tensor.New(tensor.WithShape(m), tensor.WithBacking(make([]bool, m))),
		"ii": tensor.New(tensor.WithShape(k), tensor.WithBacking(make([]int64, k))),
	}
}

func newMixedCase(n, m, k int, seed float32) mixedCase {
	x, y := make([]float32, n), make([]float32, n)
	for j := range x {
		x[j] = seed + float32(j%1000)*0.5
		y[j] = x[j] + 1
	}
	b, nb := make([]bool, m), make([]bool, m)
	for j := range b {
		b[j] = j%3 == 0
		nb[j] = !b[j]
	}
	i := make([]int64, k)
	for j := range i {
		i[j] = int64(j)*7 - 1<<40
	}
	d := func(data any, n int) *tensor.Dense {
		return tensor.New(tensor.WithShape(n), tensor.WithBacking(data))
	}
	return mixedCase{
		in:   map[string]*tensor.Dense{"x": d(x, n), "b": d(b, m), "i": d(i, k)},
		want: map[string]any{"y": y, "xi": slices.Clone(x), "nb": nb, "ii": slices.Clone(i)},
	}
}

func (c mixedCase) check(t testing.TB, out map[string]*tensor.Dense) {
	t.Helper()
	if len(out) != len(c.want) {
		t.Fatalf("%d outputs, want %d", len(out), len(c.want))
	}
	for name, want := range c.want {
		d := out[name]
		if d == nil {
			t.Fatalf("no output %q", name)
		}
		if got := data(t, d); !equal(got, want) {
			t.Fatalf("output %q = %.200s…, want %.200s…", name, fmt.Sprint(got), fmt.Sprint(want))
		}
	}
}

// differs names an output that is not what it must be ("" when all are),
// for goroutines that cannot stop the test.
func (c mixedCase) differs(t testing.TB, out map[string]*tensor.Dense) string {
	for name, want := range c.want {
		if !equal(data(t, out[name]), want) {
			return name
		}
	}
	return ""
}

// data is d's backing slice (gorgonia's Data panics on empty tensors).
func data(t testing.TB, d *tensor.Dense) any {
	if d == nil {
		return nil
	}
	it, err := ir.FromDense(d)
	if err != nil {
		t.Error(err)
		return nil
	}
	return it.Data
}

// equal compares backing slices (faster than reflect.DeepEqual on big ones).
func equal(got, want any) bool {
	switch w := want.(type) {
	case []float32:
		g, ok := got.([]float32)
		return ok && slices.Equal(g, w)
	case []int64:
		g, ok := got.([]int64)
		return ok && slices.Equal(g, w)
	case []bool:
		g, ok := got.([]bool)
		return ok && slices.Equal(g, w)
	}
	return false
}

// compile compiles m in p.
func compile(t testing.TB, p plugins.Backend, m *ir.Model) plugins.PartitionID {
	t.Helper()
	id, err := p.Compile(context.Background(), m, plugins.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

const (
	kib = 1 << 10
	mib = 1 << 20
)

func TestSharedTensors(t *testing.T) {
	cases := []struct {
		name    string
		spec    plugins.LaunchSpec
		n, m, k int
		// wantShared is the region's size after the runs (0: no region).
		wantShared int64
	}{
		{"shared", plugins.LaunchSpec{}, 1000, 77, 13, plugins.DefaultSharedBytes},
		{"inline", plugins.LaunchSpec{SharedBytes: -1}, 1000, 77, 13, 0},
		{"empty tensors", plugins.LaunchSpec{}, 0, 0, 0, plugins.DefaultSharedBytes},
		// x is 192 KiB: the 64 KiB region grows to 512 KiB for the first
		// run (which guesses outputs as large as inputs: 387 KiB in all)
		// and stays there: xi and ii are views of inputs in the region,
		// so the outputs need only y's and nb's 193 KiB.
		{"growth", plugins.LaunchSpec{SharedBytes: 64 * kib, SharedMaxBytes: 64 * mib}, 48 * kib, 100, 100, 512 * kib},
		// The region may not grow past 64 KiB: x, y and xi travel inline,
		// b, nb, i and ii through the region.
		{"fallback", plugins.LaunchSpec{SharedBytes: 32 * kib, SharedMaxBytes: 64 * kib}, 48 * kib, 100, 100, 64 * kib},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := launchCPU(t, c.spec)
			id := compile(t, p, mixedModel())
			for run := 0; run < 3; run++ { // inputs and region reused
				mc := newMixedCase(c.n, c.m, c.k, float32(run))
				out, err := p.Run(context.Background(), id, mc.in)
				if err != nil {
					t.Fatal(err)
				}
				mc.check(t, out)
			}
			if got := p.SharedBytes(); got != c.wantShared {
				t.Errorf("region is %d bytes, want %d", got, c.wantShared)
			}
		})
	}
}

// TestRunInto binds every output of the mixed model (float32, bool, int64)
// to caller tensors, through the region and inline: each result is the bound
// tensor, holding the right values, run after run.
func TestRunInto(t *testing.T) {
	for _, spec := range []plugins.LaunchSpec{{}, {SharedBytes: -1}} {
		t.Run(fmt.Sprintf("SharedBytes=%d", spec.SharedBytes), func(t *testing.T) {
			p := launchCPU(t, spec)
			id := compile(t, p, mixedModel())
			const n, m, k = 5000, 77, 13
			into := allBound(n, m, k)
			for run := 0; run < 3; run++ {
				mc := newMixedCase(n, m, k, float32(run))
				out, err := p.RunInto(context.Background(), id, mc.in, into)
				if err != nil {
					t.Fatal(err)
				}
				for name, d := range into {
					if out[name] != d {
						t.Fatalf("run %d: output %q is not the bound tensor", run, name)
					}
				}
				mc.check(t, out)
			}
		})
	}
}

// TestOutputViewsOfInputs runs a backend whose outputs are its inputs (views
// of the region): they are described in place, need no output room, and
// arrive intact.
func TestOutputViewsOfInputs(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = []string{echoEnv + "=1"}
	p, err := plugins.Launch(context.Background(), plugins.LaunchSpec{Name: "echo", Cmd: cmd, SharedBytes: 64 * kib, SharedMaxBytes: 64 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	id := compile(t, p, mixedModel())
	for run := 0; run < 3; run++ {
		mc := newMixedCase(48*kib, 100, 100, float32(run))
		out, err := p.Run(context.Background(), id, mc.in)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"x", "b", "i"} {
			if got, want := data(t, out[name]), data(t, mc.in[name]); !equal(got, want) {
				t.Fatalf("run %d: output %q differs from the input", run, name)
			}
		}
	}
	// 193.5 KiB in, as much guessed out: 512 KiB; afterwards the outputs
	// need no room (cf. 1 MiB in TestSharedTensors/growth).
	if got := p.SharedBytes(); got != 512*kib {
		t.Errorf("region is %d bytes, want 512 KiB", got)
	}
}

// TestSharedTensorOver64MiB sends a tensor of 64 MiB and 4 KiB through
// Identity with the default region (64 MiB): the region grows and the values
// survive the trip.
func TestSharedTensorOver64MiB(t *testing.T) {
	p := launchCPU(t, plugins.LaunchSpec{})
	id := compile(t, p, identityModel())
	x := make([]float32, 16*mib+1024)
	for i := range x {
		x[i] = float32(i%4093) - 2000
	}
	out, err := p.Run(context.Background(), id, map[string]*tensor.Dense{"x": tensor.New(tensor.WithShape(len(x)), tensor.WithBacking(x))})
	if err != nil {
		t.Fatal(err)
	}
	if got := data(t, out["y"]); !equal(got, x) {
		t.Fatal("y differs from x")
	}
	// The first Run guesses its outputs as large as its inputs: 128 MiB and
	// 8 KiB do not fit in 128 MiB, so 64 MiB doubles twice.
	if got := p.SharedBytes(); got != 256*mib {
		t.Errorf("region is %d bytes, want 256 MiB", got)
	}
}

// TestConcurrentRuns runs from several goroutines on one process: the region
// serializes them, and each gets its own results.
func TestConcurrentRuns(t *testing.T) {
	p := launchCPU(t, plugins.LaunchSpec{})
	id := compile(t, p, mixedModel())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				mc := newMixedCase(5000+g*100, 10+g, 3+g, float32(g*100+r))
				out, err := p.Run(context.Background(), id, mc.in)
				if err != nil {
					errs <- err
					return
				}
				if name := mc.differs(t, out); name != "" {
					errs <- fmt.Errorf("goroutine %d run %d: output %q differs", g, r, name)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestShrinkBetweenAbandonedRuns: the idle shrink (after 1 ms idle here)
// against rounds of Runs of changing sizes from several goroutines, many
// of them abandoned at short deadlines while the backend still reads or
// writes the region. Every answer must be right, every failure an
// interruption by the caller's context, and after each round the region
// must go back to its initial size: the shrink never takes the region from
// a Run, nor from the drain that holds it for an abandoned Run until the
// backend lets go, but it comes once they let go.
func TestShrinkBetweenAbandonedRuns(t *testing.T) {
	t.Setenv(plugins.IdleReleaseEnv, "1ms")
	p := launchCPU(t, plugins.LaunchSpec{SharedBytes: 64 * kib, SharedMaxBytes: 64 * mib})
	id := compile(t, p, mixedModel())
	var answered, interrupted atomic.Int64
	for round := 0; round < 6; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for r := 0; r < 8; r++ {
					k := round*8 + r
					n := 1000 + (g*7919+k*104729)%(1<<20) // 4 KiB to 4 MiB of x
					mc := newMixedCase(n, 10+r, 3+g, float32(g*1000+k))
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if k%3 != 0 {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(50+(g*31+k*17)%3000)*time.Microsecond)
					}
					out, err := p.Run(ctx, id, mc.in)
					cancel()
					switch {
					case err == nil:
						answered.Add(1)
						if name := mc.differs(t, out); name != "" {
							errs <- fmt.Errorf("round %d, goroutine %d, run %d (n %d): output %q differs", round, g, r, n, name)
							return
						}
					case errors.Is(err, context.DeadlineExceeded):
						interrupted.Add(1)
					default:
						errs <- fmt.Errorf("round %d, goroutine %d, run %d (n %d): %v", round, g, r, n, err)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); p.SharedBytes() != 64*kib; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the idle region stayed at %d bytes", round, p.SharedBytes())
			}
		}
	}
	t.Logf("%d answered, %d interrupted", answered.Load(), interrupted.Load())
	if answered.Load() == 0 || interrupted.Load() == 0 {
		t.Errorf("%d answered, %d interrupted: the test wants both", answered.Load(), interrupted.Load())
	}
	// The backend is healthy and the region usable.
	mc := newMixedCase(300000, 5, 5, 1)
	out, err := p.Run(context.Background(), id, mc.in)
	if err != nil {
		t.Fatal(err)
	}
	mc.check(t, out)
}

// TestSharedDiedError kills the backend mid-run, with inputs in the region:
// the error still names the node, and the host's region is released.
func TestSharedDiedError(t *testing.T) {
	p := launchCPU(t, plugins.LaunchSpec{}, cpu.FaultEnv+"=kill-before:Not")
	id := compile(t, p, mixedModel())
	mc := newMixedCase(100, 10, 10, 1)
	_, err := p.Run(context.Background(), id, mc.in)
	var died *plugins.DiedError
	if !errors.As(err, &died) {
		t.Fatalf("error %v (%T), want a *DiedError", err, err)
	}
	want := fmt.Sprintf(`backend "cpu" (pid %d) died while running node "/Not" (Not) of partition %d: signal: killed`, p.Pid(), id)
	if err.Error() != want {
		t.Fatalf("error %q\nwant      %q", err, want)
	}
	done := make(chan struct{})
	go func() { p.Kill(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Kill hangs after a failed Run")
	}
	if _, err := p.Run(context.Background(), id, mc.in); err == nil {
		t.Fatal("Run after Kill succeeded")
	}
}

// TestNoSharedMemoryEnv checks that ATTNRUN_NO_SHM=1 turns the region off.
func TestNoSharedMemoryEnv(t *testing.T) {
	t.Setenv(plugins.NoSharedMemoryEnv, "1")
	p := launchCPU(t, plugins.LaunchSpec{})
	if got := p.SharedBytes(); got != 0 {
		t.Fatalf("region is %d bytes with %s=1", got, plugins.NoSharedMemoryEnv)
	}
	id := compile(t, p, mixedModel())
	mc := newMixedCase(10, 10, 10, 1)
	out, err := p.Run(context.Background(), id, mc.in)
	if err != nil {
		t.Fatal(err)
	}
	mc.check(t, out)
}

// identityModel is y = Identity(x) for float32 x of any length.
func identityModel() *ir.Model {
	return &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name:    "identity",
			Nodes:   []*ir.Node{{Name: "/Identity", OpType: "Identity", Inputs: []string{"x"}, Outputs: []string{"y"}}},
			Inputs:  []*ir.ValueInfo{vi("x", ir.Float, "n")},
			Outputs: []*ir.ValueInfo{vi("y", ir.Float, "n")},
		},
	}
}

// BenchmarkRoundTrip4MiB sends a 4 MiB float32 tensor to the backend and
// back (Identity), through the shared region and inline in the gRPC
// messages. It reports the median round trip as p50-ms.
func BenchmarkRoundTrip4MiB(b *testing.B) {
	for _, c := range []struct {
		name string
		spec plugins.LaunchSpec
	}{{"shm", plugins.LaunchSpec{}}, {"inline", plugins.LaunchSpec{SharedBytes: -1}}} {
		b.Run(c.name, func(b *testing.B) {
			p := launchCPU(b, c.spec)
			id := compile(b, p, identityModel())
			x := make([]float32, mib)
			for i := range x {
				x[i] = float32(i)
			}
			in := map[string]*tensor.Dense{"x": tensor.New(tensor.WithShape(len(x)), tensor.WithBacking(x))}
			ctx := context.Background()
			for i := 0; i < 3; i++ { // warm up: region pages, plan
				if _, err := p.Run(ctx, id, in); err != nil {
					b.Fatal(err)
				}
			}
			times := make([]time.Duration, 0, b.N)
			b.SetBytes(8 * mib)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, err := p.Run(ctx, id, in)
				if err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
				if y := out["y"].Data().([]float32); y[len(y)-1] != x[len(x)-1] {
					b.Fatalf("y[-1] = %v", y[len(y)-1])
				}
			}
			b.StopTimer()
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e6, "p50-ms")
		})
	}
}

func TestSharedRegionEnvErrors(t *testing.T) {
	// A backend handed a bad region fd refuses to start, saying why.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), cpu.ServeEnv+"="+cpu.Name, plugins.MagicCookieKey+"="+plugins.MagicCookieValue, plugins.SharedFDEnv+"=x")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `ATTNRUN_SHM_FD="x" is not a file descriptor`) {
		t.Errorf("bad fd: %v, output %q", err, out)
	}
}
