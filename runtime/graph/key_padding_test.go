package graph

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestNarrowPaddingTests: transformers' padding test over the causal mask,
// Where(Equal(Add(C, Cast(am)), 0), F, D), runs as Where(Equal(Cast(am),
// 0), F, D) when C is 0 and F (at least 2^66 in magnitude) and D is F
// where C is not 0; the other cases keep their Add. Each case's output is
// the unfused plan's (NoFuse does not rewrite).
func TestNarrowPaddingTests(t *testing.T) {
	const b, s = 2, 6
	fmin := float32(-math.MaxFloat32)
	causal := func(fill float32) *ir.Tensor {
		c := ir.NewTensor(ir.Float, []int{b, 1, s, s})
		v := c.Float32s()
		for k := range b {
			for i := range s {
				for j := range s {
					if j > i {
						v[(k*s+i)*s+j] = fill
					}
				}
			}
		}
		return c
	}
	am := ir.NewTensor(ir.Int64, []int{b, 1, 1, s})
	copy(am.Int64s(), []int64{0, 0, 1, 1, 1, 1, 1, 1, 1, 5, -3, 0}) // left padding; other integers
	amFloat := ir.NewTensor(ir.Float, []int{b, 1, 1, s})
	for i, v := range am.Int64s() {
		amFloat.Float32s()[i] = float32(v)
	}
	for _, c := range []struct {
		name     string
		pad      string // "int": Cast of the int64 input; "float": the float input itself
		c, d     *ir.Tensor
		fill     float32
		boolCast bool // a bool → bool Cast between the Equal and the Where
		zeroLeft bool // Equal(0, sum)
		steps    string
	}{
		{name: "finfo.min causal", pad: "int", c: causal(fmin), d: causal(fmin), fill: fmin, steps: "Cast Equal Where"},
		{name: "through a bool Cast", pad: "int", c: causal(fmin), d: causal(fmin), fill: fmin, boolCast: true, steps: "Cast Equal Where"},
		{name: "zero on the left", pad: "int", c: causal(fmin), d: causal(fmin), fill: fmin, zeroLeft: true, steps: "Cast Equal Where"},
		{name: "-1e30 causal", pad: "int", c: causal(-1e30), d: causal(-1e30), fill: -1e30, steps: "Cast Equal Where"},
		{name: "a float padding mask: kept", pad: "float", c: causal(fmin), d: causal(fmin), fill: fmin, steps: "Add Equal Where"},
		{name: "a -1e4 causal mask: kept", pad: "int", c: causal(-1e4), d: causal(-1e4), fill: -1e4, steps: "Cast Add Equal Where"},
		{name: "D not the fill where C hides: kept", pad: "int", c: causal(fmin), d: causal(-1e30), fill: fmin, steps: "Cast Add Equal Where"},
	} {
		t.Run(c.name, func(t *testing.T) {
			syn := synth{
				inputs: []*ir.ValueInfo{vi("am", ir.Int64, b, 1, 1, s), vi("amf", ir.Float, b, 1, 1, s)},
				inits:  map[string]*ir.Tensor{"c": c.c, "d": c.d, "zero": sc(0), "fill": sc(c.fill)},
			}
			pad := "amf"
			if c.pad == "int" {
				pad = "p"
				syn.nodes = append(syn.nodes, node("Cast", []string{"am"}, []string{"p"}, &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(ir.Float)}))
			}
			eqIn := []string{"sum", "zero"}
			if c.zeroLeft {
				eqIn = []string{"zero", "sum"}
			}
			cond := "eq"
			syn.nodes = append(syn.nodes, node("Add", []string{"c", pad}, []string{"sum"}), node("Equal", eqIn, []string{"eq"}))
			if c.boolCast {
				cond = "eqb"
				syn.nodes = append(syn.nodes, node("Cast", []string{"eq"}, []string{"eqb"}, &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(ir.Bool)}))
			}
			syn.nodes = append(syn.nodes, node("Where", []string{cond, "fill", "d"}, []string{"y"}))
			syn.outputs = []string{"y"}
			m := syn.model()
			in := map[string]*ir.Tensor{"am": am, "amf": amFloat}
			wantSteps(t, m, in, c.steps)
			fused, unfused, _ := runBoth(t, m, in)
			for i, w := range unfused.Float32s() {
				if g := fused.Float32s()[i]; math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("element %d: %g, unfused %g", i, g, w)
				}
			}
		})
	}
}

// TestNoOpSteps: the steps the fuser reads a mask through unchanged
// (fuser.noOp) are Identity, a Cast to the type it has, and a Reshape,
// Expand or forward Slice to the shape it has; not a Slice that reverses,
// nor anything that changes the shape or the type.
func TestNoOpSteps(t *testing.T) {
	i64 := func(v ...int64) *ir.Tensor {
		c := ir.NewTensor(ir.Int64, []int{len(v)})
		copy(c.Int64s(), v)
		return c
	}
	cast := func(to ir.DType) *ir.Attribute {
		return &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(to)}
	}
	want := map[string]bool{
		"identity": true, "cast_same": true, "cast_double": false,
		"reshape_same": true, "reshape_other": false,
		"expand_same": true, "expand_wider": false,
		"slice_all": true, "slice_reverse": false, "slice_part": false,
	}
	syn := synth{
		inputs: []*ir.ValueInfo{vi("x", ir.Float, 2, 3, 4)},
		inits: map[string]*ir.Tensor{
			"shape_same": i64(2, 3, 4), "shape_other": i64(6, 4), "shape_wider": i64(2, 2, 3, 4),
			"zero": i64(0), "big": i64(math.MaxInt64), "last": i64(-1), "most": i64(math.MinInt64),
			"axis2": i64(2), "one": i64(1), "minus1": i64(-1), "two": i64(2),
		},
		nodes: []*ir.Node{
			node("Identity", []string{"x"}, []string{"identity"}),
			node("Cast", []string{"x"}, []string{"cast_same"}, cast(ir.Float)),
			node("Cast", []string{"x"}, []string{"cast_double"}, cast(ir.Double)),
			node("Reshape", []string{"x", "shape_same"}, []string{"reshape_same"}),
			node("Reshape", []string{"x", "shape_other"}, []string{"reshape_other"}),
			node("Expand", []string{"x", "shape_same"}, []string{"expand_same"}),
			node("Expand", []string{"x", "shape_wider"}, []string{"expand_wider"}),
			node("Slice", []string{"x", "zero", "big", "axis2", "one"}, []string{"slice_all"}),
			node("Slice", []string{"x", "last", "most", "axis2", "minus1"}, []string{"slice_reverse"}),
			node("Slice", []string{"x", "zero", "two", "axis2", "one"}, []string{"slice_part"}),
		},
	}
	for name := range want {
		syn.outputs = append(syn.outputs, name)
	}
	p, err := Compile(syn.model(), Options{Threads: 2, NoFuse: true})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := p.planFor(map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{2, 3, 4})})
	if err != nil {
		t.Fatal(err)
	}
	defer p.donePlan(pl)
	f := newFuser(p, pl, pl.types)
	seen := 0
	for _, st := range pl.steps {
		w, ok := want[st.node.Outputs[0]]
		if !ok {
			continue
		}
		seen++
		if got := f.noOp(st.node); got != w {
			t.Errorf("%s (%s): noOp %v, want %v", st.node.Outputs[0], st.node.OpType, got, w)
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d steps in the plan", seen, len(want))
	}
}
