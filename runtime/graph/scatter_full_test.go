package graph

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// grid is the row-major coordinate grid of dims: shape dims + [len(dims)].
func grid(dims ...int) *ir.Tensor {
	r := len(dims)
	shape := append(append([]int{}, dims...), r)
	t := ir.NewTensor(ir.Int64, shape)
	coord := make([]int64, r)
	for at := 0; at < len(t.Int64s()); at += r {
		copy(t.Int64s()[at:], coord)
		for d := r - 1; d >= 0; d-- {
			if coord[d]++; coord[d] < int64(dims[d]) {
				break
			}
			coord[d] = 0
		}
	}
	return t
}

func TestRowMajorGrid(t *testing.T) {
	swapped := grid(2, 3)
	v := swapped.Int64s()
	v[0], v[1], v[2], v[3] = v[2], v[3], v[0], v[1] // two positions' tuples exchanged
	repeated := grid(2, 3)
	copy(repeated.Int64s()[2:4], repeated.Int64s()[0:2]) // position 0 twice, position 1 never
	for _, c := range []struct {
		name string
		idx  *ir.Tensor
		dims []int
		want bool
	}{
		{"2x3", grid(2, 3), []int{2, 3}, true},
		{"1x1x5x5", grid(1, 1, 5, 5), []int{1, 1, 5, 5}, true},
		{"rank 1", grid(7), []int{7}, true},
		{"two tuples exchanged", swapped, []int{2, 3}, false},
		{"one position twice", repeated, []int{2, 3}, false},
		{"another shape's grid", grid(3, 2), []int{2, 3}, false},
	} {
		if got := rowMajorGrid(c.idx, c.dims); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// column is column d of grid(dims...): shape dims + [1].
func column(d int, dims ...int) *ir.Tensor {
	g := grid(dims...)
	r := len(dims)
	c := ir.NewTensor(ir.Int64, append(append([]int{}, dims...), 1))
	for i := range c.Int64s() {
		c.Int64s()[i] = g.Int64s()[i*r+d]
	}
	return c
}

func TestCoordinateColumn(t *testing.T) {
	shifted := column(1, 2, 3)
	shifted.Int64s()[4]++
	for _, c := range []struct {
		name string
		col  *ir.Tensor
		dims []int
		d    int
		want bool
	}{
		{"2x3, dim 0", column(0, 2, 3), []int{2, 3}, 0, true},
		{"2x3, dim 1", column(1, 2, 3), []int{2, 3}, 1, true},
		{"1x1x5x5, dim 3", column(3, 1, 1, 5, 5), []int{1, 1, 5, 5}, 3, true},
		{"dim 1's column as dim 0", column(1, 2, 3), []int{2, 3}, 0, false},
		{"one element off", shifted, []int{2, 3}, 1, false},
		{"another shape", column(0, 3, 2), []int{2, 3}, 0, false},
		{"too short", column(0, 2, 2), []int{2, 3}, 0, false},
	} {
		if got := coordinateColumn(c.col, c.dims, c.d); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDropFullScatters: a ScatterND whose indices list every position of
// its data in row-major order runs as an Identity of its updates; others
// stay ScatterNDs. Each case runs with the rewrites and without (NoFuse)
// and gives the same output.
func TestDropFullScatters(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	partial := ir.NewTensor(ir.Int64, []int{3, 1, 3})
	copy(partial.Int64s(), []int64{0, 0, 0, 1, 0, 2, 1, 0, 3}) // three positions of [2, 1, 4]
	for _, c := range []struct {
		name  string
		idx   *ir.Tensor
		upd   []int
		red   string
		steps string // the plan's steps
	}{
		{name: "full grid: Identity", idx: grid(2, 1, 4), upd: []int{2, 1, 4}, steps: "Identity"},
		{name: "full grid, reduction add: kept", idx: grid(2, 1, 4), upd: []int{2, 1, 4}, red: "add", steps: "ScatterND"},
		{name: "three positions: kept", idx: partial, upd: []int{3, 1}, steps: "ScatterND"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := node("ScatterND", []string{"d", "i", "u"}, []string{"y"})
			if c.red != "" {
				n.Attrs = append(n.Attrs, &ir.Attribute{Name: "reduction", Type: ir.AttrString, String: []byte(c.red)})
			}
			syn := synth{inputs: []*ir.ValueInfo{vi("d", ir.Float, 2, 1, 4), vi("u", ir.Float, c.upd...)},
				inits: map[string]*ir.Tensor{"i": c.idx}, nodes: []*ir.Node{n}, outputs: []string{"y"}}
			m := syn.model()
			m.Opsets[""] = 18
			in := synthInputs(r, m, nil)
			fused, unfused, _ := runBoth(t, m, in)
			sameOutputs(t, fused, unfused)
			wantSteps(t, m, in, c.steps)
			if strings.Contains(c.steps, "Identity") {
				sameOutputs(t, fused, in["u"])
			}
		})
	}
}

// TestFullScatterLongMask: transformers 4.44's LLaMA mask at longSeq
// tokens, where its ScatterND's indices (longSeq² × 4 int64) are too large
// to fold and are evaluated instead. The plan runs no ScatterND and no
// step that creates a tensor of longSeq² elements or more: the indices
// and the Expands of their columns are gone (the ScatterND is an Identity
// of its updates), and so is the mask itself, whose padding test narrows
// to the keys (key_padding.go), leaving the causal part to the fused
// node's cut. Its output is the unfused plan's, with the first keys
// padded.
func TestFullScatterLongMask(t *testing.T) {
	m, p := compileModel(t, "llama_update_causal_mask")
	mask := ir.NewTensor(ir.Int64, []int{1, longSeq})
	for j := range mask.Int64s() {
		if j >= 7 {
			mask.Int64s()[j] = 1
		}
	}
	in := map[string]*ir.Tensor{"x": randT(rand.New(rand.NewSource(4)), 1, longSeq, 64), "attention_mask": mask}
	pl, err := p.planFor(in)
	if err != nil {
		t.Fatal(err)
	}
	cut := false
	for _, st := range pl.steps {
		if st.node.OpType == ops.FusedAttentionOp {
			c, _ := st.node.AttrInt("causal", 0)
			cut = cut || c == 1
		}
		if st.node.OpType == "ScatterND" {
			t.Errorf("step %s is still a ScatterND", st.node.Label())
		}
		for k, o := range st.node.Outputs {
			if w := st.want[k]; o != "" && ir.NumElements(mustDims(t, w)) >= longSeq*longSeq {
				t.Errorf("step %s (%s) creates %s, %v %v", st.node.Label(), st.node.OpType, o, w.DType, w.Shape)
			}
		}
	}
	p.donePlan(pl)
	if !cut {
		t.Errorf("no fused step with the causal cut")
	}
	fused, unfused, _ := runBoth(t, m, in)
	sameOutputs(t, fused, unfused)
}

// mustDims returns a concrete type's dims.
func mustDims(t *testing.T, ty ir.TypeInfo) []int {
	t.Helper()
	dims, ok := ty.Shape.Concrete()
	if !ok {
		t.Fatalf("shape %v is not concrete", ty.Shape)
	}
	return dims
}

// TestBroadcastIndexColumns: indices built as PyTorch builds a slice
// assignment's, an arange per dim reshaped to broadcast, expanded to the
// full index shape, given a trailing axis and concatenated, too large to
// fold (each column over 4 Mi int64): they are checked on the aranges
// (broadcastBase), and the ScatterND runs as an Identity; with one arange
// reversed it stays a ScatterND. The outputs match the unfused plan's.
func TestBroadcastIndexColumns(t *testing.T) {
	const n = 2050 // columns of 2050² int64: more than a plan folds
	dims := []int{1, 1, n, n}
	i64 := func(v ...int64) *ir.Tensor {
		c := ir.NewTensor(ir.Int64, []int{len(v)})
		copy(c.Int64s(), v)
		return c
	}
	arange := func(k int, reversed bool, shape ...int) *ir.Tensor {
		c := ir.NewTensor(ir.Int64, shape)
		for i := range c.Int64s() {
			c.Int64s()[i] = int64(i)
			if reversed {
				c.Int64s()[i] = int64(dims[k] - 1 - i)
			}
		}
		return c
	}
	for _, c := range []struct {
		name     string
		reversed bool
		steps    string
	}{
		{"aranges: Identity", false, "Identity"},
		{"the last arange reversed: kept", true, "Expand Unsqueeze Expand Unsqueeze Expand Unsqueeze Expand Unsqueeze Concat ScatterND"},
	} {
		t.Run(c.name, func(t *testing.T) {
			syn := synth{
				inputs: []*ir.ValueInfo{vi("d", ir.Float, dims...), vi("u", ir.Float, dims...)},
				inits: map[string]*ir.Tensor{
					"a0": arange(0, false, 1, 1, 1, 1), "a1": arange(1, false, 1, 1, 1), "a2": arange(2, false, n, 1),
					"a3": arange(3, c.reversed, n), "full": i64(1, 1, n, n), "last": i64(-1),
				},
			}
			var cols []string
			for k := range 4 {
				a, e, u := fmt.Sprintf("a%d", k), fmt.Sprintf("e%d", k), fmt.Sprintf("c%d", k)
				syn.nodes = append(syn.nodes, node("Expand", []string{a, "full"}, []string{e}), node("Unsqueeze", []string{e, "last"}, []string{u}))
				cols = append(cols, u)
			}
			syn.nodes = append(syn.nodes,
				node("Concat", cols, []string{"idx"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}),
				node("ScatterND", []string{"d", "idx", "u"}, []string{"y"}))
			syn.outputs = []string{"y"}
			m := syn.model()
			r := rand.New(rand.NewSource(2))
			in := synthInputs(r, m, nil)
			wantSteps(t, m, in, c.steps)
			fused, unfused, _ := runBoth(t, m, in)
			sameOutputs(t, fused, unfused)
		})
	}
}
