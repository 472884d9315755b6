package graph

import (
	"context"
	"errors"
	"maps"
	"math/rand"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/runtime/budget"
)

// shapeBomb is the 181-byte model of issue 9: two ConstantOfShape of a
// shape read from an 8-byte int64 input, then Add. Planned by shapes alone
// its size is unknown; the input's value decides it.
func shapeBomb() *ir.Model {
	one := ir.FromSlice([]int{1}, []float32{1})
	fill := &ir.Attribute{Name: "value", Type: ir.AttrTensor, Tensor: one}
	return synth{
		inputs: []*ir.ValueInfo{vi("s", ir.Int64, 1)},
		nodes: []*ir.Node{
			node("ConstantOfShape", []string{"s"}, []string{"a"}, fill),
			node("ConstantOfShape", []string{"s"}, []string{"b"}, fill),
			{Name: "/Add", OpType: "Add", Inputs: []string{"a", "b"}, Outputs: []string{"y"}},
		},
		outputs: []string{"y"},
	}.model()
}

// TestBudgetRefusesPlanBeforeAllocating: the shape bomb asking for 3 × 4 GiB
// is refused when planned, with one error naming the node at which it stops
// fitting and the bytes, before anything is allocated (it used to run for
// 33 s and reach 11.2 GiB). Small values run.
func TestBudgetRefusesPlanBeforeAllocating(t *testing.T) {
	for _, c := range []struct {
		limit int64
		want  string
	}{
		{8 << 30, `node "/Add" (Add): output "y" float32[1073741824] needs 4294967296 bytes (4 GiB); the memory budget (Options.MaxMemoryBytes 8 GiB) has 0 bytes left after the 8 GiB the steps before it need (the plan needs 12 GiB in all)`},
		{3 << 30, `node "/a" (ConstantOfShape): output "a" float32[1073741824] needs 4294967296 bytes (4 GiB); the memory budget (Options.MaxMemoryBytes 3 GiB) has 3 GiB left after the 0 bytes the steps before it need`},
	} {
		b := budget.New(c.limit)
		p, err := Compile(shapeBomb(), Options{Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = p.Run(context.Background(), map[string]*ir.Tensor{"s": ir.FromSlice([]int{1}, []int64{1 << 30})}, RunOptions{})
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, budget.ErrExceeded) {
			t.Fatalf("limit %s: err = %v\nwant %s", budget.Format(c.limit), err, c.want)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("limit %s: refusing allocated %d MiB", budget.Format(c.limit), grew>>20)
		}
		// Within the budget, the same model runs; each value is a plan.
		for _, n := range []int64{3, 5, 3} {
			out, err := p.Run(context.Background(), map[string]*ir.Tensor{"s": ir.FromSlice([]int{1}, []int64{n})}, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if y := out["y"].Float32s(); int64(len(y)) != n || y[0] != 2 {
				t.Fatalf("s=%d: y = %v", n, y)
			}
		}
		if got := p.plans.lru.Len(); got != 2 {
			t.Errorf("%d cached plans for two values, want 2", got)
		}
		p.Close()
		if u := b.Used(); u != 0 {
			t.Errorf("after Close the budget still has %d bytes reserved", u)
		}
	}
}

// TestArenaSharedAcrossShapes: a sweep over many sequence lengths reuses
// one arena instead of keeping one per cached plan (300 lengths on a 19 MB
// model peaked at 5.46 GiB against 252 MiB for the largest alone): after
// the sweep, the arena holds no more than about what the largest length
// needs, and the budget accounts for exactly what is held.
func TestArenaSharedAcrossShapes(t *testing.T) {
	m, err := onnx.Load("../../models/s002_self_attention_v3/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := budget.New(1 << 40)
	r := rand.New(rand.NewSource(1))
	compile := func() *Program {
		p, err := Compile(m, Options{Threads: 1, Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(p *Program, seq int) {
		in := benchLikeInputs(p, seq, r)
		if _, err := p.Run(context.Background(), in, RunOptions{ReuseOutputs: true}); err != nil {
			t.Fatal(err)
		}
	}
	const largest = 96
	alone := compile()
	run(alone, largest)
	single := alone.arenas.idleBytes()
	alone.Close()
	// Ascending, the worst order: every length needs more than the last.
	p := compile()
	for seq := 1; seq <= largest; seq++ {
		run(p, seq)
	}
	swept := p.arenas.idleBytes()
	t.Logf("arena after the largest length alone: %d bytes; after a sweep of %d lengths: %d bytes; %d plans cached", single, largest, swept, p.plans.lru.Len())
	if swept > single+single/2 {
		t.Errorf("after the sweep the arena holds %d bytes, the largest length alone %d", swept, single)
	}
	if p.plans.bytes > p.plans.limit || p.plans.lru.Len() > maxCachedPlans {
		t.Errorf("plan cache holds %d plans, %d bytes (limit %d)", p.plans.lru.Len(), p.plans.bytes, p.plans.limit)
	}
	if got := p.ReleaseIdle(); got != swept {
		t.Errorf("ReleaseIdle released %d bytes, the arena held %d", got, swept)
	}
	p.Close()
	if u := b.Used(); u != 0 {
		t.Errorf("after Close the budget still has %d bytes reserved", u)
	}
}

// benchLikeInputs makes random inputs for a model whose inputs are
// [batch, seq, ...] floats or [batch, seq] masks.
func benchLikeInputs(p *Program, seq int, r *rand.Rand) map[string]*ir.Tensor {
	in := map[string]*ir.Tensor{}
	for _, v := range p.Model.Graph.Inputs {
		dims := make([]int, len(v.Type.Shape))
		for i, d := range v.Type.Shape {
			switch {
			case d.Known():
				dims[i] = int(d.Value)
			case i == 0:
				dims[i] = 1
			default:
				dims[i] = seq
			}
		}
		switch v.Type.DType {
		case ir.Bool:
			in[v.Name] = ir.NewTensor(ir.Bool, dims)
			continue
		case ir.Int64:
			t := ir.NewTensor(ir.Int64, dims)
			for i := range t.Int64s() {
				t.Int64s()[i] = 1
			}
			in[v.Name] = t
			continue
		}
		in[v.Name] = randT(r, dims...)
	}
	return in
}

// TestBudgetAtRunTime: working memory a kernel asks for while it runs is
// reserved too; when the budget refuses it, the step fails with an error
// naming it (for a fused step, the fused node and the nodes it replaced),
// not a panic, and the arena's reservations go back to the budget.
func TestBudgetAtRunTime(t *testing.T) {
	m, err := onnx.Load("../../models/s002_self_attention_v1/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := budget.New(1 << 40)
	p, err := Compile(m, Options{Threads: 1, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	in := benchLikeInputs(p, 64, rand.New(rand.NewSource(2)))
	// A first run packs the weights (kept, and reserved, for the program's
	// lifetime); then the run memory is dropped.
	if _, err := p.Run(context.Background(), in, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	p.ReleaseIdle()
	pl, err := p.planFor(in)
	if err != nil {
		t.Fatal(err)
	}
	upTo := pl.needs()
	p.donePlan(pl)
	// Room for the plan's buffers and outputs, not for the attention's
	// scratch.
	b.SetLimit(b.Used() + upTo[len(upTo)-1] + 64)
	_, err = p.Run(context.Background(), in, RunOptions{})
	want := `fused node "/FusedAttention" (com.attnrun:FusedAttention, replacing "/Transpose", "/MatMul", "/Div", "/Softmax", "/MatMul_1"): `
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "float32s of working memory needs") || !errors.Is(err, budget.ErrExceeded) {
		t.Fatalf("err = %v\nwant it to start %s and name the working memory", err, want)
	}
	p.ReleaseIdle()
	p.Close()
	if u := b.Used(); u != 0 {
		t.Errorf("after Close the budget still has %d bytes reserved", u)
	}
}

// TestBudgetRefusesInitializers: a model whose weights alone exceed the
// budget is refused at Compile, in one line that says what needs the bytes.
func TestBudgetRefusesInitializers(t *testing.T) {
	m, err := onnx.Load("../../models/s000_multi_head/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(m, Options{Budget: budget.New(1024)})
	want := "holding the model's 4 initializers needs 16896 bytes (16.5 KiB); the memory budget (Options.MaxMemoryBytes 1 KiB) has 1 KiB left"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, budget.ErrExceeded) {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

// TestSizeLimitOnKeptSteps: Options.MaxTensorBytes applies to the tensors
// a plan creates, after the rewrites. Seed 000's MHA at 64 tokens has
// scores of [1, 4, 64, 64] floats (64 KiB): under a limit of 60000 bytes
// the unfused plan is refused, naming the scores' MatMul, while the fused
// one, which never creates them, runs and gives the unfused result.
func TestSizeLimitOnKeptSteps(t *testing.T) {
	m, _ := compileModel(t, "s000_multi_head")
	in := map[string]*ir.Tensor{"x": randT(rand.New(rand.NewSource(3)), 1, 64, 32)}
	run := func(noFuse bool, limit int64) (map[string]*ir.Tensor, error) {
		p, err := Compile(m, Options{Threads: 2, NoFuse: noFuse, MaxTensorBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		return p.Run(context.Background(), in, RunOptions{})
	}
	_, err := run(true, 60000)
	if want := `output "/MatMul_output_0" of shape [1 4 64 64] would exceed the tensor size limit of 60000 bytes`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("unfused under the limit: %v, want an error with %q", err, want)
	}
	fused, err := run(false, 60000)
	if err != nil {
		t.Fatalf("fused under the limit: %v", err)
	}
	unfused, err := run(true, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameOutputs(t, fused["y"], unfused["y"])
}

// TestReleaseUnread: at S=1024 T5's plan folds its position buckets through
// a chain of [S, S] steps and LLaMA 4.44's mask folds its index columns,
// which no step reads once the ScatterND runs as an Identity. A plan keeps
// only the folded constants its steps read, so it costs less than the
// plan cache holds and is cached; with Options.KeepFolded (the GPU
// backend's) the plan keeps them all, in its cost too.
func TestReleaseUnread(t *testing.T) {
	for _, name := range []string{"t5_attention", "llama_update_causal_mask"} {
		t.Run(name, func(t *testing.T) {
			m, err := onnx.Load(filepath.Join("../../models", name, "model.onnx"), onnx.Options{})
			if err != nil {
				t.Fatal(err)
			}
			dims := maps.Clone(modelDims)
			dims["batch"], dims["seq"] = 1, 1024
			in := keepInputs(t, m.Graph, dims)
			var folded [2]int64
			for k, keep := range []bool{false, true} {
				p, err := Compile(m, Options{Threads: 2, KeepFolded: keep})
				if err != nil {
					t.Fatal(err)
				}
				pl, err := p.planFor(in)
				if err != nil {
					t.Fatal(err)
				}
				folded[k] = pl.folded
				read := map[string]bool{}
				for _, st := range pl.steps {
					for _, n := range st.node.Inputs {
						read[n] = true
					}
				}
				for n, v := range pl.types {
					if c := v.Const; !keep && c != nil && !read[n] && c != p.Types[n].Const && c.Bytes() >= releaseMinBytes {
						t.Errorf("%s: %d bytes folded, read by no step, still held", n, c.Bytes())
					}
				}
				if !keep && !pl.cached {
					t.Errorf("plan of %d MiB folded not cached", pl.folded>>20)
				}
				p.donePlan(pl)
			}
			if folded[0] >= folded[1] || folded[1] <= DefaultPlanCacheBytes {
				t.Errorf("folded %d MiB kept only what steps read, %d MiB kept all: want less, and all over the cache's %d MiB",
					folded[0]>>20, folded[1]>>20, DefaultPlanCacheBytes>>20)
			}
		})
	}
}

// TestFoldDropsEarly: T5's position buckets fold through a chain of
// [S, S] steps, 4 or 8 MiB each at S=1024. The fold drops each step's
// result once every step reading it has folded, so the chain folds within
// a 64 MiB budget (no step of it runs); keeping every folded value
// (KeepFolded, the GPU backend's) the budget runs out part way: the rest of
// the chain is left to run as steps, which need more than the budget has
// left, and the plan is refused.
func TestFoldDropsEarly(t *testing.T) {
	m, err := onnx.Load(filepath.Join("../../models", "t5_attention", "model.onnx"), onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dims := maps.Clone(modelDims)
	dims["batch"], dims["seq"] = 1, 1024
	in := keepInputs(t, m.Graph, dims)
	for _, keep := range []bool{false, true} {
		p, err := Compile(m, Options{Threads: 2, KeepFolded: keep, Budget: budget.New(64 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		pl, err := p.planFor(in)
		if keep {
			if err == nil || !strings.Contains(err.Error(), "memory budget") {
				t.Errorf("keeping every folded value: %v, want the budget to run out", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range pl.steps {
			if st.node.OpType == "Log" || st.node.OpType == "Range" || st.node.OpType == "Min" {
				t.Errorf("step %s (%s) of the bucket chain runs", st.node.Label(), st.node.OpType)
			}
		}
		p.donePlan(pl)
	}
}
