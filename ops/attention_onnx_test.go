package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func onnxAttnNode(inputs, outputs []string, attrs ...*ir.Attribute) *ir.Node {
	return &ir.Node{Name: "att", OpType: "Attention", Inputs: inputs, Outputs: outputs, Attrs: attrs}
}

// headsTo4D turns [B, S, H·D] into [B, H, S, D].
func headsTo4D(t *ir.Tensor, h int) *ir.Tensor {
	b, s, hd := t.Shape[0], t.Shape[1], t.Shape[2]
	d := hd / h
	out := ir.NewTensor(ir.Float, []int{b, h, s, d})
	for bi := 0; bi < b; bi++ {
		for si := 0; si < s; si++ {
			for hi := 0; hi < h; hi++ {
				copy(out.Float32s()[((bi*h+hi)*s+si)*d:][:d], t.Float32s()[(bi*s+si)*hd+hi*d:][:d])
			}
		}
	}
	return out
}

// concatSeq concatenates two [B, H, S, D] tensors along S.
func concatSeq(a, b *ir.Tensor) *ir.Tensor {
	bs, h, sa, d := a.Shape[0], a.Shape[1], a.Shape[2], a.Shape[3]
	sb := b.Shape[2]
	out := ir.NewTensor(ir.Float, []int{bs, h, sa + sb, d})
	for i := 0; i < bs*h; i++ {
		copy(out.Float32s()[i*(sa+sb)*d:], a.Float32s()[i*sa*d:(i+1)*sa*d])
		copy(out.Float32s()[(i*(sa+sb)+sa)*d:], b.Float32s()[i*sb*d:(i+1)*sb*d])
	}
	return out
}

// toF16 rounds a float32 tensor to float16.
func toF16(t *ir.Tensor) *ir.Tensor {
	out := ir.NewTensor(ir.Float16, t.Shape)
	for i, v := range t.Float32s() {
		out.Data.([]uint16)[i] = ir.Float32ToFloat16(v)
	}
	return out
}

// fromF16 widens a float16 tensor to float32.
func fromF16(t *ir.Tensor) *ir.Tensor {
	out := ir.NewTensor(ir.Float, t.Shape)
	for i, v := range t.Data.([]uint16) {
		out.Float32s()[i] = ir.Float16ToFloat32(v)
	}
	return out
}

// TestAttentionVsReference runs Attention nodes and checks every output
// against refAttentionExt on the equivalent 4-D problem (K and V with the
// cache concatenated, the mask padded as the reference pads it).
func TestAttentionVsReference(t *testing.T) {
	type tc struct {
		name          string
		threeD        bool
		b, hq, hk     int
		sq, skv, past int
		d, dv         int
		attrs         []*ir.Attribute
		mask          []int // attn_mask shape (nil: none)
		boolMask      bool
		nonpad        []int64
		qkMode        int64 // with qk output
		qk            bool
		present       bool
		f16           bool
	}
	cases := []tc{
		{name: "4-D", b: 2, hq: 3, hk: 3, sq: 4, skv: 6, d: 8, dv: 8},
		{name: "3-D gqa", threeD: true, b: 2, hq: 6, hk: 2, sq: 5, skv: 7, d: 4, dv: 6},
		{name: "3-D mqa causal", threeD: true, b: 1, hq: 4, hk: 1, sq: 6, skv: 6, d: 8, dv: 8, attrs: []*ir.Attribute{iAttr("is_causal", 1)}},
		{name: "4-D causal with cache and present", b: 2, hq: 4, hk: 2, sq: 3, skv: 3, past: 5, d: 8, dv: 4, present: true,
			attrs: []*ir.Attribute{iAttr("is_causal", 1)}},
		{name: "3-D cache, float mask, qk mode 2", threeD: true, b: 2, hq: 3, hk: 3, sq: 4, skv: 2, past: 6, d: 8, dv: 8, present: true,
			mask: []int{4, 8}, qk: true, qkMode: 2},
		{name: "3-D present without past", threeD: true, b: 1, hq: 2, hk: 2, sq: 3, skv: 3, d: 4, dv: 4, present: true},
		{name: "bool mask + causal", b: 1, hq: 2, hk: 2, sq: 5, skv: 5, d: 8, dv: 8, mask: []int{1, 2, 5, 5}, boolMask: true,
			attrs: []*ir.Attribute{iAttr("is_causal", 1)}},
		{name: "short float mask padded", b: 2, hq: 2, hk: 2, sq: 3, skv: 6, d: 8, dv: 8, mask: []int{2, 1, 3, 4}},
		{name: "mask of one key padded", b: 1, hq: 1, hk: 1, sq: 2, skv: 3, d: 4, dv: 4, mask: []int{1}, boolMask: true},
		{name: "nonpad + padded mask (opset 24)", b: 2, hq: 3, hk: 3, sq: 4, skv: 6, d: 8, dv: 10, mask: []int{2, 3, 4, 4}, nonpad: []int64{5, 3}},
		{name: "softcap qk mode 0", b: 1, hq: 2, hk: 2, sq: 3, skv: 5, d: 8, dv: 8, attrs: []*ir.Attribute{fAttr("softcap", 1.5)}, qk: true, qkMode: 0},
		{name: "softcap qk mode 1, scale", b: 1, hq: 2, hk: 2, sq: 3, skv: 5, d: 8, dv: 8, attrs: []*ir.Attribute{fAttr("softcap", 1.5), fAttr("scale", 0.7)}, qk: true, qkMode: 1},
		{name: "qk mode 3 weights", b: 1, hq: 2, hk: 1, sq: 3, skv: 5, d: 8, dv: 8, mask: []int{3, 5}, qk: true, qkMode: 3},
		{name: "float16 with cache", b: 1, hq: 4, hk: 2, sq: 3, skv: 2, past: 4, d: 8, dv: 8, present: true, f16: true, mask: []int{3, 6}, qk: true, qkMode: 2,
			attrs: []*ir.Attribute{iAttr("softmax_precision", 1)}},
	}
	r := rand.New(rand.NewSource(5))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			total := c.past + c.skv
			var q, k, v, q4, k4, v4 *ir.Tensor
			if c.threeD {
				q, k, v = randTensor(r, c.b, c.sq, c.hq*c.d), randTensor(r, c.b, c.skv, c.hk*c.d), randTensor(r, c.b, c.skv, c.hk*c.dv)
				q4, k4, v4 = headsTo4D(q, c.hq), headsTo4D(k, c.hk), headsTo4D(v, c.hk)
			} else {
				q, k, v = randTensor(r, c.b, c.hq, c.sq, c.d), randTensor(r, c.b, c.hk, c.skv, c.d), randTensor(r, c.b, c.hk, c.skv, c.dv)
				q4, k4, v4 = q, k, v
			}
			inputs := []string{"q", "k", "v", "", "", "", ""}
			vals := []*ir.Tensor{q, k, v, nil, nil, nil, nil}
			var pk, pv *ir.Tensor
			if c.past > 0 {
				pk, pv = randTensor(r, c.b, c.hk, c.past, c.d), randTensor(r, c.b, c.hk, c.past, c.dv)
				k4, v4 = concatSeq(pk, k4), concatSeq(pv, v4)
				inputs[4], inputs[5], vals[4], vals[5] = "pk", "pv", pk, pv
			}
			ec := attnExtCase{b: c.b, hq: c.hq, hk: c.hk, sq: c.sq, sk: total, d: c.d, dv: c.dv, scale: float32(1 / math.Sqrt(float64(c.d)))}
			attrs := append([]*ir.Attribute{}, c.attrs...)
			for _, a := range c.attrs {
				switch a.Name {
				case "is_causal":
					ec.causal, ec.causalOff = true, c.past
				case "softcap":
					ec.softcap = a.Float
				case "scale":
					ec.scale = a.Float
				}
			}
			if c.threeD {
				attrs = append(attrs, iAttr("q_num_heads", int64(c.hq)), iAttr("kv_num_heads", int64(c.hk)))
			}
			var refMask *ir.Tensor
			if c.mask != nil {
				// The node's mask, and its 4-D padded form for the reference.
				m4 := append([]int{}, c.mask...)
				for len(m4) < 4 {
					m4 = append([]int{1}, m4...)
				}
				ec.mask, ec.padKeys = m4, m4[3] < total
				if c.boolMask {
					vals[3] = randBools(r, 0.7, c.mask...)
					ec.kind, ec.fill = MaskBoolFalseMasks, float32(math.Inf(-1))
				} else {
					vals[3] = randTensor(r, c.mask...)
					ec.kind = MaskAdditive
				}
				refMask = vals[3]
				inputs[3] = "mask"
			}
			if c.nonpad != nil {
				vals[6] = ir.FromSlice([]int{len(c.nonpad)}, c.nonpad)
				inputs[6] = "nonpad"
				ec.kvLens = c.nonpad
			}
			outputs := []string{"y"}
			if c.present || c.qk {
				outputs = append(outputs, "", "")
				if c.present {
					outputs[1], outputs[2] = "pk_out", "pv_out"
				}
			}
			if c.qk {
				outputs = append(outputs, "qk")
				attrs = append(attrs, iAttr("qk_matmul_output_mode", c.qkMode))
				ec.scoresMode = []string{ScoresSoftcapped, ScoresSoftcapped, ScoresBiased, ScoresWeights}[c.qkMode]
			}
			for len(inputs) > 3 && inputs[len(inputs)-1] == "" {
				inputs, vals = inputs[:len(inputs)-1], vals[:len(vals)-1]
			}
			if c.f16 {
				for i, x := range vals {
					if x != nil && x.DType == ir.Float {
						vals[i] = toF16(x)
					}
				}
				// The reference sees the float16-rounded values.
				q4, k4, v4 = fromF16(toF16(q4)), fromF16(toF16(k4)), fromF16(toF16(v4))
				if refMask != nil {
					refMask = fromF16(vals[3])
				}
			}
			n := onnxAttnNode(inputs, outputs, attrs...)
			opset := 23
			if c.nonpad != nil {
				opset = 24
			}
			s, err := Lookup("", "Attention", opset)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CheckArity(n); err != nil {
				t.Fatal(err)
			}
			in := make([]Value, len(vals))
			for i, x := range vals {
				if x != nil {
					in[i] = Value{Type: Known(x.DType, x.Shape)}
				}
			}
			inferred, err := s.Infer(n, opset, in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.Run(&Context{Opset: opset, Threads: 2}, n, vals)
			if err != nil {
				t.Fatal(err)
			}
			for i, name := range outputs {
				if name == "" {
					continue
				}
				if out[i] == nil || !SameShape(out[i].Shape, mustConcrete(t, inferred[i].Type.Shape)) || out[i].DType != inferred[i].Type.DType {
					t.Fatalf("output %s: %v, inference said %v", name, out[i], inferred[i].Type)
				}
			}
			wantY, wantS := refAttentionExt(ec, q4, k4, v4, refMask, nil, nil)
			got := func(x *ir.Tensor) *ir.Tensor {
				if c.f16 {
					return fromF16(x)
				}
				return x
			}
			tol := func(g float32, w float64) bool {
				if c.f16 {
					return math.Abs(float64(g)-w) <= 2e-3+2e-3*math.Abs(w) || (math.IsNaN(w) && math.IsNaN(float64(g)))
				}
				return closeF64(g, w)
			}
			y := got(out[0])
			if c.threeD {
				// Y is [B, S, H·Dv]: compare it as [B, H, S, Dv].
				y = headsTo4D(y, c.hq)
			}
			for i, g := range y.Float32s() {
				if !tol(g, wantY[i]) {
					t.Fatalf("Y[%d] = %g, want %g", i, g, wantY[i])
				}
			}
			if c.present {
				for i, pair := range [][2]*ir.Tensor{{got(out[1]), k4}, {got(out[2]), v4}} {
					if !SameShape(pair[0].Shape, pair[1].Shape) {
						t.Fatalf("present %d has shape %v, want %v", i, pair[0].Shape, pair[1].Shape)
					}
					for j, g := range pair[0].Float32s() {
						if g != pair[1].Float32s()[j] {
							t.Fatalf("present %d [%d] = %g, want %g", i, j, g, pair[1].Float32s()[j])
						}
					}
				}
			}
			if c.qk {
				for i, g := range got(out[3]).Float32s() {
					if !tol(g, wantS[i]) {
						t.Fatalf("qk[%d] = %g, want %g", i, g, wantS[i])
					}
				}
			}
		})
	}
}

func TestAttentionInfer(t *testing.T) {
	f := func(dims ...any) Value { return Typed(ir.Float, symShape(dims...)) }
	heads := []*ir.Attribute{iAttr("q_num_heads", 4), iAttr("kv_num_heads", 2)}
	cases := []struct {
		name  string
		ins   []string
		outs  []string
		attrs []*ir.Attribute
		in    []Value
		want  []string
		err   string
	}{
		{"4-D symbolic", []string{"q", "k", "v"}, []string{"y"}, nil,
			[]Value{f("b", 8, "s", 64), f("b", 2, "t", 64), f("b", 2, "t", 32)}, []string{"[b, 8, s, 32]"}, ""},
		{"3-D", []string{"q", "k", "v"}, []string{"y"}, heads,
			[]Value{f("b", "s", 64), f("b", "t", 32), f("b", "t", 48)}, []string{"[b, s, 96]"}, ""},
		{"cache and qk", []string{"q", "k", "v", "", "pk", "pv"}, []string{"y", "pk2", "pv2", "qk"}, nil,
			[]Value{f(1, 4, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 6), {}, f(1, 2, 10, 8), f(1, 2, 10, 6)},
			[]string{"[1, 4, 3, 6]", "[1, 2, 13, 8]", "[1, 2, 13, 6]", "[1, 4, 3, 13]"}, ""},
		{"symbolic cache", []string{"q", "k", "v", "", "pk", "pv"}, []string{"y", "pk2", "pv2"}, nil,
			[]Value{f(1, 4, 1, 8), f(1, 2, 1, 8), f(1, 2, 1, 8), {}, f(1, 2, "p", 8), f(1, 2, "p", 8)},
			[]string{"[1, 4, 1, 8]", "[1, 2, p + 1, 8]", "[1, 2, p + 1, 8]"}, ""},
		{"3-D without heads", []string{"q", "k", "v"}, []string{"y"}, nil, []Value{f(1, 3, 8), f(1, 3, 8), f(1, 3, 8)}, nil, "q_num_heads and kv_num_heads"},
		{"heads do not divide", []string{"q", "k", "v"}, []string{"y"}, nil, []Value{f(1, 3, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 8)}, nil, "not a multiple"},
		{"hidden not a multiple", []string{"q", "k", "v"}, []string{"y"}, heads, []Value{f(1, 3, 30), f(1, 3, 16), f(1, 3, 16)}, nil, "not a multiple of its 4 heads"},
		{"ranks differ", []string{"q", "k", "v"}, []string{"y"}, heads, []Value{f(1, 3, 32), f(1, 2, 3, 8), f(1, 3, 16)}, nil, "ranks"},
		{"rank 2", []string{"q", "k", "v"}, []string{"y"}, nil, []Value{f(3, 8), f(3, 8), f(3, 8)}, nil, "3-D or 4-D"},
		{"head sizes", []string{"q", "k", "v"}, []string{"y"}, nil, []Value{f(1, 2, 3, 8), f(1, 2, 3, 4), f(1, 2, 3, 8)}, nil, "head size"},
		{"past alone", []string{"q", "k", "v", "", "pk"}, []string{"y"}, nil, []Value{f(1, 2, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 8), {}, f(1, 2, 3, 8)}, nil, "go together"},
		{"int mask", []string{"q", "k", "v", "m"}, []string{"y"}, nil, []Value{f(1, 2, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 8), Typed(ir.Int64, ir.ShapeOf([]int{3, 3}))}, nil, "bool mask or one of Q's type"},
		{"mask too long", []string{"q", "k", "v", "m"}, []string{"y"}, nil, []Value{f(1, 2, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 8), f(3, 5)}, nil, "covers more keys"},
		{"qk mode", []string{"q", "k", "v"}, []string{"y"}, []*ir.Attribute{iAttr("qk_matmul_output_mode", 4)}, []Value{f(1, 2, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 8)}, nil, "qk_matmul_output_mode"},
		{"softmax precision", []string{"q", "k", "v"}, []string{"y"}, []*ir.Attribute{iAttr("softmax_precision", 7)}, []Value{f(1, 2, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 8)}, nil, "softmax_precision"},
		{"nonpad with cache", []string{"q", "k", "v", "", "pk", "pv", "np"}, []string{"y"}, nil,
			[]Value{f(1, 2, 3, 8), f(1, 2, 3, 8), f(1, 2, 3, 8), {}, f(1, 2, 3, 8), f(1, 2, 3, 8), Typed(ir.Int64, ir.ShapeOf([]int{1}))}, nil, "cannot be used with past_key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := inferAttention(onnxAttnNode(c.ins, c.outs, c.attrs...), 24, c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), `node "att" (Attention)`) {
					t.Fatalf("error %v, want one naming the node and containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range c.want {
				if got := out[i].Type.Shape.String(); got != w {
					t.Fatalf("output %d: %s, want %s", i, got, w)
				}
			}
		})
	}
}

// TestAttentionLowering checks the nodes an Attention node becomes: a 3-D
// node without a cache reads Q, K and V in place through head-split views
// and writes Y through the head merge; a cache adds the head split of K
// and V and the Concats; float16 adds Casts.
func TestAttentionLowering(t *testing.T) {
	v := func(s ...int) Value { return Typed(ir.Float, ir.ShapeOf(s)) }
	h := func(s ...int) Value { return Typed(ir.Float16, ir.ShapeOf(s)) }
	heads := []*ir.Attribute{iAttr("q_num_heads", 4), iAttr("kv_num_heads", 2)}
	cases := []struct {
		name string
		n    *ir.Node
		in   []Value
		ops  string
	}{
		{"3-D in place", onnxAttnNode([]string{"q", "k", "v"}, []string{"y"}, heads...), []Value{v(2, 5, 32), v(2, 5, 16), v(2, 5, 16)}, "com.attnrun:FusedAttention"},
		{"3-D cache", onnxAttnNode([]string{"q", "k", "v", "", "pk", "pv"}, []string{"y", "pk2", "pv2"}, heads...),
			[]Value{v(2, 1, 32), v(2, 1, 16), v(2, 1, 16), {}, v(2, 2, 7, 8), v(2, 2, 7, 8)},
			"Reshape Transpose Concat Reshape Transpose Concat com.attnrun:FusedAttention"},
		{"4-D present only", onnxAttnNode([]string{"q", "k", "v"}, []string{"y", "pk2", "pv2"}), []Value{v(1, 4, 3, 8), v(1, 2, 3, 8), v(1, 2, 3, 8)},
			"Identity Identity com.attnrun:FusedAttention"},
		{"float16", onnxAttnNode([]string{"q", "k", "v"}, []string{"y"}), []Value{h(1, 4, 3, 8), h(1, 2, 3, 8), h(1, 2, 3, 8)},
			"Cast Cast Cast com.attnrun:FusedAttention Cast"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := LowerAttention(c.n, c.in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range l.Nodes {
				got = append(got, n.QualifiedOp())
				if !strings.HasPrefix(n.Name, "att/") {
					t.Fatalf("node %q is not named after the Attention node", n.Name)
				}
				for _, o := range n.Outputs {
					if o != "y" && o != "pk2" && o != "pv2" && !strings.HasPrefix(o, AttentionTempPrefix+"att/") {
						t.Fatalf("tensor %q is not named with the lowering's prefix", o)
					}
				}
			}
			if strings.Join(got, " ") != c.ops {
				t.Fatalf("nodes %v, want %s", got, c.ops)
			}
			if l.Fused == nil || l.Fused.OpType != FusedAttentionOp {
				t.Fatalf("no FusedAttention node")
			}
			if c.name == "3-D in place" {
				if l.Fused.Inputs[0] != "q" || l.Heads[0] != 4 || l.Fused.Attr("out_view") == nil {
					t.Fatalf("3-D Q is not read in place: %v", l.Fused.Inputs)
				}
				if g, _ := l.Fused.AttrInt("kv_group", 1); g != 2 {
					t.Fatalf("kv_group %d, want 2", g)
				}
			}
		})
	}
}

// TestAttentionWideAndNarrowFloats: double and bfloat16 Attention run the
// float32 kernel between Casts and give float32's result in their type.
func TestAttentionWideAndNarrowFloats(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	q, k, v := randTensor(r, 1, 4, 3, 8), randTensor(r, 1, 2, 5, 8), randTensor(r, 1, 2, 5, 8)
	n := onnxAttnNode([]string{"q", "k", "v"}, []string{"y"}, iAttr("is_causal", 1))
	s, err := Lookup("", "Attention", 23)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Run(&Context{Threads: 1}, n, []*ir.Tensor{q, k, v})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dt  ir.DType
		tol float64
	}{{ir.Double, 1e-6}, {ir.BFloat16, 3e-2}} {
		in := []*ir.Tensor{convertFloats(q, c.dt), convertFloats(k, c.dt), convertFloats(v, c.dt)}
		if c.dt == ir.BFloat16 {
			// The reference sees the rounded inputs.
			rq, rk, rv := convertFloats(in[0], ir.Float), convertFloats(in[1], ir.Float), convertFloats(in[2], ir.Float)
			if want, err = s.Run(&Context{Threads: 1}, n, []*ir.Tensor{rq, rk, rv}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Run(&Context{Threads: 1}, n, in)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].DType != c.dt {
			t.Fatalf("%v: Y is %v", c.dt, got[0].DType)
		}
		for i, g := range floatsOf(got[0]) {
			w := float64(want[0].Float32s()[i])
			if math.Abs(float64(g)-w) > c.tol*(1+math.Abs(w)) {
				t.Fatalf("%v: Y[%d] = %g, want %g", c.dt, i, g, w)
			}
		}
	}
}
