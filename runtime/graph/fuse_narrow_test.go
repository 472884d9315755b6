package graph

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// TestFuseNarrowMasks checks masks computed after a broadcast
// (fuse_narrow.go): each case runs fused and unfused with the outputs
// compared, and the fused plan must read the mask in the shape given,
// run the nodes given (in order, each step's op and its output's shape)
// and no step of the full-size mask chain.
func TestFuseNarrowMasks(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	const b, h, s, d = 2, 3, 5, 4
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	qkv := []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s, d), vi("v", ir.Float, b, h, s, d)}
	with := func(extra ...*ir.ValueInfo) []*ir.ValueInfo {
		return append(slices.Clone(qkv), extra...)
	}
	// attention builds the chain reading mask m as an additive term of the
	// scores, its names suffixed.
	attention := func(m, suffix string) []*ir.Node {
		return []*ir.Node{
			node("Transpose", []string{"k"}, []string{"kt" + suffix}, perm),
			node("MatMul", []string{"q", "kt" + suffix}, []string{"s0" + suffix}),
			node("Add", []string{"s0" + suffix, m}, []string{"s1" + suffix}),
			node("Softmax", []string{"s1" + suffix}, []string{"p" + suffix}, axis),
			node("MatMul", []string{"p" + suffix, "v"}, []string{"y" + suffix})}
	}
	// expandMask is transformers' _expand_mask of an int64 attention_mask
	// [b, s] (1 = keep): Unsqueeze, Expand to [b, 1, s, s], Cast, 1 - m,
	// masked_fill of its nonzeros with finfo.min.
	expandMask := []*ir.Node{
		node("Unsqueeze", []string{"am", "axes"}, []string{"am4"}),
		node("Expand", []string{"am4", "full"}, []string{"e"}),
		node("Cast", []string{"e"}, []string{"ef"}, castTo(ir.Float)),
		node("Sub", []string{"one", "ef"}, []string{"inv"}),
		node("Cast", []string{"inv"}, []string{"ib"}, castTo(ir.Bool)),
		node("Where", []string{"ib", "fmin", "inv"}, []string{"mk"})}
	expandInits := map[string]*ir.Tensor{
		"axes": int64s(1, 2), "full": int64s(b, 1, s, s), "one": sc(1), "fmin": sc(-math.MaxFloat32)}
	// keep is an attention_mask that keeps key 0 of every batch item and
	// pads the last two keys of batch 1.
	keep := ir.NewTensor(ir.Int64, []int{b, s})
	for i := range keep.Int64s() {
		if i < s || i%s < s-2 {
			keep.Int64s()[i] = 1
		}
	}
	fullAt := int64s(b, h, s, s)
	cases := []struct {
		name  string
		syn   synth
		feeds map[string]*ir.Tensor
		attrs string
		mask  string // the fused node's mask (input 3), [shape]
		steps string // the fused plan's steps before the products: op[shape] ...
		count int    // fusions
		// absorbed: each fusion's Absorbed nodes, the full-size steps
		// no longer run
		absorbed []string
	}{
		{name: "transformers' _expand_mask (BART)",
			syn:   synth{inputs: with(vi("am", ir.Int64, b, s)), inits: expandInits, nodes: append(slices.Clone(expandMask), attention("mk", "")...)},
			feeds: map[string]*ir.Tensor{"am": keep},
			attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-3.4028235e+38", mask: "[2x1x1x5]",
			steps: "Unsqueeze[2x1x1x5] Cast[2x1x1x5] Sub[2x1x1x5] Cast[2x1x1x5] FusedAttention[2x3x5x4]", count: 1, absorbed: []string{"Expand Cast Sub Cast"}},
		// The Expand is dropped before the fusion (broadcast_expand.go).
		{name: "an Expand added as it is: the fused node broadcasts its input",
			syn: synth{inputs: with(vi("a", ir.Float, b, 1, 1, s)), inits: map[string]*ir.Tensor{"full": fullAt},
				nodes: append([]*ir.Node{node("Expand", []string{"a", "full"}, []string{"mk"})}, attention("mk", "")...)},
			attrs: "scale=1 mask_kind=additive mask_scale=1", mask: "[2x1x1x5]",
			steps: "FusedAttention[2x3x5x4]", count: 1, absorbed: []string{""}},
		// The Add reads the Expand's input (broadcast_expand.go); the fused
		// node takes its two terms apart (biasPlusKeyMask): the per-key one
		// as its mask, the full-size one as its bias, and the Add does not
		// run.
		{name: "an Expand then a full-size term: taken apart",
			syn: synth{inputs: with(vi("a", ir.Float, b, 1, 1, s), vi("c", ir.Float, b, 1, s, s)), inits: map[string]*ir.Tensor{"full": int64s(b, 1, s, s)},
				nodes: append([]*ir.Node{node("Expand", []string{"a", "full"}, []string{"e"}), node("Add", []string{"e", "c"}, []string{"mk"})}, attention("mk", "")...)},
			attrs: "scale=1 mask_kind=additive mask_scale=1 bias_scale=1", mask: "[2x1x1x5]",
			steps: "FusedAttention[2x3x5x4]", count: 1, absorbed: []string{""}},
		// Two readers of the Where: each takes it as an additive mask.
		{name: "one _expand_mask read by two attentions: computed once",
			syn: synth{inputs: with(vi("am", ir.Int64, b, s)), inits: expandInits,
				nodes: slices.Concat(expandMask, attention("mk", ""), attention("mk", "_2"))},
			feeds: map[string]*ir.Tensor{"am": keep},
			attrs: "scale=1 mask_kind=additive mask_scale=1", mask: "[2x1x1x5]",
			steps: "Unsqueeze[2x1x1x5] Cast[2x1x1x5] Sub[2x1x1x5] Cast[2x1x1x5] Where[2x1x1x5] FusedAttention[2x3x5x4] FusedAttention[2x3x5x4]", count: 2, absorbed: []string{"Expand Cast Sub Cast Where", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			syn := c.syn
			if c.count == 2 {
				syn.outputs = []string{"y_2"}
			}
			syn.outputs = append([]string{"y"}, syn.outputs...)
			m := syn.model()
			in := synthInputs(r, m, c.feeds)
			fused, unfused, fs := runAll(t, m, in)
			for _, o := range syn.outputs {
				sameOutputs(t, fused[o], unfused[o])
			}
			if len(fs) != c.count {
				t.Fatalf("%d fusions, want %d", len(fs), c.count)
			}
			p, err := Compile(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			types, err := p.Plan(in)
			if err != nil {
				t.Fatal(err)
			}
			for k, f := range fs {
				var absorbed []string
				for _, n := range f.Absorbed {
					absorbed = append(absorbed, n.OpType)
				}
				if g := strings.Join(absorbed, " "); g != c.absorbed[k] {
					t.Errorf("fusion %d absorbed %s, want %s", k, g, c.absorbed[k])
				}
				if g := fusedAttrs(f.Node); g != c.attrs {
					t.Errorf("attributes %s, want %s", g, c.attrs)
				}
				if g := "[" + shapeOf(types, f.Node.Input(3)) + "]"; g != c.mask {
					t.Errorf("mask %s is %s, want %s", f.Node.Input(3), g, c.mask)
				}
			}
			steps, err := p.Steps(in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range steps {
				if n.OpType == "MatMul" || n.OpType == "Transpose" {
					continue
				}
				got = append(got, n.OpType+"["+shapeOf(types, n.Outputs[0])+"]")
			}
			if g := strings.Join(got, " "); g != c.steps {
				t.Errorf("steps %s, want %s", g, c.steps)
			}
		})
	}
}

// shapeOf writes the concrete shape of a plan's tensor as 2x3x4.
func shapeOf(types map[string]ops.Value, name string) string {
	dims, _ := types[name].Type.Shape.Concrete()
	return ir.ShapeString(dims)
}
