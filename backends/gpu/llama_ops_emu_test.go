package gpu

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/conform"
	"github.com/attnrun/attnrun/runtime/graph"
)

// oneNodeModel is an opset-23 model of node over the given inputs (their
// tensors in vals; initializers where init names them).
func oneNodeModel(node *ir.Node, vals map[string]*ir.Tensor, init map[string]bool) *ir.Model {
	g := &ir.Graph{Name: "one", Initializers: map[string]*ir.Tensor{}, Nodes: []*ir.Node{node}}
	for _, name := range node.Inputs {
		if name == "" {
			continue
		}
		if init[name] {
			g.Initializers[name] = vals[name]
			g.InitializerOrder = append(g.InitializerOrder, name)
			continue
		}
		g.Inputs = append(g.Inputs, &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: vals[name].DType, Shape: ir.ShapeOf(vals[name].Shape), RankKnown: true}})
	}
	for _, o := range node.Outputs {
		g.Outputs = append(g.Outputs, &ir.ValueInfo{Name: o})
	}
	return &ir.Model{IRVersion: 10, Opsets: map[string]int64{"": 23}, Graph: g}
}

// emuVsCPU runs m on the emulated GPU and on the CPU program and compares
// every output; it returns the emulator's error, if any.
func emuVsCPU(t *testing.T, m *ir.Model, in map[string]*ir.Tensor) error {
	t.Helper()
	prog, err := graph.Compile(m, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	requireAccepted(t, prog)
	s, e, id := compileOnEmu(t, m, false)
	defer func() {
		if err := s.Release(context.Background(), id); err != nil || len(e.mem) != 0 {
			t.Errorf("release: %v, %d allocations left", err, len(e.mem))
		}
	}()
	got, err := s.Run(context.Background(), id, in)
	if err != nil {
		return err
	}
	want, err := prog.Run(context.Background(), in, graph.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		if _, _, err := conform.Compare(got[name], w, conform.Tolerance{Rtol: 1e-5, Atol: 1e-6}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	return nil
}

func randF(r *rand.Rand, dims ...int) *ir.Tensor {
	t := ir.NewTensor(ir.Float, dims)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(r.NormFloat64())
	}
	return t
}

// TestRMSNormalizationOnEmulator: rmsnorm_f32 against the CPU kernel for
// each axis and scale layout (as X's trailing dims, a constant that
// broadcasts, a per-row constant wider than the normalized dims).
func TestRMSNormalizationOnEmulator(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	cases := []struct {
		x, scale []int
		axis     int64
		init     bool
	}{
		{[]int{2, 7, 64}, []int{64}, -1, false},
		{[]int{2, 3, 4, 5}, []int{4, 5}, 2, false},
		{[]int{2, 3, 4, 5}, []int{1, 5}, -2, true},
		{[]int{3, 6}, []int{3, 1}, -1, true},
		{[]int{2, 3, 4, 5}, []int{2, 3, 4, 5}, 0, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.x, c.scale, c.axis), func(t *testing.T) {
			vals := map[string]*ir.Tensor{"x": randF(r, c.x...), "scale": randF(r, c.scale...)}
			n := &ir.Node{Name: "rms", OpType: "RMSNormalization", Inputs: []string{"x", "scale"}, Outputs: []string{"y"},
				Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: c.axis}, {Name: "epsilon", Type: ir.AttrFloat, Float: 1e-3}}}
			in := map[string]*ir.Tensor{"x": vals["x"]}
			if !c.init {
				in["scale"] = vals["scale"]
			}
			if err := emuVsCPU(t, oneNodeModel(n, vals, map[string]bool{"scale": c.init}), in); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRotaryEmbeddingOnEmulator: rotary_f32 against the CPU kernel, and a
// position id past the caches as an error after the run.
func TestRotaryEmbeddingOnEmulator(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	cases := []struct {
		x           []int
		numHeads    int64
		rd          int64
		interleaved bool
		pos         bool
	}{
		{[]int{2, 4, 3, 8}, 0, 0, false, true},
		{[]int{2, 3, 32}, 4, 0, false, true},
		{[]int{2, 4, 3, 8}, 0, 4, true, true},
		{[]int{2, 4, 3, 8}, 0, 0, true, false},
		{[]int{1, 5, 24}, 2, 4, false, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.x, c.numHeads, c.rd, c.interleaved, c.pos), func(t *testing.T) {
			d := c.x[len(c.x)-1]
			if c.numHeads > 0 {
				d /= int(c.numHeads)
			}
			rd := int(c.rd)
			if rd == 0 {
				rd = d
			}
			b, s := c.x[0], c.x[len(c.x)-2]
			if len(c.x) == 3 {
				s = c.x[1]
			}
			vals := map[string]*ir.Tensor{"x": randF(r, c.x...)}
			inputs := []string{"x", "cos", "sin"}
			if c.pos {
				vals["cos"], vals["sin"] = randF(r, 16, rd/2), randF(r, 16, rd/2)
				p := ir.NewTensor(ir.Int64, []int{b, s})
				for i := range p.Int64s() {
					p.Int64s()[i] = int64(r.Intn(16))
				}
				vals["pos"] = p
				inputs = append(inputs, "pos")
			} else {
				vals["cos"], vals["sin"] = randF(r, b, s, rd/2), randF(r, b, s, rd/2)
			}
			var attrs []*ir.Attribute
			for _, a := range []struct {
				name string
				v    int64
			}{{"num_heads", c.numHeads}, {"rotary_embedding_dim", c.rd}, {"interleaved", map[bool]int64{true: 1}[c.interleaved]}} {
				if a.v != 0 {
					attrs = append(attrs, &ir.Attribute{Name: a.name, Type: ir.AttrInt, Int: a.v})
				}
			}
			n := &ir.Node{Name: "rope", OpType: "RotaryEmbedding", Inputs: inputs, Outputs: []string{"y"}, Attrs: attrs}
			m := oneNodeModel(n, vals, map[string]bool{"cos": true, "sin": true})
			in := map[string]*ir.Tensor{"x": vals["x"]}
			if c.pos {
				in["pos"] = vals["pos"]
			}
			if err := emuVsCPU(t, m, in); err != nil {
				t.Fatal(err)
			}
			if c.pos {
				bad := vals["pos"].Clone()
				bad.Int64s()[0] = 16
				in["pos"] = bad
				s, _, id := compileOnEmu(t, m, false)
				if _, err := s.Run(context.Background(), id, in); err == nil || !strings.Contains(err.Error(), "RotaryEmbedding position id") {
					t.Errorf("position past the caches: %v", err)
				}
			}
		})
	}
}
