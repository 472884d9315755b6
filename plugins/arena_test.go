package plugins_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"gorgonia.org/tensor"
)

// arenaCopy returns a copy of d (float32 or int64) in the arena.
func arenaCopy(t testing.TB, a *plugins.Arena, d *tensor.Dense) *tensor.Dense {
	t.Helper()
	src, err := ir.FromDense(d)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := a.Alloc(src.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	copy(raw, ir.BytesOf(src.Data))
	data, ok := ir.AliasBytes(src.DType, raw, src.Len())
	if !ok {
		t.Fatalf("%v cannot alias the arena", src.DType)
	}
	return tensor.New(tensor.WithShape(src.Shape...), tensor.WithBacking(data))
}

// launchWithArena starts the CPU backend process with an arena of its own
// and compiles the mixed model in it.
func launchWithArena(t *testing.T) (*plugins.Arena, *plugins.Process, plugins.PartitionID) {
	t.Helper()
	a, err := plugins.NewArena(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	p := launchCPU(t, plugins.LaunchSpec{Arena: a})
	return a, p, compile(t, p, mixedModel())
}

// TestArenaRuns runs the CPU backend process on the mixed model with inputs
// and bound outputs in the session's tensor arena (LaunchSpec.Arena) and
// checks every output and which tensors took which path: inputs passed by
// reference (InputsShared), outputs computed into their bound tensor
// there (OutputsInPlace) or left there by the backend (OutputsShared),
// with no copy on the host. An input that a bound output overlaps goes
// through the region, so that the output cannot overwrite what a view of
// the input returns.
func TestArenaRuns(t *testing.T) {
	const n, m, k = 3000, 100, 10
	cases := []struct {
		name string
		// shareIn and shareOut name the inputs and bound outputs made in
		// the arena (the others are Go memory).
		shareIn, shareOut []string
		// bindToInput binds y to x's tensor.
		bindToInput     bool
		wantIn, wantOut []string // InputsShared, OutputsShared
		wantInPlace     []string
	}{
		// xi and ii are views of x and i in the arena: copied out by the host.
		{name: "shared inputs and outputs", shareIn: []string{"x", "i"}, shareOut: []string{"y", "xi", "ii"},
			wantIn: []string{"i", "x"}, wantOut: []string{"y"}, wantInPlace: []string{"y"}},
		// xi and ii are views of inputs in the region: the backend copies
		// them into their bound tensors.
		{name: "shared outputs", shareOut: []string{"y", "xi", "ii"},
			wantOut: []string{"ii", "xi", "y"}, wantInPlace: []string{"y"}},
		{name: "shared inputs", shareIn: []string{"x", "i"},
			wantIn: []string{"i", "x"}, wantInPlace: []string{"y"}},
		{name: "output bound to its input", shareIn: []string{"x", "i"}, bindToInput: true,
			wantIn: []string{"i"}, wantOut: []string{"y"}, wantInPlace: []string{"y"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, p, id := launchWithArena(t)
			for run := range 2 {
				mc := newMixedCase(n, m, k, float32(run))
				for _, name := range c.shareIn {
					mc.in[name] = arenaCopy(t, a, mc.in[name])
				}
				into := allBound(n, m, k)
				for _, name := range c.shareOut {
					into[name] = arenaCopy(t, a, into[name])
				}
				if c.bindToInput {
					into["y"] = mc.in["x"]
				}
				var prof plugins.RunProfile
				out, err := p.RunInto(plugins.WithProfile(context.Background(), &prof), id, mc.in, into)
				if err != nil {
					t.Fatal(err)
				}
				mc.check(t, out)
				for name, d := range into {
					if out[name] != d {
						t.Errorf("run %d: output %s is not its bound tensor", run, name)
					}
				}
				if !slices.Equal(prof.InputsShared, c.wantIn) || !slices.Equal(prof.OutputsShared, c.wantOut) || !slices.Equal(prof.OutputsInPlace, c.wantInPlace) {
					t.Errorf("run %d: inputs shared %q, outputs shared %q, in place %q; want %q, %q, %q", run,
						prof.InputsShared, prof.OutputsShared, prof.OutputsInPlace, c.wantIn, c.wantOut, c.wantInPlace)
				}
				for _, d := range append(slices.Collect(mapValues(mc.in)), slices.Collect(mapValues(into))...) {
					if a.Contains(ir.BytesOf(d.Data())) {
						if err := a.Free(ir.BytesOf(d.Data())); err != nil && !c.bindToInput {
							t.Fatal(err)
						}
					}
				}
			}
			if a.Size() != 0 {
				t.Errorf("every tensor freed, yet the arena holds %d bytes", a.Size())
			}
		})
	}
}

// TestArenaAbandonedRun: a Run abandoned by its context keeps its arena
// tensors until its backend let go of them; a tensor freed meanwhile goes
// back to the arena only then, and the next Run is right.
func TestArenaAbandonedRun(t *testing.T) {
	a, p, id := launchWithArena(t)
	const n = 16 << 20 // 64 MiB of x: the Add takes a while
	mc := newMixedCase(n, 10, 10, 1)
	x := arenaCopy(t, a, mc.in["x"])
	mc.in["x"] = x
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(5 * time.Millisecond)
		cancel()
	}()
	_, err := p.RunInto(ctx, id, mc.in, nil)
	if err == nil {
		t.Skip("the run finished before it was cancelled")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if err := a.Free(ir.BytesOf(x.Data())); err != nil {
		t.Fatal(err)
	}
	// The drain lets go of x once the backend answers its Ping; then the
	// arena, empty, is truncated.
	deadline := time.Now().Add(plugins.PingTimeout + 5*time.Second)
	for a.Size() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.Size() != 0 {
		t.Fatalf("the abandoned run's tensor never went back (arena holds %d bytes)", a.Size())
	}
	mc = newMixedCase(1000, 10, 10, 2)
	mc.in["x"] = arenaCopy(t, a, mc.in["x"])
	out, err := p.RunInto(context.Background(), id, mc.in, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc.check(t, out)
}

func mapValues(m map[string]*tensor.Dense) func(func(*tensor.Dense) bool) {
	return func(yield func(*tensor.Dense) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}
