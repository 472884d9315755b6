package plugins_test

import (
	"context"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"gorgonia.org/tensor"
)

// aliasModel has two float32 outputs of one value: y = x + 1 and its
// Identity z (a graph output that only reshapes another graph output).
func aliasModel() *ir.Model {
	m := mixedModel()
	m.Graph.Nodes = append(m.Graph.Nodes, &ir.Node{Name: "/IdY", OpType: "Identity", Inputs: []string{"y"}, Outputs: []string{"z"}})
	m.Graph.Outputs = append(m.Graph.Outputs, vi("z", ir.Float, "n"))
	return m
}

// runInPlace runs mc's inputs with into bound and checks the outputs and
// which of them the backend computed in place (in the region, or in process
// in the bound tensors): want.
func runInPlace(t *testing.T, p plugins.Backend, id plugins.PartitionID, mc mixedCase, into map[string]*tensor.Dense, want []string) map[string]*tensor.Dense {
	t.Helper()
	var prof plugins.RunProfile
	out, err := p.RunInto(plugins.WithProfile(context.Background(), &prof), id, mc.in, into)
	if err != nil {
		t.Fatal(err)
	}
	mc.check(t, out)
	if !slices.Equal(prof.OutputsInPlace, want) {
		t.Errorf("outputs computed in place %q, want %q", prof.OutputsInPlace, want)
	}
	return out
}

// TestOutputsInPlace runs the CPU backend process on the mixed model and
// checks which outputs it computed straight into the shared region's output
// area (RunProfile.OutputsInPlace: no copy in the backend) and that every
// output is right, with bound outputs and with fresh ones (bench's
// --fresh-outputs): y (x + 1) lands in the region while it fits; xi and ii
// are views of inputs in the region, nb is bool, z an Identity of y: none
// of those is computed in place. An output that does not fit travels
// inline; a region that grows between runs keeps outputs in place.
func TestOutputsInPlace(t *testing.T) {
	cases := []struct {
		name  string
		spec  plugins.LaunchSpec
		model func() *ir.Model
		sizes []int // x's elements, one run each
		// want is what each run reports in place.
		want []string
		// wantShared is the region's size after the runs.
		wantShared int64
	}{
		{name: "in place", model: mixedModel, sizes: []int{1000, 1000, 1000}, want: []string{"y"}, wantShared: plugins.DefaultSharedBytes},
		{name: "aliased outputs", model: aliasModel, sizes: []int{1000, 1000}, want: []string{"y"}, wantShared: plugins.DefaultSharedBytes},
		// 40 KiB of x fit in the 64 KiB region; y's 40 KiB do not fit in
		// what is left, and travel inline (as do z's).
		{name: "output does not fit", spec: plugins.LaunchSpec{SharedBytes: 64 * kib, SharedMaxBytes: 64 * kib}, model: aliasModel,
			sizes: []int{10 * kib, 10 * kib}, wantShared: 64 * kib},
		// The region grows from 64 KiB as x grows from 4 KiB to 800 KiB:
		// the host reserves room for the outputs it expects each time.
		{name: "growth", spec: plugins.LaunchSpec{SharedBytes: 64 * kib, SharedMaxBytes: 64 * mib}, model: mixedModel,
			sizes: []int{1000, 48 * kib, 200 * kib, 1000}, want: []string{"y"}, wantShared: 2 * mib},
	}
	for _, c := range cases {
		for _, bound := range []bool{true, false} {
			name := c.name + "/fresh outputs"
			if bound {
				name = c.name + "/bound outputs"
			}
			t.Run(name, func(t *testing.T) {
				p := launchCPU(t, c.spec)
				m := c.model()
				id := compile(t, p, m)
				hasZ := slices.ContainsFunc(m.Graph.Outputs, func(o *ir.ValueInfo) bool { return o.Name == "z" })
				var prev mixedCase // the last run's, with fresh outputs
				var prevOut map[string]*tensor.Dense
				for run, n := range c.sizes {
					mc := newMixedCase(n, 100, 10, float32(run))
					if hasZ {
						mc.want["z"] = mc.want["y"]
					}
					var into map[string]*tensor.Dense
					if bound {
						into = allBound(n, 100, 10)
						if hasZ {
							into["z"] = tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
						}
					}
					out := runInPlace(t, p, id, mc, into, c.want)
					if prevOut != nil {
						prev.check(t, prevOut) // copied out: the next run left them alone
					}
					if !bound {
						prev, prevOut = mc, out
					}
				}
				if got := p.SharedBytes(); got != c.wantShared {
					t.Errorf("region is %d bytes, want %d", got, c.wantShared)
				}
			})
		}
	}
}

// TestInProcessBoundToInput: in process, an output bound to the tensor of
// an input is not computed into it (the kernel would read what it writes):
// the output is computed elsewhere and copied in, and is right.
func TestInProcessBoundToInput(t *testing.T) {
	p := newInProcessCPU(t)
	m := mixedModel()
	m.Graph.Nodes = m.Graph.Nodes[:1] // y = x + 1
	m.Graph.Inputs, m.Graph.Outputs = m.Graph.Inputs[:1], m.Graph.Outputs[:1]
	id := compile(t, p, m)
	const n = 5000
	x, want := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i) * 0.25
		want[i] = x[i] + 1
	}
	xd := tensor.New(tensor.WithShape(n), tensor.WithBacking(x))
	var prof plugins.RunProfile
	out, err := p.RunInto(plugins.WithProfile(context.Background(), &prof), id, map[string]*tensor.Dense{"x": xd}, map[string]*tensor.Dense{"y": xd})
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.OutputsInPlace) != 0 {
		t.Errorf("outputs computed in the bound tensors %q, want none", prof.OutputsInPlace)
	}
	if got := data(t, out["y"]); !equal(got, want) {
		t.Errorf("y = %.100v…, want %.100v…", got, want)
	}
}

// TestInProcessBoundToInputWithView: in process, an output bound to an
// input's tensor (y = x + 1 into x) must not change another output that is
// a view of that input (xi = Identity(x)), whatever order the outputs are
// written in (Go's map order: 20 runs).
func TestInProcessBoundToInputWithView(t *testing.T) {
	p := newInProcessCPU(t)
	m := mixedModel()
	m.Graph.Nodes = m.Graph.Nodes[:2] // y = x + 1, xi = Identity(x)
	m.Graph.Inputs, m.Graph.Outputs = m.Graph.Inputs[:1], m.Graph.Outputs[:2]
	id := compile(t, p, m)
	const n = 3000
	for run := range 20 {
		x, wantY, wantXi := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(run) + float32(i)*0.25
			wantY[i], wantXi[i] = x[i]+1, x[i]
		}
		xd := tensor.New(tensor.WithShape(n), tensor.WithBacking(x))
		xi := tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
		out, err := p.RunInto(context.Background(), id, map[string]*tensor.Dense{"x": xd}, map[string]*tensor.Dense{"y": xd, "xi": xi})
		if err != nil {
			t.Fatal(err)
		}
		if got := data(t, out["y"]); !equal(got, wantY) {
			t.Fatalf("run %d: y = %v…, want %v…", run, got.([]float32)[:4], wantY[:4])
		}
		if got := data(t, out["xi"]); !equal(got, wantXi) {
			t.Fatalf("run %d: xi = %v…, want %v… (x before the run)", run, got.([]float32)[:4], wantXi[:4])
		}
	}
}

// TestInProcessOutputsInPlace: in process, with every output bound, the
// CPU backend computes y straight into the bound tensor (no copy), unless
// that tensor shares memory with an input or another bound output, when
// it is written by copy as before; every output is right either way.
func TestInProcessOutputsInPlace(t *testing.T) {
	const n, m, k = 5000, 77, 13
	floats := func() *tensor.Dense { return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n))) }
	cases := []struct {
		name  string
		model func() *ir.Model
		// bind adjusts allBound's tensors for the case's inputs.
		bind func(into, in map[string]*tensor.Dense)
		want []string
	}{
		{name: "bound", model: mixedModel, bind: func(map[string]*tensor.Dense, map[string]*tensor.Dense) {}, want: []string{"y"}},
		{name: "aliased outputs", model: aliasModel, bind: func(into, _ map[string]*tensor.Dense) { into["z"] = floats() }, want: []string{"y"}},
		{name: "two outputs bound to one tensor", model: aliasModel, bind: func(into, _ map[string]*tensor.Dense) { into["z"] = into["y"] }, want: []string{"y"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newInProcessCPU(t)
			model := c.model()
			id := compile(t, p, model)
			hasZ := slices.ContainsFunc(model.Graph.Outputs, func(o *ir.ValueInfo) bool { return o.Name == "z" })
			for run := range 3 {
				mc := newMixedCase(n, m, k, float32(run))
				if hasZ {
					mc.want["z"] = mc.want["y"]
				}
				into := allBound(n, m, k)
				c.bind(into, mc.in)
				out := runInPlace(t, p, id, mc, into, c.want)
				for name, d := range into {
					if out[name] != d {
						t.Errorf("run %d: output %s is not its bound tensor", run, name)
					}
				}
			}
		})
	}
}
