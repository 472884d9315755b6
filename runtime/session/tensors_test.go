package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/attnrun/attnrun/internal/hugepages"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/budget"
	"gorgonia.org/tensor"
)

// sharedCopy returns a copy of d made by s.NewTensor.
func sharedCopy(t *testing.T, s *Session, d *tensor.Dense) *tensor.Dense {
	t.Helper()
	c, err := s.NewTensorFrom(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNewTensorRuns runs the tiny model with its inputs and its bound
// output made by NewTensor, in sessions of each kind, and checks the output
// and the path the tensors took: by reference (the profile's InputsShared
// and OutputsShared) where the session has backend processes with shared
// memory, the ordinary way otherwise. With the picky plugin the model runs
// as three partitions on two backend processes, both mapping the arena.
func TestNewTensorRuns(t *testing.T) {
	cases := []struct {
		name string
		opts func(t *testing.T) Options
		// wantIn is the first partition's InputsShared, wantOut the last
		// one's OutputsShared.
		wantIn, wantOut []string
		shared          bool // NewTensor's memory is the arena's
	}{
		{name: "backend process", opts: func(*testing.T) Options { return Options{} }, wantIn: []string{"r", "x"}, wantOut: []string{"y"}, shared: true},
		{name: "two instances", opts: func(*testing.T) Options { return Options{Instances: 2} }, wantIn: []string{"r", "x"}, wantOut: []string{"y"}, shared: true},
		{name: "two backends", opts: func(t *testing.T) Options { return Options{Backend: "picky", PluginDir: pluginDir(t)} }, wantIn: []string{"x"}, wantOut: []string{"y"}, shared: true},
		{name: "in process", opts: func(*testing.T) Options { return Options{InProcess: true} }},
		{name: "no shared memory", opts: func(*testing.T) Options { return Options{NoSharedMemory: true} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := openTiny(t, c.opts(t))
			in, want := tinyInputs()
			for name, d := range in {
				in[name] = sharedCopy(t, s, d)
			}
			y, err := s.NewTensor(tensor.Float32, 2, 3)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.opts.arena.Contains(ir.BytesOf(y.Data())); got != c.shared {
				t.Errorf("NewTensor's memory in the arena: %v, want %v", got, c.shared)
			}
			if held := s.SharedTensorBytes(); (held > 0) != c.shared {
				t.Errorf("the arena holds %d bytes with three tensors made (shared memory: %v)", held, c.shared)
			}
			for run := range 3 {
				prof := &Profile{}
				out, err := s.RunWith(context.Background(), in, RunOptions{Into: map[string]*tensor.Dense{"y": y}, Profile: prof})
				if err != nil {
					t.Fatal(err)
				}
				if out["y"] != y {
					t.Fatalf("run %d: y is not the bound tensor", run)
				}
				checkClose(t, "y", y, []int{2, 3}, want, 1e-6)
				parts := prof.Runs[0].Partitions
				first, last := parts[0], parts[len(parts)-1]
				if !slices.Equal(first.InputsShared, c.wantIn) || !slices.Equal(last.OutputsShared, c.wantOut) {
					t.Errorf("run %d: inputs shared %q, outputs shared %q; want %q, %q", run, first.InputsShared, last.OutputsShared, c.wantIn, c.wantOut)
				}
				clear(y.Data().([]float32))
			}
			for _, d := range []*tensor.Dense{in["x"], in["r"], y} {
				if err := s.FreeTensor(d); err != nil {
					t.Fatal(err)
				}
			}
			if c.shared {
				if err := s.FreeTensor(y); err == nil {
					t.Error("freeing a tensor twice: no error")
				}
				if err := s.FreeTensor(dense([]int{2}, []float32{1, 2})); err == nil {
					t.Error("freeing a tensor NewTensor did not make: no error")
				}
				if n := s.SharedTensorBytes(); n != 0 {
					t.Errorf("every tensor freed, yet the arena holds %d bytes", n)
				}
			}
		})
	}
}

// TestNewTensorLargeWithoutArena: where the session has no arena, a
// float32 tensor of 2 MiB or more is a zeroed tensor of its shape that
// starts at a huge page boundary (internal/hugepages; not with
// ATTNRUN_HUGE_PAGES=off), and FreeTensor takes it back; a smaller one and
// other element types are plain tensors.
func TestNewTensorLargeWithoutArena(t *testing.T) {
	for _, opts := range []Options{{InProcess: true}, {NoSharedMemory: true}} {
		s, _ := openTiny(t, opts)
		for _, c := range []struct {
			dt      tensor.Dtype
			shape   []int
			aligned bool
		}{
			{tensor.Float32, []int{2, 512, 768}, true},
			{tensor.Float32, []int{1, 512, 768}, false}, // 1.5 MiB
			{tensor.Float64, []int{2, 512, 768}, false},
		} {
			d, err := s.NewTensor(c.dt, c.shape...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.Shape(), tensor.Shape(c.shape)) || d.Dtype() != c.dt {
				t.Fatalf("%+v: NewTensor(%v, %v) made a %v tensor of shape %v", opts, c.dt, c.shape, d.Dtype(), d.Shape())
			}
			raw := ir.BytesOf(d.Data())
			for i, b := range raw {
				if b != 0 {
					t.Fatalf("%+v: byte %d of a new %v%v is %d", opts, i, c.dt, c.shape, b)
				}
			}
			if at := uintptr(unsafe.Pointer(&raw[0])) % hugepages.Size; c.aligned && hugepages.Enabled() && at != 0 {
				t.Errorf("%+v: a new float32%v starts %d bytes past a huge page boundary", opts, c.shape, at)
			}
			if err := s.FreeTensor(d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestNewTensorErrors: element types that cannot be shared, negative or
// oversized shapes, the memory budget and a closed session are errors that
// say so; a tensor made before Close stays usable until it is freed.
func TestNewTensorErrors(t *testing.T) {
	s, _ := openTiny(t, Options{MaxTensorBytes: 1 << 20, MaxMemoryBytes: 64 << 20})
	for _, c := range []struct {
		dt    tensor.Dtype
		shape []int
		want  string
	}{
		{tensor.String, []int{2}, "cannot be shared"},
		{tensor.Complex64, []int{2}, "cannot be shared"},
		{tensor.Float32, []int{2, -1}, "negative dimension"},
		{tensor.Float32, []int{1024, 1024}, "larger than the 1048576-byte limit"},
	} {
		if _, err := s.NewTensor(c.dt, c.shape...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewTensor(%v, %v): %v, want an error containing %q", c.dt, c.shape, err, c.want)
		}
	}
	// The budget: the region, weights and plans hold some of the 64 MiB.
	var held []*tensor.Dense
	var err error
	for range 100 {
		var d *tensor.Dense
		if d, err = s.NewTensor(tensor.Float32, 256, 1024); err != nil {
			break
		}
		held = append(held, d)
	}
	if !errors.Is(err, budget.ErrExceeded) {
		t.Errorf("NewTensor past the memory budget: %v, want %v", err, budget.ErrExceeded)
	}
	for _, d := range held {
		if err := s.FreeTensor(d); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := s.NewTensor(tensor.Int64, 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	kept.Data().([]int64)[14] = 42
	s.Close()
	if _, err := s.NewTensor(tensor.Float32, 4); err == nil {
		t.Error("NewTensor after Close: no error")
	}
	if v := kept.Data().([]int64)[14]; v != 42 {
		t.Errorf("a tensor kept past Close reads %d, want 42", v)
	}
	if err := s.FreeTensor(kept); err != nil {
		t.Errorf("FreeTensor after Close: %v", err)
	}
}

// addOneModel is y = x + 1 over float32[n].
func addOneModel() *ir.Model {
	return vectorModel("add_one", &ir.Node{Name: "/Add", OpType: "Add", Inputs: []string{"x", "one"}, Outputs: []string{"y"}},
		map[string]*ir.Tensor{"one": ir.Scalar(float32(1))})
}

// BenchmarkSharedTensors times Session.RunWith of y = x + 1 on a 1.5 MiB
// float32 input (an S=512, C=768 activation) with the output bound, the
// tensors in Go memory (copied into and out of the backend's region) or
// made by NewTensor (passed by reference), and reports the median as
// p50-ms. "cold" sweeps 64 MiB between runs (untimed), as a model's run
// would between a caller's writes and reads: the copies then go at memory
// speed.
func BenchmarkSharedTensors(b *testing.B) {
	path := saveModelB(b, addOneModel())
	const n = 512 * 768
	for _, shared := range []bool{false, true} {
		for _, cold := range []bool{false, true} {
			name := map[bool]string{false: "heap", true: "shared"}[shared] + map[bool]string{false: "/warm", true: "/cold"}[cold]
			b.Run(name, func(b *testing.B) {
				s, err := Open(context.Background(), path, Options{Logf: b.Logf})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				make1 := func() *tensor.Dense {
					if !shared {
						return dense([]int{n}, make([]float32, n))
					}
					d, err := s.NewTensor(tensor.Float32, n)
					if err != nil {
						b.Fatal(err)
					}
					return d
				}
				x, y := make1(), make1()
				xs := x.Data().([]float32)
				for i := range xs {
					xs[i] = float32(i)
				}
				in, ro := map[string]*tensor.Dense{"x": x}, RunOptions{Into: map[string]*tensor.Dense{"y": y}}
				sweep := make([]byte, 64<<20)
				times := make([]time.Duration, 0, b.N)
				b.SetBytes(2 * 4 * n)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if cold {
						b.StopTimer()
						for j := 0; j < len(sweep); j += 64 {
							sweep[j]++
						}
						b.StartTimer()
					}
					start := time.Now()
					if _, err := s.RunWith(context.Background(), in, ro); err != nil {
						b.Fatal(err)
					}
					times = append(times, time.Since(start))
				}
				b.StopTimer()
				if ys := y.Data().([]float32); ys[n-1] != float32(n) {
					b.Fatalf("y[-1] = %v, want %v", ys[n-1], n)
				}
				slices.Sort(times)
				b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e6, "p50-ms")
			})
		}
	}
}

// cacheModel is a KV cache's step: present = Concat(past, new) on axis 2,
// float32[1, 2, t, 4] from [1, 2, t-1, 4] and [1, 2, 1, 4].
func cacheModel() *ir.Model {
	vi := func(name, t string) *ir.ValueInfo {
		return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 1}, {Value: 2}, {Param: t}, {Value: 4}}, RankKnown: true}}
	}
	return &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name: "cache",
			Nodes: []*ir.Node{{Name: "/Concat", OpType: "Concat", Inputs: []string{"past", "new"}, Outputs: []string{"present"},
				Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: 2}}}},
			Inputs:  []*ir.ValueInfo{vi("past", "past_len"), vi("new", "one")},
			Outputs: []*ir.ValueInfo{vi("present", "total")},
		},
	}
}

// TestSharedCacheLoop runs a generation loop's cache the way the README
// suggests: two shared buffers of the longest cache, each step's present
// bound to a view of one's front and passed back as the next step's past
// from it, so no step allocates or copies the cache across the process
// boundary. Every step's cache is right, and the profile says the past
// went in and the present came back by reference.
func TestSharedCacheLoop(t *testing.T) {
	path := saveModel(t, cacheModel())
	s, err := Open(context.Background(), path, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const steps, row = 6, 2 * 4 // row: the elements one token adds (2 heads × 4)
	var bufs [2][]float32
	for i := range bufs {
		d, err := s.NewTensor(tensor.Float32, 1, 2, steps+1, 4)
		if err != nil {
			t.Fatal(err)
		}
		defer s.FreeTensor(d)
		bufs[i] = d.Data().([]float32)
	}
	view := func(buf []float32, n int) *tensor.Dense {
		return tensor.New(tensor.WithShape(1, 2, n, 4), tensor.WithBacking(buf[:n*row]))
	}
	// want is the cache after each step, per head: token k's values k*10 + h.
	want := func(n int) []float32 {
		w := make([]float32, 0, n*row)
		for h := 0; h < 2; h++ {
			for k := 0; k < n; k++ {
				for j := 0; j < 4; j++ {
					w = append(w, float32(k*10+h))
				}
			}
		}
		return w
	}
	copy(bufs[0], want(1))
	for step := 1; step <= steps; step++ {
		past, present := view(bufs[(step+1)%2], step), view(bufs[step%2], step+1)
		nw := make([]float32, row)
		for h := 0; h < 2; h++ {
			for j := 0; j < 4; j++ {
				nw[h*4+j] = float32(step*10 + h)
			}
		}
		prof := &Profile{}
		out, err := s.RunWith(context.Background(), map[string]*tensor.Dense{"past": past, "new": dense([]int{1, 2, 1, 4}, nw)},
			RunOptions{Into: map[string]*tensor.Dense{"present": present}, Profile: prof})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if out["present"] != present || !slices.Equal(present.Data().([]float32), want(step+1)) {
			t.Fatalf("step %d: present %v, want %v", step, present.Data(), want(step+1))
		}
		p := prof.Runs[0].Partitions[0]
		if !slices.Equal(p.InputsShared, []string{"past"}) || !slices.Equal(p.OutputsShared, []string{"present"}) {
			t.Errorf("step %d: inputs shared %q, outputs shared %q; want [past], [present]", step, p.InputsShared, p.OutputsShared)
		}
	}
}

// TestSharedTensorsConcurrent runs the tiny model from four goroutines on
// two instances, each goroutine making, using and freeing its own shared
// tensors run after run: every output is right and the arena ends empty
// (run with -race too).
func TestSharedTensorsConcurrent(t *testing.T) {
	s, _ := openTiny(t, Options{Instances: 2, Threads: 1})
	in, want := tinyInputs()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for run := 0; run < 25; run++ {
				x, err1 := s.NewTensor(tensor.Float32, 2, 4)
				r, err2 := s.NewTensor(tensor.Float32, 2, 3)
				y, err3 := s.NewTensor(tensor.Float32, 2, 3)
				if err := errors.Join(err1, err2, err3); err != nil {
					errs <- err
					return
				}
				copy(x.Data().([]float32), in["x"].Data().([]float32))
				copy(r.Data().([]float32), in["r"].Data().([]float32))
				if _, err := s.RunWith(context.Background(), map[string]*tensor.Dense{"x": x, "r": r}, RunOptions{Into: map[string]*tensor.Dense{"y": y}}); err != nil {
					errs <- err
					return
				}
				for i, v := range y.Data().([]float32) {
					if d := v - want[i]; d > 1e-6 || d < -1e-6 {
						errs <- fmt.Errorf("run %d: y[%d] = %v, want %v", run, i, v, want[i])
						return
					}
				}
				for _, d := range []*tensor.Dense{x, r, y} {
					if err := s.FreeTensor(d); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := s.SharedTensorBytes(); n != 0 {
		t.Errorf("every tensor freed, yet the arena holds %d bytes", n)
	}
}

// TestNewTensorFrom: a copy in shared memory holds d's elements, a scalar
// is copied as an ordinary tensor, and a view is refused.
func TestNewTensorFrom(t *testing.T) {
	s, _ := openTiny(t, Options{})
	d := dense([]int{2, 3}, []int64{1, 2, 3, 4, 5, 6})
	c, err := s.NewTensorFrom(d)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Data().([]int64), d.Data().([]int64)) || !s.opts.arena.Contains(ir.BytesOf(c.Data())) {
		t.Errorf("copy %v (in the arena: %v), want %v in the arena", c.Data(), s.opts.arena.Contains(ir.BytesOf(c.Data())), d.Data())
	}
	if err := s.FreeTensor(c); err != nil {
		t.Fatal(err)
	}
	sc, err := s.NewTensorFrom(tensor.New(tensor.FromScalar(float32(2.5))))
	if err != nil || sc.ScalarValue() != float32(2.5) {
		t.Errorf("scalar copy %v, %v; want 2.5", sc, err)
	}
	view, err := dense([]int{4, 4}, make([]float32, 16)).Slice(nil, tensor.S(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewTensorFrom(view.(*tensor.Dense)); err == nil || !strings.Contains(err.Error(), "is a view") {
		t.Errorf("copying a view: %v, want an error saying it is a view", err)
	}
}
