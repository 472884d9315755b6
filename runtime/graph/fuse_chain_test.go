package graph

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// runAll runs a model fused and unfused and returns every graph output of
// both runs and the fused plan's attention fusions.
func runAll(t *testing.T, m *ir.Model, in map[string]*ir.Tensor) (fused, unfused map[string]*ir.Tensor, fs []Fusion) {
	t.Helper()
	var outs [2]map[string]*ir.Tensor
	for k, noFuse := range []bool{false, true} {
		p, err := Compile(m, Options{Threads: 2, NoFuse: noFuse})
		if err != nil {
			t.Fatal(err)
		}
		if outs[k], err = p.Run(context.Background(), in, RunOptions{}); err != nil {
			t.Fatal(err)
		}
		if !noFuse {
			all, err := p.Fusions(in)
			if err != nil {
				t.Fatal(err)
			}
			fs = attentionFusions(all)
			checkMissReasons(t, p, in)
		}
	}
	return outs[0], outs[1], fs
}

func castTo(dt ir.DType) *ir.Attribute {
	return &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(dt)}
}

func equation(eq string) *ir.Attribute {
	return &ir.Attribute{Name: "equation", Type: ir.AttrString, String: []byte(eq)}
}

func int64s(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }

// fusedAttrs lists the fused node's attributes that the export forms set,
// as name=value, in the node's order.
func fusedAttrs(n *ir.Node) string {
	var out []string
	for _, a := range n.Attrs {
		switch a.Type {
		case ir.AttrFloat:
			out = append(out, fmt.Sprintf("%s=%g", a.Name, a.Float))
		case ir.AttrInt:
			out = append(out, fmt.Sprintf("%s=%d", a.Name, a.Int))
		case ir.AttrString:
			out = append(out, fmt.Sprintf("%s=%s", a.Name, a.String))
		case ir.AttrInts:
			out = append(out, a.Name) // views: their values depend on the shapes
		}
	}
	return strings.Join(out, " ")
}

// TestFuseExportForms covers the forms of the attention chain that real
// exports take (issue 13) on small synthetic graphs, each run fused and
// unfused with every output compared: no-op Casts around the Softmax, its
// output read elsewhere (the fused node writes it), two masks, a Sub,
// scales folded into Q and K, nn.MultiheadAttention's float -inf mask,
// grouped and multi-query K/V made by Expand, einsum spellings, 2-D
// inputs; and the forms that must stay unfused.
func TestFuseExportForms(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const b, h, s, d = 2, 4, 6, 4
	negInf := float32(math.Inf(-1))
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	qkv := []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s, d), vi("v", ir.Float, b, h, s, d)}
	kvLonger := []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s+2, d), vi("v", ir.Float, b, h, s+2, d)} // a KV cache of 2
	kv2 := []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, 2, s, d), vi("v", ir.Float, b, 2, s, d)}          // 2 KV heads
	with := func(extra ...*ir.ValueInfo) []*ir.ValueInfo {
		return append(append([]*ir.ValueInfo{}, qkv...), extra...)
	}
	kt := node("Transpose", []string{"k"}, []string{"kt"}, perm)
	qk := node("MatMul", []string{"q", "kt"}, []string{"s0"})
	softmax := func(x, p string) *ir.Node { return node("Softmax", []string{x}, []string{p}, axis) }
	pv := func(p string) *ir.Node { return node("MatMul", []string{p, "v"}, []string{"y"}) }
	// scores builds Transpose, MatMul, the given nodes, Softmax and P·V,
	// the Softmax reading the last node's output.
	scores := func(mid ...*ir.Node) []*ir.Node {
		out := append([]*ir.Node{kt, qk}, mid...)
		return append(out, softmax(mid[len(mid)-1].Outputs[0], "p"), pv("p"))
	}
	boolMask := func(shape ...int) *ir.Tensor {
		m := ir.NewTensor(ir.Bool, shape)
		for i := range m.Bools() {
			m.Bools()[i] = r.Intn(3) == 0 && i%shape[len(shape)-1] != 0 // key 0 always kept
		}
		return m
	}
	zeros := ir.NewTensor(ir.Float, []int{1})
	// padRows is a key padding mask [b, 1, 1, s] (true = padding) that
	// hides every key of batch 0: its rows see no key.
	padRows := func() *ir.Tensor {
		m := boolMask(b, 1, 1, s)
		for j := 0; j < s; j++ {
			m.Bools()[j] = true
		}
		return m
	}
	// zeroed builds ESPnet's masked_fill(cond, fill) before the Softmax and
	// masked_fill(cond, 0) after it, each reading its own Cast of m: with
	// keep, the Wheres take the scores where m is true instead.
	zeroed := func(fill float32, keep bool) synth {
		pre, post := []string{"mc", "fill", "s1"}, []string{"mc2", "zero", "p0"}
		if keep {
			pre, post = []string{"mc", "s1", "fill"}, []string{"mc2", "p0", "zero"}
		}
		return synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)), inits: map[string]*ir.Tensor{"c": sc(2), "fill": sc(fill), "zero": sc(0)},
			nodes: []*ir.Node{kt, qk, node("Div", []string{"s0", "c"}, []string{"s1"}),
				node("Cast", []string{"m"}, []string{"mc"}, castTo(ir.Bool)), node("Where", pre, []string{"s2"}), softmax("s2", "p0"),
				node("Cast", []string{"m"}, []string{"mc2"}, castTo(ir.Bool)), node("Where", post, []string{"p"}), pv("p")}}
	}
	// qkvGather reads q, k and v as Gathers of one index from a packed
	// [3, b, h, s, d] tensor (timm's qkv[0], qkv[1], qkv[2]).
	idx := func(i int64) *ir.Tensor { return ir.Scalar(i) }
	qkvGather := synth{inputs: []*ir.ValueInfo{vi("qkv", ir.Float, 3, b, h, s, d)}, inits: map[string]*ir.Tensor{"i0": idx(0), "i1": idx(1), "i2": idx(-1)},
		nodes: []*ir.Node{node("Gather", []string{"qkv", "i0"}, []string{"q"}), node("Gather", []string{"qkv", "i1"}, []string{"k"}),
			node("Gather", []string{"qkv", "i2"}, []string{"v"}), kt, qk, softmax("s0", "p"), pv("p")}}
	// scaledBeforeSplit scales the projected q [b, s, h·d] by 0.5, then
	// splits the heads: Reshape to [b, s, h, d], Transpose to [b, h, s, d].
	scaledBeforeSplit := synth{inputs: []*ir.ValueInfo{vi("qp", ir.Float, b, s, h*d), vi("k", ir.Float, b, h, s, d), vi("v", ir.Float, b, h, s, d)},
		inits: map[string]*ir.Tensor{"half": sc(0.5), "heads": int64s(b, s, h, d)},
		nodes: []*ir.Node{node("Mul", []string{"qp", "half"}, []string{"qs"}), node("Reshape", []string{"qs", "heads"}, []string{"q4"}),
			node("Transpose", []string{"q4"}, []string{"q"}, &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 2, 1, 3}}),
			kt, qk, softmax("s0", "p"), pv("p")}}
	// headScaled multiplies the scores by constant c and adds a bias m,
	// the Mul first, or with maskFirst the Add first.
	headScale := ir.NewTensor(ir.Float, []int{h, 1, 1})
	for i := range headScale.Float32s() {
		headScale.Float32s()[i] = float32(1+3*i) / 2
	}
	headScaled := func(c *ir.Tensor, maskFirst bool) synth {
		mid := []*ir.Node{node("Mul", []string{"s0", "c"}, []string{"s1"}), node("Add", []string{"s1", "m"}, []string{"s2"})}
		if maskFirst {
			mid = []*ir.Node{node("Add", []string{"s0", "m"}, []string{"s1"}), node("Mul", []string{"c", "s1"}, []string{"s2"})}
		}
		return synth{inputs: with(vi("m", ir.Float, 1, h, s, s)), inits: map[string]*ir.Tensor{"c": c}, nodes: scores(mid...)}
	}
	// headMasked multiplies the softmax's weights by hm [1, h, 1, 1].
	headMasked := synth{inputs: with(vi("hm", ir.Float, 1, h, 1, 1)),
		nodes: []*ir.Node{kt, qk, softmax("s0", "p0"), node("Mul", []string{"p0", "hm"}, []string{"p"}), pv("p")}}
	// sinked joins a sink column sk [b, h, s, 1] (an input, or the
	// constant [1, h, 1, 1] expanded) to the scores after the scale c and
	// an additive mask m, takes the row maximum off, and slices the column
	// off the softmax's output with ends end (-1 drops it); mid runs
	// between the Concat and the row maximum.
	sinkLogits := ir.NewTensor(ir.Float, []int{1, h, 1, 1})
	for i := range sinkLogits.Float32s() {
		sinkLogits.Float32s()[i] = float32(i) - 1.5
	}
	sinked := func(expanded bool, start, end int64, mid ...*ir.Node) synth {
		syn := synth{inputs: with(vi("m", ir.Float, 1, 1, s, s)),
			inits: map[string]*ir.Tensor{"c": sc(0.5), "st": int64s(start), "en": int64s(end), "ax": int64s(-1)}}
		sk := []*ir.Node{}
		if expanded {
			syn.inits["sinks"], syn.inits["skshape"] = sinkLogits, int64s(b, h, s, 1)
			sk = append(sk, node("Expand", []string{"sinks", "skshape"}, []string{"sk"}))
		} else {
			syn.inputs = append(syn.inputs, vi("sk", ir.Float, b, h, s, 1))
		}
		last := "cat"
		if len(mid) > 0 {
			last = mid[len(mid)-1].Outputs[0]
		}
		nodes := append([]*ir.Node{kt, qk, node("Mul", []string{"s0", "c"}, []string{"s1"}), node("Add", []string{"s1", "m"}, []string{"s2"})}, sk...)
		nodes = append(nodes, node("Concat", []string{"s2", "sk"}, []string{"cat"}, axis))
		nodes = append(nodes, mid...)
		nodes = append(nodes, node("ReduceMax", []string{last}, []string{"mx"}, &ir.Attribute{Name: "axes", Type: ir.AttrInts, Ints: []int64{-1}}), node("Sub", []string{last, "mx"}, []string{"sh"}),
			softmax("sh", "pw"), node("Slice", []string{"pw", "st", "en", "ax"}, []string{"p"}), pv("p"))
		syn.nodes = nodes
		return syn
	}
	// headDivided divides the scores by constant c (a learned temperature
	// per head) and adds a bias m; with constantOver c is divided by the
	// scores instead.
	headDivided := func(constantOver bool) synth {
		in := []string{"s0", "c"}
		if constantOver {
			in = []string{"c", "s0"}
		}
		mid := []*ir.Node{node("Div", in, []string{"s1"}), node("Add", []string{"s1", "m"}, []string{"s2"})}
		return synth{inputs: with(vi("m", ir.Float, 1, h, s, s)), inits: map[string]*ir.Tensor{"c": headScale}, nodes: scores(mid...)}
	}
	// gridded views the scores of s = 2·3 queries and keys as a 2×3 grid
	// of each ([b, h, 2, 3, 2, 3]), adds terms (inputs named by shape:
	// "rows" [b, h, 2, 3, 2, 1], "cols" [b, h, 2, 3, 1, 3], "dense" the
	// whole grid) in the order given, the term first where termFirst, and
	// views them back; then runs after.
	gridded := func(termFirst bool, terms []string, after ...*ir.Node) synth {
		shapes := map[string][]int{"rows": {b, h, 2, 3, 2, 1}, "cols": {b, h, 2, 3, 1, 3}, "dense": {b, h, 2, 3, 2, 3}}
		syn := synth{inputs: with(), inits: map[string]*ir.Tensor{"grid": int64s(b, h, 2, 3, 2, 3), "back": int64s(b, h, s, s)}}
		mid := []*ir.Node{node("Reshape", []string{"s0", "grid"}, []string{"g0"})}
		x := "g0"
		for i, t := range terms {
			syn.inputs = append(syn.inputs, vi(t, ir.Float, shapes[t]...))
			in := []string{x, t}
			if termFirst {
				in = []string{t, x}
			}
			x = fmt.Sprintf("g%d", i+1)
			mid = append(mid, node("Add", in, []string{x}))
		}
		mid = append(mid, node("Reshape", []string{x, "back"}, []string{"sg"}))
		syn.nodes = scores(append(mid, after...)...)
		return syn
	}
	// mqaGather reads q as a Slice and k, v as Gathers of a one-element
	// index list, which keep the axis (Falcon's fused[:, [-2]]), from a
	// [b, h+2, s, d] tensor: k and v have one head, broadcast.
	axis1 := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: 1}
	mqaGather := synth{inputs: []*ir.ValueInfo{vi("f", ir.Float, b, h+2, s, d)},
		inits: map[string]*ir.Tensor{"st": int64s(0), "en": int64s(h), "ax": int64s(1), "ik": int64s(-2), "iv": int64s(h + 1)},
		nodes: []*ir.Node{node("Slice", []string{"f", "st", "en", "ax"}, []string{"q"}), node("Gather", []string{"f", "ik"}, []string{"k"}, axis1),
			node("Gather", []string{"f", "iv"}, []string{"v"}, axis1), kt, qk, softmax("s0", "p"), pv("p")}}
	// expandMask is transformers' _expand_mask on a float e (1 - mask):
	// Where(Cast(Cast(e → bool) → bool), fill, e), added to the scores.
	padE := func() *ir.Tensor {
		e := ir.NewTensor(ir.Float, []int{b, 1, 1, s})
		for i := range e.Float32s() {
			if r.Intn(3) == 0 && i%s != 0 {
				e.Float32s()[i] = float32(1 + r.Intn(2)) // any nonzero value hides the key
			}
		}
		return e
	}
	expandMask := func(fill float32, extra ...*ir.Node) synth {
		nodes := []*ir.Node{node("Cast", []string{"e"}, []string{"eb"}, castTo(ir.Bool)), node("Cast", []string{"eb"}, []string{"eb2"}, castTo(ir.Bool)),
			node("Where", []string{"eb2", "fill", "e"}, []string{"em"}), kt, qk, node("Add", []string{"s0", "em"}, []string{"s1"})}
		nodes = append(nodes, extra...)
		last := nodes[len(nodes)-1].Outputs[0]
		return synth{inputs: with(vi("e", ir.Float, b, 1, 1, s), vi("pb", ir.Float, 1, h, s, s)), inits: map[string]*ir.Tensor{"fill": sc(fill)},
			nodes: append(nodes, softmax(last, "p"), pv("p"))}
	}
	cases := []struct {
		name  string
		syn   synth
		feeds map[string]*ir.Tensor // inputs other than random floats
		ops   string                // replaced op types ("" with none)
		attrs string                // fusedAttrs of the fused node
		none  bool                  // must stay unfused
		why   string                // with none: in MissedAttention's reason
	}{
		{name: "no-op Casts around the Softmax (T5, LLaMA, Whisper)", syn: synth{inputs: qkv, nodes: []*ir.Node{kt, qk,
			node("Cast", []string{"s0"}, []string{"s1"}, castTo(ir.Float)), softmax("s1", "p0"),
			node("Cast", []string{"p0"}, []string{"p1"}, castTo(ir.Float)), node("Identity", []string{"p1"}, []string{"p"}), pv("p")}},
			ops: "Transpose MatMul Cast Softmax Cast Identity MatMul", attrs: "scale=1"},
		{name: "P·P: not fused", syn: synth{inputs: qkv, nodes: []*ir.Node{kt, qk, softmax("s0", "p"),
			node("MatMul", []string{"p", "p"}, []string{"y"})}}, none: true},
		{name: "softmax in double: not fused", syn: synth{inputs: qkv, nodes: []*ir.Node{kt, qk,
			node("Cast", []string{"s0"}, []string{"s1"}, castTo(ir.Double)), softmax("s1", "p0"),
			node("Cast", []string{"p0"}, []string{"p"}, castTo(ir.Float)), pv("p")}}, none: true},
		{name: "weights also read (need_weights)", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(2)},
			nodes: append(scores(node("Div", []string{"s0", "c"}, []string{"s1"})), node("ReduceSum", []string{"p"}, []string{"w"})), outputs: []string{"w"}},
			ops: "Transpose MatMul Div Softmax MatMul", attrs: "scale=0.5 scores_mode=weights"},
		{name: "weights a graph output, after a Cast", syn: synth{inputs: qkv, nodes: []*ir.Node{kt, qk, softmax("s0", "p0"),
			node("Cast", []string{"p0"}, []string{"p"}, castTo(ir.Float)), pv("p")}, outputs: []string{"p"}},
			ops: "Transpose MatMul Softmax Cast MatMul", attrs: "scale=1 scores_mode=weights"},
		{name: "weights read before the product", syn: synth{inputs: qkv, nodes: []*ir.Node{kt, qk, softmax("s0", "p"),
			node("ReduceSum", []string{"p"}, []string{"w"}), pv("p")}, outputs: []string{"w"}},
			ops: "Transpose MatMul Softmax MatMul", attrs: "scale=1 scores_mode=weights"},
		{name: "weights read before V is computed: not fused", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(1.5)}, nodes: []*ir.Node{kt, qk, softmax("s0", "p"),
			node("ReduceSum", []string{"p"}, []string{"w"}), node("Mul", []string{"v", "c"}, []string{"v2"}), node("MatMul", []string{"p", "v2"}, []string{"y"})}, outputs: []string{"w"}},
			none: true},
		{name: "Where then Add (GPT-2: causal buffer, then padding)", syn: synth{inputs: with(vi("m", ir.Bool, s, s), vi("pad", ir.Float, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": sc(2), "fill": sc(-1e4)},
			nodes: scores(node("Div", []string{"s0", "c"}, []string{"s1"}), node("Where", []string{"m", "s1", "fill"}, []string{"s2"}), node("Add", []string{"s2", "pad"}, []string{"s3"}))},
			feeds: map[string]*ir.Tensor{"m": boolMask(s, s)},
			ops:   "Transpose MatMul Div Where Add Softmax MatMul", attrs: "scale=0.5 mask_kind=bool_false_masks mask_fill=-10000 bias_scale=1"},
		{name: "Add then Where then a scale (bias first)", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s), vi("pb", ir.Float, 1, h, s, s)),
			inits: map[string]*ir.Tensor{"c": sc(0.5), "fill": sc(negInf)},
			nodes: scores(node("Add", []string{"pb", "s0"}, []string{"s1"}), node("Where", []string{"m", "fill", "s1"}, []string{"s2"}), node("Mul", []string{"s2", "c"}, []string{"s3"}))},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)},
			ops:   "Transpose MatMul Add Where Mul Softmax MatMul", attrs: "scale=0.5 bias_first=1 mask_kind=bool_true_masks mask_fill=-Inf bias_scale=0.5"},
		{name: "position bias then mask, both added (T5)", syn: synth{inputs: with(vi("pb", ir.Float, 1, h, s, s), vi("m", ir.Float, b, 1, 1, s)),
			nodes: scores(node("Add", []string{"s0", "pb"}, []string{"s1"}), node("Add", []string{"m", "s1"}, []string{"s2"}))},
			ops: "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1 bias_scale=1"},
		{name: "two Wheres: not fused", syn: synth{inputs: with(vi("m", ir.Bool, s, s), vi("m2", ir.Bool, b, 1, 1, s)), inits: map[string]*ir.Tensor{"fill": sc(-1e9)},
			nodes: scores(node("Where", []string{"m", "fill", "s0"}, []string{"s1"}), node("Where", []string{"m2", "fill", "s1"}, []string{"s2"}))},
			feeds: map[string]*ir.Tensor{"m": boolMask(s, s), "m2": boolMask(b, 1, 1, s)}, none: true},
		{name: "three additive terms: not fused", syn: synth{inputs: with(vi("m", ir.Float, s, s)),
			nodes: scores(node("Add", []string{"s0", "m"}, []string{"s1"}), node("Add", []string{"s1", "m"}, []string{"s2"}), node("Add", []string{"s2", "m"}, []string{"s3"}))},
			none: true},
		{name: "a mask subtracted", syn: synth{inputs: with(vi("m", ir.Float, 1, 1, s, s)), inits: map[string]*ir.Tensor{"c": sc(4)},
			nodes: scores(node("Sub", []string{"s0", "m"}, []string{"s1"}), node("Div", []string{"s1", "c"}, []string{"s2"}))},
			ops: "Transpose MatMul Sub Div Softmax MatMul", attrs: "scale=0.25 mask_kind=additive mask_scale=-0.25"},
		{name: "scales folded into Q and K (Whisper's d^-1/4 each)", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(0.5), "c2": sc(2)},
			nodes: []*ir.Node{node("Mul", []string{"q", "c"}, []string{"qs"}), kt, node("Mul", []string{"c", "kt"}, []string{"kts"}),
				node("MatMul", []string{"qs", "kts"}, []string{"s0"}), node("Div", []string{"s0", "c2"}, []string{"s1"}), softmax("s1", "p"), pv("p")}},
			ops: "Mul Transpose Mul MatMul Div Softmax MatMul", attrs: "scale=0.125"},
		{name: "float mask Where(m, -inf, 0)·1 read as the bool mask (nn.MultiheadAttention)", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"ninf": sc(negInf), "zero": zeros, "one": sc(1)},
			nodes: append([]*ir.Node{node("Where", []string{"m", "ninf", "zero"}, []string{"fm"}), node("Mul", []string{"fm", "one"}, []string{"fm1"})},
				scores(node("Add", []string{"s0", "fm1"}, []string{"s1"}))...)},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)},
			ops:   "Where Mul Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "float -inf mask also a graph output: stays additive", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"ninf": sc(negInf), "zero": zeros},
			nodes: append([]*ir.Node{node("Where", []string{"m", "zero", "ninf"}, []string{"fm"})}, scores(node("Add", []string{"fm", "s0"}, []string{"s1"}))...), outputs: []string{"fm"}},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)},
			ops:   "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "constant 0/-inf mask (a folded causal mask) read as the causal cut", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": causalAdd(s, negInf)},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 causal=1"},
		{name: "constant 0/-inf mask, not causal, read as a bool mask", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": func() *ir.Tensor {
			m := causalAdd(s, negInf)
			m.Float32s()[s] = negInf // query 1 does not see key 0
			return m
		}()},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		// A sliding window (Mistral's, Gemma's local layers): finfo.min
		// off a band of 3 keys, every row keeping some: the causal cut,
		// and a bool mask for the keys before the window, so the kernel
		// skips the blocks either hides.
		{name: "constant finfo.min band mask (a sliding window) read as the causal cut and a bool mask", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": bandAdd(s, 3, -math.MaxFloat32)},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 causal=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "constant finfo.min band mask over a KV cache of 2: the cut at offset 2 and a bool mask", syn: synth{inputs: kvLonger, inits: map[string]*ir.Tensor{"cm": bandAddOffset(s, s+2, 2, 3, -math.MaxFloat32)},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 causal=1 causal_offset=2 mask_kind=bool_true_masks mask_fill=-Inf"},
		// A -inf band is read as a bool mask as the Add's operand
		// (maskOperand): the kernel skips what it hides, the diagonal's
		// blocks on the masked path.
		{name: "constant -inf band mask: a bool mask", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": bandAdd(s, 3, negInf)},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "constant finfo.min mask with a row that keeps no key: stays additive (the export's row is uniform)", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": func() *ir.Tensor {
			m := bandAdd(s, 3, -math.MaxFloat32)
			m.Float32s()[2*s+1], m.Float32s()[2*s+2] = -math.MaxFloat32, -math.MaxFloat32 // query 2 keeps key 0 only
			m.Float32s()[2*s] = -math.MaxFloat32
			return m
		}()},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "constant -1e9 band mask: a fill above finfo.min stays additive", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": bandAdd(s, 3, -1e9)},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "constant 0/-inf mask then a Where: the constant stays additive (the bias)", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"cm": causalAdd(s, negInf), "fill": sc(-1e9)},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}), node("Where", []string{"m", "fill", "s1"}, []string{"s2"}))},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)},
			ops:   "Transpose MatMul Add Where Softmax MatMul", attrs: "scale=1 bias_first=1 mask_kind=bool_true_masks mask_fill=-1e+09 bias_scale=1"},
		{name: "float -inf mask Where(m, -inf, 0), then a Where: the float mask stays additive", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s), vi("m2", ir.Bool, s, s)),
			inits: map[string]*ir.Tensor{"ninf": sc(negInf), "zero": zeros, "fill": sc(-1e9)},
			nodes: append([]*ir.Node{node("Where", []string{"m", "ninf", "zero"}, []string{"fm"})},
				scores(node("Add", []string{"s0", "fm"}, []string{"s1"}), node("Where", []string{"m2", "s1", "fill"}, []string{"s2"}))...)},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s), "m2": boolMask(s, s)},
			ops:   "Transpose MatMul Add Where Softmax MatMul", attrs: "scale=1 bias_first=1 mask_kind=bool_false_masks mask_fill=-1e+09 bias_scale=1"},
		{name: "constant finfo.min causal mask (LLaMA) read as the causal cut", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": causalAdd(s, -math.MaxFloat32)},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 causal=1"},
		{name: "constant finfo.min mask, causal and one key more, every row keeping a key: the cut and a bool mask", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": func() *ir.Tensor {
			m := causalAdd(s, -math.MaxFloat32)
			m.Float32s()[s] = -math.MaxFloat32 // query 1 does not see key 0
			return m
		}()},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 causal=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "constant finfo.min mask, no causal part, every row keeping a key: read as a bool mask", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"cm": func() *ir.Tensor {
			m := ir.NewTensor(ir.Float, []int{s, s})
			for i := 0; i < s; i++ {
				m.Float32s()[i*s+(i+1)%s] = -math.MaxFloat32 // each query hides the key after it (the last, key 0)
			}
			return m
		}()},
			nodes: scores(node("Add", []string{"s0", "cm"}, []string{"s1"}))},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "grouped K/V by Unsqueeze, Expand, Reshape (repeat_kv)",
			syn: synth{inputs: kv2, inits: map[string]*ir.Tensor{"ax": int64s(2), "ex": int64s(b, 2, 2, s, d), "rs": int64s(b, h, s, d)},
				nodes: []*ir.Node{
					node("Unsqueeze", []string{"k", "ax"}, []string{"ku"}), node("Expand", []string{"ku", "ex"}, []string{"ke"}), node("Reshape", []string{"ke", "rs"}, []string{"kr"}),
					node("Unsqueeze", []string{"v", "ax"}, []string{"vu"}), node("Expand", []string{"vu", "ex"}, []string{"ve"}), node("Reshape", []string{"ve", "rs"}, []string{"vr"}),
					node("Transpose", []string{"kr"}, []string{"kt"}, perm), qk, softmax("s0", "p"), node("MatMul", []string{"p", "vr"}, []string{"y"})}},
			ops: "Expand Reshape Expand Reshape Transpose MatMul Softmax MatMul", attrs: "scale=1 kv_group=2 k_view v_view"},
		{name: "multi-query K/V by Expand over the heads",
			syn: synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, 1, s, d), vi("v", ir.Float, b, 1, s, d)}, inits: map[string]*ir.Tensor{"ex": int64s(b, h, s, d)},
				nodes: []*ir.Node{node("Expand", []string{"k", "ex"}, []string{"ke"}), node("Expand", []string{"v", "ex"}, []string{"ve"}),
					node("Transpose", []string{"ke"}, []string{"kt"}, perm), qk, softmax("s0", "p"), node("MatMul", []string{"p", "ve"}, []string{"y"})}},
			ops: "Expand Expand Transpose MatMul Softmax MatMul", attrs: "scale=1"},
		{name: "K/V heads repeated by Tile (another order): read as is",
			syn: synth{inputs: kv2, inits: map[string]*ir.Tensor{"rep": int64s(1, 2, 1, 1)},
				nodes: []*ir.Node{node("Tile", []string{"k", "rep"}, []string{"kr"}), node("Tile", []string{"v", "rep"}, []string{"vr"}),
					node("Transpose", []string{"kr"}, []string{"kt"}, perm), qk, softmax("s0", "p"), node("MatMul", []string{"p", "vr"}, []string{"y"})}},
			ops: "Transpose MatMul Softmax MatMul", attrs: "scale=1"},
		{name: "einsum bhqd,bhkd->bhqk and bhqk,bhkd->bhqd", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(2)},
			nodes: []*ir.Node{node("Einsum", []string{"q", "k"}, []string{"s0"}, equation("bhqd,bhkd->bhqk")), node("Div", []string{"s0", "c"}, []string{"s1"}),
				softmax("s1", "p"), node("Einsum", []string{"p", "v"}, []string{"y"}, equation("bhqk,bhkd->bhqd"))}},
			ops: "Einsum Div Softmax Einsum", attrs: "scale=0.5"},
		{name: "einsum on the (B, S, H, D) layout, output permuted", syn: synth{inputs: qkv,
			nodes: []*ir.Node{node("Einsum", []string{"q", "k"}, []string{"s0"}, equation("bqhd,bkhd->bhqk")), softmax("s0", "p"),
				node("Einsum", []string{"p", "v"}, []string{"y"}, equation("bhqk , bkhd -> bqhd"))}},
			ops: "Einsum Softmax Einsum", attrs: "scale=1 q_view k_view v_view out_shape out_view"},
		{name: "einsum with an ellipsis", syn: synth{inputs: qkv,
			nodes: []*ir.Node{node("Einsum", []string{"q", "k"}, []string{"s0"}, equation("...id,...jd->...ij")), softmax("s0", "p"),
				node("Einsum", []string{"p", "v"}, []string{"y"}, equation("...ij,...jd->...id"))}},
			ops: "Einsum Softmax Einsum", attrs: "scale=1"},
		{name: "einsum with the scores transposed: the second operand's rows attend to the first's", syn: synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("k", ir.Float, b, h, s+2, d), vi("v", ir.Float, b, h, s, d)},
			nodes: []*ir.Node{node("Einsum", []string{"q", "k"}, []string{"s0"}, equation("bhqd,bhkd->bhkq")), softmax("s0", "p"),
				node("Einsum", []string{"p", "v"}, []string{"y"}, equation("bhkq,bhqd->bhkd"))}},
			ops: "Einsum Softmax Einsum", attrs: "scale=1"},
		{name: "einsum with V first (the weights second)", syn: synth{inputs: qkv,
			nodes: []*ir.Node{node("Einsum", []string{"q", "k"}, []string{"s0"}, equation("bhqd,bhkd->bhqk")), softmax("s0", "p"),
				node("Einsum", []string{"v", "p"}, []string{"y"}, equation("bhkd,bhqk->bhqd"))}},
			ops: "Einsum Softmax Einsum", attrs: "scale=1"},
		{name: "transformers' _expand_mask (finfo.min where e is not 0) read as a bool mask (BART)", syn: expandMask(-math.MaxFloat32),
			feeds: map[string]*ir.Tensor{"e": padE()},
			ops:   "Where Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=bool_true_masks mask_fill=-3.4028235e+38"},
		{name: "_expand_mask beside a position bias stays additive (F + F' is not F)", syn: expandMask(-math.MaxFloat32, node("Add", []string{"s1", "pb"}, []string{"s2"})),
			feeds: map[string]*ir.Tensor{"e": padE()},
			ops:   "Transpose MatMul Add Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1 bias_scale=1"},
		{name: "_expand_mask with a -1e4 fill stays additive", syn: expandMask(-1e4),
			feeds: map[string]*ir.Tensor{"e": padE()},
			ops:   "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "weights zeroed after the Softmax by the finfo.min mask (ESPnet)", syn: zeroed(-math.MaxFloat32, false),
			feeds: map[string]*ir.Tensor{"m": padRows()},
			ops:   "Transpose MatMul Div Where Softmax Where MatMul", attrs: "scale=0.5 masked_rows_zero=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "weights zeroed after the Softmax by the -inf keep mask (WeNet)", syn: zeroed(negInf, true),
			feeds: map[string]*ir.Tensor{"m": padRows()},
			ops:   "Transpose MatMul Div Where Softmax Where MatMul", attrs: "scale=0.5 masked_rows_zero=1 mask_kind=bool_false_masks mask_fill=-Inf"},
		{name: "weights zeroed, the softmax's output also read (attention maps)", syn: func() synth {
			z := zeroed(-math.MaxFloat32, false)
			z.outputs = []string{"p0"}
			return z
		}(), feeds: map[string]*ir.Tensor{"m": padRows()},
			ops:   "Transpose MatMul Div Where Softmax Where MatMul",
			attrs: "scale=0.5 masked_rows_zero=1 masked_rows_weights=uniform mask_kind=bool_true_masks mask_fill=-Inf scores_mode=weights"},
		{name: "weights zeroed by the -inf mask, the softmax's output also read", syn: func() synth {
			z := zeroed(negInf, false)
			z.outputs = []string{"p0"}
			return z
		}(), feeds: map[string]*ir.Tensor{"m": padRows()},
			ops:   "Transpose MatMul Div Where Softmax Where MatMul",
			attrs: "scale=0.5 masked_rows_zero=1 masked_rows_weights=nan mask_kind=bool_true_masks mask_fill=-Inf scores_mode=weights"},
		{name: "zeroed weights also read", syn: func() synth {
			z := zeroed(-math.MaxFloat32, false)
			z.outputs = []string{"p"}
			return z
		}(), feeds: map[string]*ir.Tensor{"m": padRows()},
			ops:   "Transpose MatMul Div Where Softmax Where MatMul",
			attrs: "scale=0.5 masked_rows_zero=1 mask_kind=bool_true_masks mask_fill=-Inf scores_mode=weights"},
		{name: "weights zeroed after a -1e4 mask: not fused", syn: zeroed(-1e4, false),
			feeds: map[string]*ir.Tensor{"m": padRows()}, none: true},
		{name: "weights zeroed by another mask: not fused", syn: func() synth {
			z := zeroed(negInf, false)
			z.inputs = append(z.inputs, vi("m2", ir.Bool, b, 1, 1, s))
			z.nodes = slices.Clone(z.nodes)
			z.nodes[6] = node("Cast", []string{"m2"}, []string{"mc2"}, castTo(ir.Bool))
			return z
		}(), feeds: map[string]*ir.Tensor{"m": padRows(), "m2": boolMask(b, 1, 1, s)}, none: true},
		{name: "Q, K, V as Gathers of a packed qkv (timm's qkv[0])", syn: qkvGather,
			ops: "Transpose MatMul Softmax MatMul", attrs: "scale=1 q_view k_view v_view"},
		{name: "K, V as Gathers of a one-element index (Falcon's multi-query)", syn: mqaGather,
			ops: "Transpose MatMul Softmax MatMul", attrs: "scale=1 q_view k_view v_view"},
		{name: "Q scaled before the head split (BART's q_proj(x)·scaling)", syn: scaledBeforeSplit,
			ops: "Transpose MatMul Softmax MatMul", attrs: "scale=0.5 q_view"},
		{name: "Q scaled before the head split, the scaled tensor also an output", syn: withOutputs(scaledBeforeSplit, "qs"),
			ops: "Transpose MatMul Softmax MatMul", attrs: "scale=1 q_view"},
		{name: "Q scaled before the head split, the split Q also an output", syn: withOutputs(scaledBeforeSplit, "q"),
			ops: "Transpose MatMul Softmax MatMul", attrs: "scale=0.5 q_view"},
		{name: "a scale per head (Swin V2's logit scale [H, 1, 1])", syn: headScaled(headScale, false),
			ops: "Transpose MatMul Mul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "a scale per head after a mask: not fused", syn: headScaled(headScale, true), none: true},
		{name: "a divisor per head (a learned temperature [H, 1, 1])", syn: headDivided(false),
			ops: "Transpose MatMul Div Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		{name: "a constant per head over the scores: not fused", syn: headDivided(true), none: true, why: "something other than one finite constant or one constant a head"},
		// SAM's decomposed relative positions: a term by the key's grid row
		// and one by its column, added to the scores viewed as a grid
		// (fuse_grid.go); not a term of the whole grid, nor one alone.
		{name: "a bias by a key grid's rows and columns (SAM)", syn: gridded(false, []string{"rows", "cols"}),
			ops: "Transpose MatMul Reshape Add Add Reshape Softmax MatMul", attrs: "scale=1 bias_scale=1 bias_grid=3"},
		{name: "a bias by a key grid, columns first, terms first", syn: gridded(true, []string{"cols", "rows"}),
			ops: "Transpose MatMul Reshape Add Add Reshape Softmax MatMul", attrs: "scale=1 bias_scale=1 bias_grid=3"},
		{name: "a bias by a key grid, then a scale and a key mask", syn: func() synth {
			syn := gridded(false, []string{"rows", "cols"}, node("Mul", []string{"sg", "c"}, []string{"s5"}), node("Where", []string{"m", "fill", "s5"}, []string{"s6"}))
			syn.inputs = append(syn.inputs, vi("m", ir.Bool, b, 1, 1, s))
			syn.inits["c"], syn.inits["fill"] = sc(0.5), sc(negInf)
			return syn
		}(), feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)},
			ops: "Transpose MatMul Reshape Add Add Reshape Mul Where Softmax MatMul", attrs: "scale=0.5 bias_first=1 mask_kind=bool_true_masks mask_fill=-Inf bias_scale=0.5 bias_grid=3"},
		{name: "a key grid's terms summed, viewed as the scores and added (SamVisionAttention)", syn: synth{
			inputs: with(vi("rows", ir.Float, b, h, 2, 3, 2, 1), vi("cols", ir.Float, b, h, 2, 3, 1, 3)),
			inits:  map[string]*ir.Tensor{"back": int64s(b, h, s, s)},
			nodes: scores(node("Add", []string{"rows", "cols"}, []string{"rc"}), node("Reshape", []string{"rc", "back"}, []string{"rcs"}),
				node("Add", []string{"s0", "rcs"}, []string{"sg"}))},
			ops: "Transpose MatMul Add Reshape Add Softmax MatMul", attrs: "scale=1 bias_scale=1 bias_grid=3"},
		{name: "the scores expanded to their own shape (MViTv2's slice assignment)", syn: synth{inputs: qkv,
			inits: map[string]*ir.Tensor{"shape": int64s(b, h, s, s)},
			nodes: scores(node("Expand", []string{"s0", "shape"}, []string{"s1"}))},
			ops: "Transpose MatMul Expand Softmax MatMul", attrs: "scale=1"},
		{name: "the scores expanded over the batch: not fused", syn: synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, 1, h, s, d), vi("k", ir.Float, 1, h, s, d), vi("v", ir.Float, b, h, s, d)},
			inits: map[string]*ir.Tensor{"shape": int64s(b, h, s, s)},
			nodes: scores(node("Expand", []string{"s0", "shape"}, []string{"s1"}))},
			none: true, why: "changes the scores' shape or order"},
		{name: "a term by a key's grid row alone: not fused", syn: gridded(false, []string{"rows"}), none: true,
			why: "are not one by the key's grid row and one by its column"},
		{name: "a term of the whole key grid: not fused", syn: gridded(false, []string{"rows", "dense", "cols"}), none: true,
			why: "are not one by the key's grid row and one by its column"},
		// BERT's head_mask: the weights times a factor a head after the
		// softmax, which V takes (not when the scaled weights are read too).
		{name: "the weights times a factor a head (BERT's head_mask)", syn: headMasked,
			ops: "Transpose MatMul Softmax Mul MatMul", attrs: "scale=1"},
		{name: "the weights times a factor a key (a padding mask after the softmax)", syn: synth{inputs: with(vi("kf", ir.Float, b, 1, 1, s)),
			nodes: []*ir.Node{kt, qk, softmax("s0", "p0"), node("Mul", []string{"p0", "kf"}, []string{"p"}), pv("p")}},
			ops: "Transpose MatMul Softmax Mul MatMul", attrs: "scale=1"},
		{name: "the weights times a factor a query: not fused", syn: synth{inputs: with(vi("qf", ir.Float, b, 1, s, 1)),
			nodes: []*ir.Node{kt, qk, softmax("s0", "p0"), node("Mul", []string{"qf", "p0"}, []string{"p"}), pv("p")}}, none: true,
			why: `node "/p" (Mul) between the softmax and the product with V`},
		{name: "the weights times a constant", syn: synth{inputs: qkv, inits: map[string]*ir.Tensor{"half": sc(0.5)},
			nodes: []*ir.Node{kt, qk, softmax("s0", "p0"), node("Mul", []string{"half", "p0"}, []string{"p"}), pv("p")}},
			ops: "Transpose MatMul Softmax Mul MatMul", attrs: "scale=1"},
		{name: "the weights times a factor a head, the scaled weights also an output: not fused", syn: withOutputs(headMasked, "p"), none: true,
			why: `node "/p" (Mul) between the softmax and the product with V`},
		// gpt-oss's sinks: a logit column joined to the scores, the row
		// maximum taken off, the column sliced off the weights.
		{name: "sinks joined by Concat and sliced off (gpt-oss)", syn: sinked(true, 0, -1),
			ops: "Transpose MatMul Mul Add Concat ReduceMax Sub Softmax Slice MatMul", attrs: "scale=0.5 mask_kind=additive mask_scale=1"},
		{name: "sinks, the weights without the sink's column also an output", syn: withOutputs(sinked(true, 0, -1), "p"),
			ops: "Transpose MatMul Mul Add Concat ReduceMax Sub Softmax Slice MatMul", attrs: "scale=0.5 mask_kind=additive mask_scale=1 scores_mode=weights"},
		{name: "sinks, the weights with the sink's column also an output: not fused", syn: withOutputs(sinked(true, 0, -1), "pw"), none: true,
			why: "the weights with the sink's column, is read outside the chain"},
		{name: "sinks varying by query: not fused", syn: sinked(false, 0, -1), none: true, why: "are not one a batch matrix"},
		{name: "the weights' first column sliced off: not fused", syn: sinked(true, 1, 7), none: true, why: `node "/p" (Slice) between the softmax and the product with V`},
		{name: "sinks joined, then a mask subtracted: not fused", syn: func() synth {
			syn := sinked(true, 0, -1, node("Sub", []string{"cat", "m2"}, []string{"cat2"}))
			syn.inputs = append(syn.inputs, vi("m2", ir.Float, 1, 1, s, s+1))
			return syn
		}(), none: true, why: "the scores are scaled or masked after the sink logit is joined to them"},
		{name: "sinks joined, then the scores scaled: not fused", syn: sinked(true, 0, -1, node("Mul", []string{"cat", "c"}, []string{"cat2"})), none: true,
			why: `node "/cat2" (Mul) before the softmax of weights whose last column is dropped: not a join of the scores and one sink column`},
		{name: "a scale per key ([1, 1, S]): not fused", syn: headScaled(ir.NewTensor(ir.Float, []int{1, 1, s}), false), none: true},
		{name: "unbatched (2-D) with a 1-D additive mask", syn: synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, s, d), vi("k", ir.Float, s+1, d), vi("v", ir.Float, s+1, d), vi("m", ir.Float, s+1)},
			nodes: []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}), qk, node("Add", []string{"s0", "m"}, []string{"s1"}), softmax("s1", "p"), pv("p")}},
			ops: "Transpose MatMul Add Softmax MatMul", attrs: "scale=1 mask_kind=additive mask_scale=1"},
		// DALLE-pytorch: masked_fill of the padding, then of the causal
		// mask, one finite fill: the cut, the padding a -inf mask, and rows
		// that lose every key (batch 0's, all padded) the mean of V.
		{name: "a key mask's Where, then a causal constant's, of one fill", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": causalBool(s, s, 0, true), "fill": sc(-math.MaxFloat32)},
			nodes: scores(node("Where", []string{"m", "fill", "s0"}, []string{"s1"}), node("Where", []string{"c", "fill", "s1"}, []string{"s2"}))},
			feeds: map[string]*ir.Tensor{"m": padRows()},
			ops:   "Transpose MatMul Where Where Softmax MatMul", attrs: "scale=1 causal=1 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "a causal constant's Where, then a key mask's, of -inf", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": causalBool(s, s, 0, true), "fill": sc(negInf)},
			nodes: scores(node("Where", []string{"c", "fill", "s0"}, []string{"s1"}), node("Where", []string{"m", "fill", "s1"}, []string{"s2"}))},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)},
			ops:   "Transpose MatMul Where Where Softmax MatMul", attrs: "scale=1 causal=1 mask_kind=bool_true_masks mask_fill=-Inf"},
		{name: "two Wheres of different fills: not fused", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": causalBool(s, s, 0, true), "fill": sc(-1e9), "ninf": sc(negInf)},
			nodes: scores(node("Where", []string{"m", "fill", "s0"}, []string{"s1"}), node("Where", []string{"c", "ninf", "s1"}, []string{"s2"}))},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)}, none: true, why: "two bool masks (Where)"},
		// MPT: ALiBi added, then the padding's and the future's
		// masked_fill of finfo.min: the bias first, the cut, the padding
		// a -inf mask.
		{name: "a bias, then a key mask's and a causal constant's Where of one fill", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"alibi": randT(r, 1, h, 1, s), "c": causalBool(s, s, 0, true), "fill": sc(-math.MaxFloat32)},
			nodes: scores(node("Add", []string{"s0", "alibi"}, []string{"s1"}), node("Where", []string{"m", "fill", "s1"}, []string{"s2"}), node("Where", []string{"c", "fill", "s2"}, []string{"s3"}))},
			feeds: map[string]*ir.Tensor{"m": padRows()},
			ops:   "Transpose MatMul Add Where Where Softmax MatMul", attrs: "scale=1 bias_first=1 causal=1 masked_rows_uniform=1 mask_kind=bool_true_masks mask_fill=-Inf bias_scale=1"},
		{name: "a bias, then two Wheres of different fills: not fused", syn: synth{inputs: with(vi("m", ir.Bool, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"alibi": randT(r, 1, h, 1, s), "c": causalBool(s, s, 0, true), "fill": sc(-math.MaxFloat32), "ninf": sc(negInf)},
			nodes: scores(node("Add", []string{"s0", "alibi"}, []string{"s1"}), node("Where", []string{"m", "fill", "s1"}, []string{"s2"}), node("Where", []string{"c", "ninf", "s2"}, []string{"s3"}))},
			feeds: map[string]*ir.Tensor{"m": boolMask(b, 1, 1, s)}, none: true, why: "three masks or biases"},
		// Gemma 2's soft cap: / c, tanh, · c, after the scale and before
		// the causal mask; the random scores (σ ≈ 2) reach tanh's curve at
		// c = 1.5.
		{name: "a soft cap c·tanh(s / c), then a causal constant's Where (Gemma 2)", syn: synth{inputs: qkv,
			inits: map[string]*ir.Tensor{"sc": sc(0.5), "cap": sc(1.5), "c": causalBool(s, s, 0, true), "ninf": sc(negInf)},
			nodes: scores(node("Mul", []string{"s0", "sc"}, []string{"s1"}), node("Div", []string{"s1", "cap"}, []string{"s2"}), node("Tanh", []string{"s2"}, []string{"s3"}),
				node("Mul", []string{"s3", "cap"}, []string{"s4"}), node("Where", []string{"c", "ninf", "s4"}, []string{"s5"}))},
			ops: "Transpose MatMul Mul Div Tanh Mul Where Softmax MatMul", attrs: "scale=0.5 softcap=1.5 causal=1"},
		{name: "a soft cap by Mul(s, 1/c), c first in its Mul", syn: synth{inputs: qkv,
			inits: map[string]*ir.Tensor{"inv": sc(1 / 1.5), "cap": sc(1.5)},
			nodes: scores(node("Mul", []string{"s0", "inv"}, []string{"s1"}), node("Tanh", []string{"s1"}, []string{"s2"}), node("Mul", []string{"cap", "s2"}, []string{"s3"}))},
			ops: "Transpose MatMul Mul Tanh Mul Softmax MatMul", attrs: "scale=1 softcap=1.5"},
		{name: "a mask before the soft cap: not fused", syn: synth{inputs: with(vi("m", ir.Float, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"cap": sc(1.5)},
			nodes: scores(node("Add", []string{"s0", "m"}, []string{"s1"}), node("Div", []string{"s1", "cap"}, []string{"s2"}), node("Tanh", []string{"s2"}, []string{"s3"}),
				node("Mul", []string{"s3", "cap"}, []string{"s4"}))},
			none: true, why: "masks the scores before their soft cap"},
		{name: "a scale after the soft cap: not fused", syn: synth{inputs: qkv,
			inits: map[string]*ir.Tensor{"cap": sc(1.5), "two": sc(2)},
			nodes: scores(node("Div", []string{"s0", "cap"}, []string{"s1"}), node("Tanh", []string{"s1"}, []string{"s2"}),
				node("Mul", []string{"s2", "cap"}, []string{"s3"}), node("Mul", []string{"s3", "two"}, []string{"s4"}))},
			none: true, why: "scaled after their soft cap"},
		{name: "tanh between two different constants: not fused", syn: synth{inputs: qkv,
			inits: map[string]*ir.Tensor{"cap": sc(1.5), "other": sc(2)},
			nodes: scores(node("Div", []string{"s0", "cap"}, []string{"s1"}), node("Tanh", []string{"s1"}, []string{"s2"}), node("Mul", []string{"s2", "other"}, []string{"s3"}))},
			none: true, why: `"/s2" (Tanh) in the scores`},
		// OPT: the mask added, then torch.max(scores, finfo.min): the
		// fused node floors the scores after the mask (scores_min), and
		// keeps the mask as values (no cut): batch 0's rows see no key.
		{name: "a floor after an additive mask (OPT's torch.max(s, finfo.min))", syn: synth{inputs: with(vi("m", ir.Float, b, 1, s, s)),
			inits: map[string]*ir.Tensor{"lo": sc(-math.MaxFloat32)},
			nodes: scores(node("Add", []string{"s0", "m"}, []string{"s1"}), node("Max", []string{"s1", "lo"}, []string{"s2"}))},
			feeds: map[string]*ir.Tensor{"m": func() *ir.Tensor {
				m := ir.NewTensor(ir.Float, []int{b, 1, s, s})
				for i := range m.Float32s() {
					if i < s*s || i%3 == 0 { // batch 0 all hidden, some twice (-inf)
						m.Float32s()[i] = -math.MaxFloat32 * float32(1+i%2)
					}
				}
				return m
			}()},
			ops: "Transpose MatMul Add Max Softmax MatMul", attrs: "scale=1 scores_min=-3.4028235e+38 mask_kind=additive mask_scale=1"},
		{name: "a floor before a mask: not fused", syn: synth{inputs: with(vi("m", ir.Float, b, 1, 1, s)),
			inits: map[string]*ir.Tensor{"lo": sc(-1)},
			nodes: scores(node("Max", []string{"s0", "lo"}, []string{"s1"}), node("Add", []string{"s1", "m"}, []string{"s2"}))},
			none: true, why: "floors the scores before a mask"},
		{name: "a maximum with a tensor: not fused", syn: synth{inputs: with(vi("lo", ir.Float, b, h, s, s)),
			nodes: scores(node("Max", []string{"s0", "lo"}, []string{"s1"}))},
			none: true, why: "something other than one constant"},
		// The "stable softmax": the row maximum taken off before the
		// Softmax, which does not see it.
		{name: "the row maximum taken off (DALLE-pytorch's stable softmax)", syn: synth{inputs: qkv,
			nodes: scores(node("ReduceMax", []string{"s0"}, []string{"mx"}, intsAttr("axes", []int64{-1})), node("Sub", []string{"s0", "mx"}, []string{"s1"}))},
			ops: "Transpose MatMul ReduceMax Sub Softmax MatMul", attrs: "scale=1"},
		{name: "the row maximum without keepdims, its axis put back (LayoutLMv3's PB-relax)", syn: synth{inputs: qkv,
			inits: map[string]*ir.Tensor{"c": sc(1.0 / 32), "c2": sc(32), "ax": int64s(-1)},
			nodes: scores(node("Mul", []string{"s0", "c"}, []string{"s1"}),
				node("ReduceMax", []string{"s1"}, []string{"mx"}, intsAttr("axes", []int64{-1}), &ir.Attribute{Name: "keepdims", Type: ir.AttrInt, Int: 0}),
				node("Unsqueeze", []string{"mx", "ax"}, []string{"mxu"}), node("Sub", []string{"s1", "mxu"}, []string{"s2"}), node("Mul", []string{"s2", "c2"}, []string{"s3"}))},
			ops: "Transpose MatMul Mul ReduceMax Unsqueeze Sub Mul Softmax MatMul", attrs: "scale=1"},
		{name: "the row maximum without keepdims put back on another axis: not fused", syn: synth{inputs: qkv,
			inits: map[string]*ir.Tensor{"ax": int64s(2)},
			nodes: scores(node("ReduceMax", []string{"s0"}, []string{"mx"}, intsAttr("axes", []int64{-1}), &ir.Attribute{Name: "keepdims", Type: ir.AttrInt, Int: 0}),
				node("Unsqueeze", []string{"mx", "ax"}, []string{"mxu"}), node("Sub", []string{"s0", "mxu"}, []string{"s1"}))},
			none: true, why: `"s0" is read by 2 nodes`},
		{name: "the maximum over the queries taken off: not fused", syn: synth{inputs: qkv,
			nodes: scores(node("ReduceMax", []string{"s0"}, []string{"mx"}, intsAttr("axes", []int64{2})), node("Sub", []string{"s0", "mx"}, []string{"s1"}))},
			none: true, why: `"s0" is read by 2 nodes`},
		{name: "the row maximum taken off, and also an output: not fused", syn: synth{inputs: qkv,
			nodes:   scores(node("ReduceMax", []string{"s0"}, []string{"mx"}, intsAttr("axes", []int64{-1})), node("Sub", []string{"s0", "mx"}, []string{"s1"})),
			outputs: []string{"mx"}},
			none: true, why: `"s0" is read by 2 nodes`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fuseSynth(t, r, c.syn, c.feeds, c.ops, c.attrs, c.none)
			if c.why != "" {
				wantMissReason(t, r, c.syn, c.feeds, c.why)
			}
		})
	}
}

// synthInputs returns the inputs of a synthesized model: feeds where they
// have one, random floats elsewhere.
func synthInputs(r *rand.Rand, m *ir.Model, feeds map[string]*ir.Tensor) map[string]*ir.Tensor {
	in := map[string]*ir.Tensor{}
	for _, v := range m.Graph.Inputs {
		if f, ok := feeds[v.Name]; ok {
			in[v.Name] = f
			continue
		}
		dims, _ := v.Type.Shape.Concrete()
		in[v.Name] = randT(r, dims...)
	}
	return in
}

// causalAdd is an additive causal mask [s, s]: 0 on and below the
// diagonal, fill above it.
func causalAdd(s int, fill float32) *ir.Tensor {
	m := ir.NewTensor(ir.Float, []int{s, s})
	for i := 0; i < s; i++ {
		for j := i + 1; j < s; j++ {
			m.Float32s()[i*s+j] = fill
		}
	}
	return m
}

// bandAdd is an additive sliding-window mask [s, s]: 0 for the keys
// i-w < j ≤ i, fill elsewhere.
func bandAdd(s, w int, fill float32) *ir.Tensor { return bandAddOffset(s, s, 0, w, fill) }

// bandAddOffset is an additive sliding-window mask [sq, sk] after a KV
// cache of off keys: 0 for the keys i+off-w < j ≤ i+off, fill elsewhere.
func bandAddOffset(sq, sk, off, w int, fill float32) *ir.Tensor {
	m := ir.NewTensor(ir.Float, []int{sq, sk})
	for i := 0; i < sq; i++ {
		for j := 0; j < sk; j++ {
			if j > i+off || j <= i+off-w {
				m.Float32s()[i*sk+j] = fill
			}
		}
	}
	return m
}

// TestFuseMasksAfterTheScale checks the fused node's mask and bias when
// scales come before, between and after two masks: each is multiplied by
// the scales after it, the product of all is the scale.
func TestFuseMasksAfterTheScale(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	const b, h, s, d = 1, 2, 5, 4
	m := synth{
		inputs: []*ir.ValueInfo{vi("q", ir.Float, b, h, s, d), vi("kt", ir.Float, b, h, d, s), vi("v", ir.Float, b, h, s, d), vi("m", ir.Bool, s, s), vi("a", ir.Float, b, 1, 1, s)},
		inits:  map[string]*ir.Tensor{"c1": sc(2), "c2": sc(3), "c3": sc(5), "fill": sc(-7)},
		nodes: []*ir.Node{
			node("MatMul", []string{"q", "kt"}, []string{"s0"}), node("Mul", []string{"s0", "c1"}, []string{"s1"}),
			node("Where", []string{"m", "fill", "s1"}, []string{"s2"}), node("Mul", []string{"c2", "s2"}, []string{"s3"}),
			node("Add", []string{"s3", "a"}, []string{"s4"}), node("Div", []string{"s4", "c3"}, []string{"s5"}),
			node("Softmax", []string{"s5"}, []string{"p"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}),
			node("MatMul", []string{"p", "v"}, []string{"y"})},
		outputs: []string{"y"},
	}.model()
	mask := ir.NewTensor(ir.Bool, []int{s, s})
	for i := range mask.Bools() {
		mask.Bools()[i] = r.Intn(2) == 0
	}
	in := map[string]*ir.Tensor{"q": randT(r, b, h, s, d), "kt": randT(r, b, h, d, s), "v": randT(r, b, h, s, d), "m": mask, "a": randT(r, b, 1, 1, s)}
	fused, unfused, fs := runAll(t, m, in)
	sameOutputs(t, fused["y"], unfused["y"])
	if len(fs) != 1 {
		t.Fatalf("%d fusions, want 1", len(fs))
	}
	// scale 2·3/5; the fill -7 is scaled by 3/5, the bias by 1/5.
	want := fmt.Sprintf("scale=%g k_transposed=1 mask_kind=bool_true_masks mask_fill=%g bias_scale=%g", float32(1.2), float32(-7*0.6), float32(0.2))
	if g := fusedAttrs(fs[0].Node); g != want {
		t.Errorf("attributes %s, want %s", g, want)
	}
}

// BenchmarkFuseExportForms times, in process, attention forms that stayed
// unfused before issue 13, fused and unfused (-bench FuseExportForms): one
// batch of 12 heads of 64 at S=512 (ATTNRUN_BENCH_SEQ), on
// ATTNRUN_BENCH_THREADS threads (default 2): the weights also a graph output
// (need_weights), K/V repeated over 4 KV heads (repeat_kv), GPT-2's Where
// then padding Add, a constant 0/-inf causal mask added (Whisper), the
// same with finfo.min (LLaMA), and nn.TransformerDecoderLayer's
// Where(key padding mask, -inf, causal)·1 added.
func BenchmarkFuseExportForms(b *testing.B) {
	const h, hkv, d = 12, 4, 64
	s := 512
	if n, err := strconv.Atoi(os.Getenv("ATTNRUN_BENCH_SEQ")); err == nil && n > 0 {
		s = n
	}
	r := rand.New(rand.NewSource(1))
	perm := &ir.Attribute{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 1, 3, 2}}
	axis := &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: -1}
	qkv := []*ir.ValueInfo{vi("q", ir.Float, 1, h, s, d), vi("k", ir.Float, 1, h, s, d), vi("v", ir.Float, 1, h, s, d)}
	head := []*ir.Node{node("Transpose", []string{"k"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"})}
	tail := func(x string) []*ir.Node {
		return []*ir.Node{node("Softmax", []string{x}, []string{"p"}, axis), node("MatMul", []string{"p", "v"}, []string{"y"})}
	}
	causal := ir.NewTensor(ir.Bool, []int{1, 1, s, s})
	for i := 0; i < s; i++ {
		for j := 0; j <= i; j++ {
			causal.Bools()[i*s+j] = true // true keeps (GPT-2's buffer)
		}
	}
	cases := []struct {
		name string
		syn  synth
	}{
		{"need_weights", synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(0.125)},
			nodes: append(append(head, node("Mul", []string{"s0", "c"}, []string{"s1"})), tail("s1")...), outputs: []string{"p"}}},
		{"repeat_kv", synth{inputs: []*ir.ValueInfo{vi("q", ir.Float, 1, h, s, d), vi("k", ir.Float, 1, hkv, s, d), vi("v", ir.Float, 1, hkv, s, d)},
			inits: map[string]*ir.Tensor{"c": sc(0.125), "ax": int64s(2), "ex": int64s(1, hkv, h/hkv, int64(s), d), "rs": int64s(1, h, int64(s), d)},
			nodes: []*ir.Node{
				node("Unsqueeze", []string{"k", "ax"}, []string{"ku"}), node("Expand", []string{"ku", "ex"}, []string{"ke"}), node("Reshape", []string{"ke", "rs"}, []string{"kr"}),
				node("Unsqueeze", []string{"v", "ax"}, []string{"vu"}), node("Expand", []string{"vu", "ex"}, []string{"ve"}), node("Reshape", []string{"ve", "rs"}, []string{"vr"}),
				node("Transpose", []string{"kr"}, []string{"kt"}, perm), node("MatMul", []string{"q", "kt"}, []string{"s0"}), node("Mul", []string{"s0", "c"}, []string{"s1"}),
				node("Softmax", []string{"s1"}, []string{"p"}, axis), node("MatMul", []string{"p", "vr"}, []string{"y"})}}},
		{"where_then_add", synth{inputs: append(append([]*ir.ValueInfo{}, qkv...), vi("pad", ir.Float, 1, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": sc(8), "m": causal, "fill": sc(-1e4)},
			nodes: append(append(head, node("Div", []string{"s0", "c"}, []string{"s1"}), node("Where", []string{"m", "s1", "fill"}, []string{"s2"}),
				node("Add", []string{"s2", "pad"}, []string{"s3"})), tail("s3")...)}},
		{"const_causal_add", synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(0.125), "cm": causalAdd(s, float32(math.Inf(-1)))},
			nodes: append(append(head, node("Mul", []string{"s0", "c"}, []string{"s1"}), node("Add", []string{"s1", "cm"}, []string{"s2"})), tail("s2")...)}},
		{"finfo_min_causal_add", synth{inputs: qkv, inits: map[string]*ir.Tensor{"c": sc(0.125), "cm": causalAdd(s, -math.MaxFloat32)},
			nodes: append(append(head, node("Mul", []string{"s0", "c"}, []string{"s1"}), node("Add", []string{"s1", "cm"}, []string{"s2"})), tail("s2")...)}},
		{"where_key_mask_causal_add", synth{inputs: append(append([]*ir.ValueInfo{}, qkv...), vi("kpm", ir.Bool, 1, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": sc(0.125), "cm": causalAdd(s, float32(math.Inf(-1))), "ninf": sc(float32(math.Inf(-1))), "one": sc(1)},
			nodes: append(append(head, node("Mul", []string{"s0", "c"}, []string{"s1"}), node("Where", []string{"kpm", "ninf", "cm"}, []string{"w"}),
				node("Mul", []string{"w", "one"}, []string{"am"}), node("Add", []string{"s1", "am"}, []string{"s2"})), tail("s2")...)}},
		// transformers' LLaMA with an attention_mask: masked_fill of the
		// padding with finfo.min on the finfo.min causal mask.
		{"where_key_mask_finfo_min_causal_add", synth{inputs: append(append([]*ir.ValueInfo{}, qkv...), vi("kpm", ir.Bool, 1, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": sc(0.125), "cm": causalAdd(s, -math.MaxFloat32), "fmin": sc(-math.MaxFloat32)},
			nodes: append(append(head, node("Mul", []string{"s0", "c"}, []string{"s1"}), node("Where", []string{"kpm", "fmin", "cm"}, []string{"am"}),
				node("Add", []string{"s1", "am"}, []string{"s2"})), tail("s2")...)}},
		// transformers 4.30-4.35's LLaMA: the padding as 0/finfo.min added
		// to the finfo.min causal mask (random here: no row is padded).
		{"key_mask_plus_finfo_min_causal_add", synth{inputs: append(append([]*ir.ValueInfo{}, qkv...), vi("km", ir.Float, 1, 1, 1, s)),
			inits: map[string]*ir.Tensor{"c": sc(0.125), "cm": causalAdd(s, -math.MaxFloat32)},
			nodes: append(append(head, node("Mul", []string{"s0", "c"}, []string{"s1"}), node("Add", []string{"cm", "km"}, []string{"am"}),
				node("Add", []string{"s1", "am"}, []string{"s2"})), tail("s2")...)}},
	}
	for _, c := range cases {
		c.syn.outputs = append([]string{"y"}, c.syn.outputs...)
		m := c.syn.model()
		in := map[string]*ir.Tensor{}
		for _, v := range m.Graph.Inputs {
			dims, _ := v.Type.Shape.Concrete()
			in[v.Name] = randT(r, dims...)
			if v.Type.DType == ir.Bool {
				in[v.Name] = randBoolsKeyZeroKept(r, dims...)
			}
		}
		for _, noFuse := range []bool{false, true} {
			name := c.name + "/fused"
			if noFuse {
				name = c.name + "/unfused"
			}
			b.Run(name, func(b *testing.B) {
				p, err := Compile(m, Options{Threads: benchThreads(), NoFuse: noFuse})
				if err != nil {
					b.Fatal(err)
				}
				if fs, err := p.Fusions(in); err != nil || (len(attentionFusions(fs)) == 0) != noFuse {
					b.Fatalf("fusions %v (%v), NoFuse %v", fs, err, noFuse)
				}
				timeRuns(b, p, in)
			})
		}
	}
}

// TestBiasPlusKeyMask: the export adds T5's padding mask to its position
// bias ([1, H, S, S], gathered from a learned table by buckets of j − i)
// before the scores take both; a T5 stack computes that sum once and every
// layer reads it. Each fused node takes the two apart (biasPlusKeyMask),
// so the [B, H, S, S] Add does not run, and takes the bias by its
// diagonals (diagonalBiases), so no Gather runs either: at S=600 from the
// bias folded at plan time, at S=1100 (the bias past 4Mi elements, a
// Gather on every call) from the buckets. No step writes an [S, S] matrix,
// and the output is the unfused plan's, some keys padded.
func TestBiasPlusKeyMask(t *testing.T) {
	for _, c := range []struct {
		model  string
		layers int
	}{{"t5_attention", 1}, {"t5_encoder", 2}} {
		m, p := compileModel(t, c.model)
		for _, s := range []int{600, 1100} {
			t.Run(fmt.Sprintf("%s/S=%d", c.model, s), func(t *testing.T) {
				mask := ir.NewTensor(ir.Int64, []int{1, s})
				for j := range mask.Int64s() {
					if j%5 != 3 {
						mask.Int64s()[j] = 1
					}
				}
				in := map[string]*ir.Tensor{"x": randT(rand.New(rand.NewSource(6)), 1, s, 32), "mask": mask}
				fs, err := p.Fusions(in)
				if err != nil {
					t.Fatal(err)
				}
				att := attentionFusions(fs)
				if len(att) != c.layers {
					t.Fatalf("%d attention fusions, want %d", len(att), c.layers)
				}
				types, err := p.Plan(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range att {
					n := f.Node
					bs, _ := n.AttrFloat("bias_scale", 0)
					diag, _ := n.AttrInt("bias_diagonals", 0)
					if bs != 1 || n.Input(5) == "" || diag != 1 {
						t.Errorf("fused node %s: want the bias by its diagonals", f.Describe())
					}
					if kind, _ := n.AttrString("mask_kind", ""); kind != ops.MaskAdditive || n.Input(3) == "" {
						t.Errorf("fused node %s: want the padding as an additive mask", f.Describe())
					}
					if d := types[n.Input(5)]; d.Const == nil || !ops.SameShape(d.Const.Shape, []int{1, 4, 2*s - 1}) {
						t.Errorf("diagonals %s: %+v, want a constant [1 4 %d]", n.Input(5), d.Type, 2*s-1)
					}
				}
				steps, err := p.Steps(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range steps {
					if n.OpType == "Gather" {
						t.Errorf("step %s (Gather) still runs", n.Label())
					}
					for _, o := range n.Outputs {
						if dims, ok := types[o].Type.Shape.Concrete(); ok && len(dims) >= 2 && dims[len(dims)-1] == s && dims[len(dims)-2] == s {
							t.Errorf("step %s (%s) writes %s %v", n.Label(), n.OpType, o, dims)
						}
					}
				}
				fused, unfused, _ := runBoth(t, m, in)
				sameOutputs(t, fused, unfused)
			})
		}
	}
}
