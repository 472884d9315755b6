package ops

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

func attnNode(attrs ...*ir.Attribute) *ir.Node {
	return &ir.Node{Name: "fa", OpType: FusedAttentionOp, Domain: DomainAttnrun, Attrs: attrs}
}

func fAttr(name string, v float32) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrFloat, Float: v}
}
func iAttr(name string, v int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v}
}
func sAttr(name, v string) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrString, String: []byte(v)}
}

// refAttention is the unfused computation in float64: full scores, mask,
// softmax along the last axis (max-subtracted, so an all -inf row is NaN)
// and the product with V, with the op's broadcasting.
func refAttention(t *testing.T, q, k, v, mask *ir.Tensor, scale float32, kT bool, kind string, fill, maskScale float32) *ir.Tensor {
	t.Helper()
	out, _ := refAttentionLogits(t, q, k, v, mask, scale, kT, kind, fill, maskScale)
	return out
}

// refAttentionLogits is refAttention that also returns the largest
// |scale·q·k| of the scores before the mask.
func refAttentionLogits(t *testing.T, q, k, v, mask *ir.Tensor, scale float32, kT bool, kind string, fill, maskScale float32) (*ir.Tensor, float64) {
	t.Helper()
	var maxLogit float64
	var mshape []int
	if mask != nil {
		mshape = mask.Shape
	}
	s, err := splitAttn(q.Shape, k.Shape, v.Shape, mshape, kT, mask != nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := BroadcastShapes(s.qB, s.kB, s.vB, s.mB)
	if err != nil {
		t.Fatal(err)
	}
	out := ir.NewTensor(ir.Float, append(append([]int{}, batch...), s.sq, s.dv))
	qo, ko, vo := batchOffsets(batch, s.qB), batchOffsets(batch, s.kB), batchOffsets(batch, s.vB)
	var mo []int
	if mask != nil {
		mo = batchOffsets(batch, s.mB)
	}
	qd, kd, vd, od := q.Float32s(), k.Float32s(), v.Float32s(), out.Float32s()
	nb := int(ir.NumElements(batch))
	sc := make([]float64, s.sk)
	for b := 0; b < nb; b++ {
		for i := 0; i < s.sq; i++ {
			for j := 0; j < s.sk; j++ {
				// The dot product in float64, rounded once: the kernels'
				// float32 sums are then compared with the product itself,
				// not with another float32 sum's rounding (with peaked
				// scores, logits up to about ±85, the two sums' errors
				// together came to 1.5× the tolerance on some draws).
				var dot float64
				for x := 0; x < s.d; x++ {
					kv := kd[ko[b]*s.sk*s.d+j*s.d+x]
					if kT {
						kv = kd[ko[b]*s.sk*s.d+x*s.sk+j]
					}
					dot += float64(qd[(qo[b]*s.sq+i)*s.d+x]) * float64(kv)
				}
				maxLogit = max(maxLogit, math.Abs(dot*float64(scale)))
				val := float32(dot * float64(scale))
				if mask != nil {
					mi, mj := i, j
					if s.msq == 1 {
						mi = 0
					}
					if s.msk == 1 {
						mj = 0
					}
					off := mo[b]*s.msq*s.msk + mi*s.msk + mj
					switch kind {
					case MaskAdditive:
						val += mask.Float32s()[off] * maskScale
					case MaskBoolTrueMasks:
						if mask.Bools()[off] {
							val = fill
						}
					case MaskBoolFalseMasks:
						if !mask.Bools()[off] {
							val = fill
						}
					}
				}
				sc[j] = float64(val)
			}
			mx := sc[0]
			for _, x := range sc {
				mx = math.Max(mx, x)
			}
			var sum float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			for c := 0; c < s.dv; c++ {
				var acc float64
				for j := range sc {
					acc += sc[j] / sum * float64(vd[vo[b]*s.sk*s.dv+j*s.dv+c])
				}
				od[(b*s.sq+i)*s.dv+c] = float32(acc)
			}
		}
	}
	return out, maxLogit
}

func randTensor(r *rand.Rand, shape ...int) *ir.Tensor {
	t := ir.NewTensor(ir.Float, shape)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(r.NormFloat64())
	}
	return t
}

func randBools(r *rand.Rand, p float64, shape ...int) *ir.Tensor {
	t := ir.NewTensor(ir.Bool, shape)
	for i := range t.Bools() {
		t.Bools()[i] = r.Float64() < p
	}
	return t
}

// closeF32 compares with rtol/atol, treating NaN as equal only to NaN.
func closeF32(got, want float32) bool { return closeF32Slack(got, want, 0) }

// closeF32Slack is closeF32 with slack added to its atol.
func closeF32Slack(got, want float32, slack float64) bool {
	if math.IsNaN(float64(want)) || math.IsNaN(float64(got)) {
		return math.IsNaN(float64(want)) && math.IsNaN(float64(got))
	}
	return math.Abs(float64(got-want)) <= 2e-5+slack+1e-4*math.Abs(float64(want))
}

// logitSlack is what one float32 rounding of the largest logit can move
// an output by: each probability moves by the rounding's fraction of
// itself, and the output, a weighted mean of V's rows, by as much times
// max|v|. The kernels' float32 logits carry about that error; with the
// usual scales it is far below the tolerance (about 1e-6), with peaked scores
// (scale 2, D=64, logits up to about ±85: 2.0–2.8e-5) it is not: outputs that cancel
// to 1e-3 were off by up to 2.4e-5 on some draws.
func logitSlack(maxLogit float64, v *ir.Tensor) float64 {
	maxV := 0.0
	for _, x := range v.Float32s() {
		maxV = max(maxV, math.Abs(float64(x)))
	}
	return math.Exp2(-24) * maxLogit * maxV
}

func TestFusedAttentionByHand(t *testing.T) {
	// scores [1, 0]; weights [e/(e+1), 1/(e+1)] = [0.7310586, 0.2689414].
	q := ir.FromSlice([]int{1, 2}, []float32{1, 0})
	k := ir.FromSlice([]int{2, 2}, []float32{1, 0, 0, 1})
	v := ir.FromSlice([]int{2, 2}, []float32{1, 2, 3, 4})
	cases := []struct {
		name string
		n    *ir.Node
		in   []*ir.Tensor
		want []float32
	}{
		{"plain", attnNode(), []*ir.Tensor{q, k, v}, []float32{1.5378828, 2.5378828}},
		// scale 2: scores [2, 0]: weights [0.8807971, 0.1192029].
		{"scale", attnNode(fAttr("scale", 2)), []*ir.Tensor{q, k, v}, []float32{1.2384058, 2.2384058}},
		// key 0 masked with -inf: all weight on key 1.
		{"bool true masks", attnNode(sAttr("mask_kind", MaskBoolTrueMasks)), []*ir.Tensor{q, k, v, ir.FromSlice([]int{2}, []bool{true, false})}, []float32{3, 4}},
		{"bool false masks", attnNode(sAttr("mask_kind", MaskBoolFalseMasks)), []*ir.Tensor{q, k, v, ir.FromSlice([]int{1, 2}, []bool{true, false})}, []float32{1, 2}},
		// additive [0, 1] makes the scores equal: the mean of V's rows.
		{"additive", attnNode(sAttr("mask_kind", MaskAdditive)), []*ir.Tensor{q, k, v, ir.FromSlice([]int{2}, []float32{0, 1})}, []float32{2, 3}},
		// mask_scale 0.5 on [0, 2]: same as above.
		{"additive scaled", attnNode(sAttr("mask_kind", MaskAdditive), fAttr("mask_scale", 0.5)), []*ir.Tensor{q, k, v, ir.FromSlice([]int{2}, []float32{0, 2})}, []float32{2, 3}},
		// Kᵀ given: K = I is its own transpose.
		{"k transposed", attnNode(iAttr("k_transposed", 1)), []*ir.Tensor{q, k, v}, []float32{1.5378828, 2.5378828}},
		// Fully masked with -inf: softmax gives NaN, as the unfused graph.
		{"all masked -inf", attnNode(sAttr("mask_kind", MaskBoolTrueMasks)), []*ir.Tensor{q, k, v, ir.FromSlice([]int{2}, []bool{true, true})}, []float32{float32(math.NaN()), float32(math.NaN())}},
		// Fully masked with -1e9: every score is -1e9, uniform weights.
		{"all masked -1e9", attnNode(sAttr("mask_kind", MaskBoolTrueMasks), fAttr("mask_fill", -1e9)), []*ir.Tensor{q, k, v, ir.FromSlice([]int{2}, []bool{true, true})}, []float32{2, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runFusedAttention(&Context{Threads: 1}, c.n, c.in)
			if err != nil {
				t.Fatal(err)
			}
			got := out[0].Float32s()
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if !closeF32(got[i], c.want[i]) {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestFusedAttentionVsReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	type tc struct {
		name       string
		q, k, v    []int
		mask       []int
		kind       string
		fill       float32
		maskScale  float32
		scale      float32
		kT         bool
		maskP      float64
		maskedRows []int // query rows (of every batch) forced fully masked
	}
	cases := []tc{
		{name: "4-D heads", q: []int{2, 3, 200, 16}, k: []int{2, 3, 300, 16}, v: []int{2, 3, 300, 8}, scale: 0.25},
		{name: "3-D bmm, Kᵀ", q: []int{4, 65, 8}, k: []int{4, 8, 513}, v: []int{4, 513, 8}, scale: 0.35, kT: true},
		{name: "2-D", q: []int{5, 8}, k: []int{7, 8}, v: []int{7, 3}, scale: 1},
		{name: "broadcast K and V", q: []int{2, 3, 9, 4}, k: []int{1, 3, 11, 4}, v: []int{11, 4}, scale: 0.5},
		{name: "causal-style bool mask, -inf", q: []int{2, 2, 130, 8}, k: []int{2, 2, 300, 8}, v: []int{2, 2, 300, 8}, mask: []int{1, 1, 130, 300}, kind: MaskBoolTrueMasks, fill: float32(math.Inf(-1)), maskP: 0.5, scale: 0.3, maskedRows: []int{3, 77}},
		{name: "padding mask [B,1,1,Sk], -inf", q: []int{2, 2, 9, 8}, k: []int{2, 2, 600, 8}, v: []int{2, 2, 600, 8}, mask: []int{2, 1, 1, 600}, kind: MaskBoolTrueMasks, fill: float32(math.Inf(-1)), maskP: 0.9, scale: 0.3},
		{name: "2-D mask -1e9 with full rows", q: []int{70, 8}, k: []int{260, 8}, v: []int{260, 4}, mask: []int{70, 260}, kind: MaskBoolTrueMasks, fill: -1e9, maskP: 0.3, scale: 0.2, maskedRows: []int{0, 69}},
		{name: "false masks -1e20", q: []int{3, 20, 8}, k: []int{3, 20, 8}, v: []int{3, 20, 8}, mask: []int{3, 20, 20}, kind: MaskBoolFalseMasks, fill: -1e20, maskP: 0.7, scale: 0.5},
		{name: "mask batch widens output", q: []int{6, 8}, k: []int{6, 8}, v: []int{6, 8}, mask: []int{3, 6, 6}, kind: MaskBoolTrueMasks, fill: -1e9, maskP: 0.4, scale: 1},
		// Scores of a wide range (±50): the streaming softmax's shift moves
		// up inside key blocks (raiseShift), over three blocks and a
		// partial last sliver of keys.
		{name: "peaked scores, D=64", q: []int{1, 2, 70, 64}, k: []int{1, 2, 1100, 64}, v: []int{1, 2, 1100, 64}, scale: 2},
		// The same under a mask that differs per query row: the blocks run
		// on the general path (scoresSoftmax), whose rescale then scales
		// the row-major accumulator (rowAcc: Dv a multiple of 32, V in place).
		{name: "peaked scores, [Sq, Sk] mask, D=64", q: []int{1, 2, 70, 64}, k: []int{1, 2, 1100, 64}, v: []int{1, 2, 1100, 64}, mask: []int{1, 1, 70, 1100}, kind: MaskBoolTrueMasks, fill: float32(math.Inf(-1)), maskP: 0.3, scale: 2},
		{name: "additive", q: []int{2, 4, 33, 8}, k: []int{2, 4, 300, 8}, v: []int{2, 4, 300, 5}, mask: []int{2, 1, 33, 300}, kind: MaskAdditive, maskScale: 0.5, scale: 0.125},
		// Partial last panels whose rows the 16×16 transposes take through
		// attnWork.tail: 49 = 32 + 16 + 1 (Swin's 7×7 windows), 197 =
		// 6·32 + 5 (ViT-B/16), 77 = 2·32 + 13 (CLIP's text).
		{name: "Swin window, 17-lane panel", q: []int{2, 3, 49, 32}, k: []int{2, 3, 49, 32}, v: []int{2, 3, 49, 32}, scale: 0.17},
		{name: "ViT tokens, 5-lane panel", q: []int{1, 2, 197, 64}, k: []int{1, 2, 197, 64}, v: []int{1, 2, 197, 64}, scale: 0.125},
		{name: "CLIP text, 13-lane panel, Dv 16", q: []int{1, 2, 77, 48}, k: []int{1, 2, 77, 48}, v: []int{1, 2, 77, 16}, scale: 0.14},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, k, v := randTensor(r, c.q...), randTensor(r, c.k...), randTensor(r, c.v...)
			in := []*ir.Tensor{q, k, v}
			attrs := []*ir.Attribute{fAttr("scale", c.scale)}
			if c.kT {
				attrs = append(attrs, iAttr("k_transposed", 1))
			}
			var mask *ir.Tensor
			if c.mask != nil {
				mask = randMask(r, c.kind, c.maskP, c.mask)
				if c.kind != MaskAdditive {
					msk := c.mask[len(c.mask)-1]
					masked := c.kind == MaskBoolTrueMasks
					rows := len(mask.Bools()) / msk
					for row := 0; row < rows; row++ {
						for _, fr := range c.maskedRows {
							if row%c.mask[len(c.mask)-2] == fr {
								for j := 0; j < msk; j++ {
									mask.Bools()[row*msk+j] = masked
								}
							}
						}
					}
				}
				in = append(in, mask)
				attrs = append(attrs, sAttr("mask_kind", c.kind), fAttr("mask_fill", c.fill), fAttr("mask_scale", c.maskScale))
			}
			want, maxLogit := refAttentionLogits(t, q, k, v, mask, c.scale, c.kT, c.kind, c.fill, c.maskScale)
			slack := logitSlack(maxLogit, v)
			for _, threads := range []int{1, 3} {
				out, err := runFusedAttention(&Context{Threads: threads}, attnNode(attrs...), in)
				if err != nil {
					t.Fatal(err)
				}
				if !SameShape(out[0].Shape, want.Shape) {
					t.Fatalf("shape %v, want %v", out[0].Shape, want.Shape)
				}
				nans := 0
				for i, g := range out[0].Float32s() {
					w := want.Float32s()[i]
					if math.IsNaN(float64(w)) {
						nans++
					}
					if !closeF32Slack(g, w, slack) {
						t.Fatalf("threads %d: element %d = %g, want %g (slack %.1e)", threads, i, g, w, slack)
					}
				}
				if wantNaN := len(c.maskedRows) > 0 && math.IsInf(float64(c.fill), -1); wantNaN != (nans > 0) {
					t.Fatalf("%d NaN outputs, want NaNs: %v", nans, wantNaN)
				}
			}
		})
	}
}

// TestFusedAttentionOnlineRescale puts the row maximum in the last key
// block, far above the earlier ones, so the accumulator is rescaled.
func TestFusedAttentionOnlineRescale(t *testing.T) {
	sk := 2*attnKBlock + 5
	q := ir.FromSlice([]int{1, 1}, []float32{1})
	k := ir.NewTensor(ir.Float, []int{sk, 1})
	v := ir.NewTensor(ir.Float, []int{sk, 1})
	for j := 0; j < sk; j++ {
		k.Float32s()[j] = float32(j) / 10 // increasing scores
		v.Float32s()[j] = float32(j % 3)
	}
	want := refAttention(t, q, k, v, nil, 1, false, "", 0, 1)
	out, err := runFusedAttention(&Context{Threads: 1}, attnNode(), []*ir.Tensor{q, k, v})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := out[0].Float32s()[0], want.Float32s()[0]; !closeF32(g, w) {
		t.Fatalf("got %g, want %g", g, w)
	}
}

func TestFusedAttentionEmpty(t *testing.T) {
	q := ir.NewTensor(ir.Float, []int{2, 3, 4})
	k := ir.NewTensor(ir.Float, []int{2, 0, 4})
	v := ir.NewTensor(ir.Float, []int{2, 0, 5})
	out, err := runFusedAttention(&Context{Threads: 2}, attnNode(), []*ir.Tensor{q, k, v})
	if err != nil {
		t.Fatal(err)
	}
	if !SameShape(out[0].Shape, []int{2, 3, 5}) {
		t.Fatalf("shape %v", out[0].Shape)
	}
	for _, x := range out[0].Float32s() {
		if x != 0 {
			t.Fatalf("Sk = 0 gave %v, want zeros", out[0].Float32s())
		}
	}
}

// symShape builds a shape from ints (known dims) and strings (symbols).
func symShape(dims ...any) ir.Shape {
	s := make(ir.Shape, len(dims))
	for i, d := range dims {
		switch x := d.(type) {
		case int:
			s[i] = ir.Dim{Value: int64(x)}
		case string:
			s[i] = ir.Dim{Param: x}
		}
	}
	return s
}

func TestFusedAttentionInfer(t *testing.T) {
	sym := symShape
	f := func(s ir.Shape) Value { return Typed(ir.Float, s) }
	cases := []struct {
		name string
		n    *ir.Node
		in   []Value
		want string
		err  string
	}{
		{"4-D", attnNode(), []Value{f(sym("b", 4, "s", 8)), f(sym("b", 4, "s", 8)), f(sym("b", 4, "s", 16))}, "[b, 4, s, 16]", ""},
		{"Kᵀ and mask batch", attnNode(iAttr("k_transposed", 1), sAttr("mask_kind", MaskBoolTrueMasks)),
			[]Value{f(sym("s", 8)), f(sym(8, "t")), f(sym("t", 8)), Typed(ir.Bool, sym("b", 1, "s", "t"))}, "[b, 1, s, 8]", ""},
		{"head size", attnNode(), []Value{f(sym(2, 3, 8)), f(sym(2, 3, 7)), f(sym(2, 3, 8))}, "", "head size"},
		{"keys", attnNode(), []Value{f(sym(2, 3, 8)), f(sym(2, 4, 8)), f(sym(2, 3, 8))}, "", "keys"},
		{"mask kind missing", attnNode(), []Value{f(sym(3, 8)), f(sym(3, 8)), f(sym(3, 8)), Typed(ir.Bool, sym(3, 3))}, "", "mask_kind"},
		{"mask dtype", attnNode(sAttr("mask_kind", MaskAdditive)), []Value{f(sym(3, 8)), f(sym(3, 8)), f(sym(3, 8)), Typed(ir.Bool, sym(3, 3))}, "", "mask has element type bool"},
		{"mask rows", attnNode(sAttr("mask_kind", MaskBoolTrueMasks)), []Value{f(sym(3, 8)), f(sym(3, 8)), f(sym(3, 8)), Typed(ir.Bool, sym(2, 3))}, "", "does not broadcast"},
		{"rank 1", attnNode(), []Value{f(sym(8)), f(sym(3, 8)), f(sym(3, 8))}, "", "rank ≥ 2"},
		{"float64", attnNode(), []Value{Typed(ir.Double, sym(3, 8)), f(sym(3, 8)), f(sym(3, 8))}, "", "float32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := inferFusedAttention(c.n, 1, c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), `node "fa" (com.attnrun:FusedAttention)`) {
					t.Fatalf("err = %v, want it to name the node and contain %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := out[0].Type.Shape.String(); got != c.want {
				t.Fatalf("shape %s, want %s", got, c.want)
			}
		})
	}
}

func TestFusedAttentionRunErrors(t *testing.T) {
	q := ir.NewTensor(ir.Float, []int{3, 8})
	cases := []struct {
		name string
		n    *ir.Node
		in   []*ir.Tensor
		err  string
	}{
		{"bad kind", attnNode(sAttr("mask_kind", "nope")), []*ir.Tensor{q, q, q, ir.NewTensor(ir.Bool, []int{3, 3})}, "mask_kind"},
		{"bad k_transposed", attnNode(iAttr("k_transposed", 2)), []*ir.Tensor{q, q, q}, "k_transposed"},
		{"V keys", attnNode(), []*ir.Tensor{q, q, ir.NewTensor(ir.Float, []int{4, 8})}, "keys"},
		{"batch", attnNode(), []*ir.Tensor{ir.NewTensor(ir.Float, []int{2, 3, 8}), ir.NewTensor(ir.Float, []int{3, 3, 8}), q}, "do not broadcast"},
		{"missing V", attnNode(), []*ir.Tensor{q, q, nil}, "input 2 is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runFusedAttention(&Context{Threads: 1}, c.n, c.in)
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("err = %v, want it to contain %q", err, c.err)
			}
		})
	}
}

// BenchmarkFusedAttention compares the fused kernel with the unfused
// MatMul → Div → Softmax → MatMul sequence the exports contain (K given
// transposed to the unfused MatMul, so no Transpose is timed), for B=1,
// H=12, D=64. GFLOP/s counts the two matrix products, 4·B·H·S²·D.
func BenchmarkFusedAttention(b *testing.B) {
	for _, s := range []int{512, 2048} {
		const h, d = 12, 64
		r := rand.New(rand.NewSource(1))
		q, k, v := randTensor(r, 1, h, s, d), randTensor(r, 1, h, s, d), randTensor(r, 1, h, s, d)
		kt := randTensor(r, 1, h, d, s)
		flops := 4 * float64(h) * float64(s) * float64(s) * float64(d)
		ctx := &Context{Opset: 17, Threads: 2}
		report := func(b *testing.B) {
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		b.Run(fmt.Sprintf("fused/S=%d", s), func(b *testing.B) {
			n := attnNode(fAttr("scale", 0.125))
			fctx := &Context{Opset: 1, Threads: 2}
			for i := 0; i < b.N; i++ {
				if _, err := runFusedAttention(fctx, n, []*ir.Tensor{q, k, v}); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("unfused/S=%d", s), func(b *testing.B) {
			mm, _ := Lookup("", "MatMul", 17)
			div, _ := Lookup("", "Div", 17)
			sm, _ := Lookup("", "Softmax", 17)
			mmN := &ir.Node{Name: "mm", OpType: "MatMul"}
			divN := &ir.Node{Name: "div", OpType: "Div"}
			smN := &ir.Node{Name: "sm", OpType: "Softmax", Attrs: []*ir.Attribute{iAttr("axis", -1)}}
			c := ir.Scalar(float32(8))
			for i := 0; i < b.N; i++ {
				sc, err := mm.Run(ctx, mmN, []*ir.Tensor{q, kt})
				if err != nil {
					b.Fatal(err)
				}
				sc, err = div.Run(ctx, divN, []*ir.Tensor{sc[0], c})
				if err != nil {
					b.Fatal(err)
				}
				sc, err = sm.Run(ctx, smN, sc)
				if err != nil {
					b.Fatal(err)
				}
				if _, err = mm.Run(ctx, mmN, []*ir.Tensor{sc[0], v}); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
}

func intsAttr(name string, v []int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInts, Ints: v}
}

// TestFusedAttentionViews reads Q, K and V straight from a fused QKV
// projection [B, S, 3·H·D] and writes the heads merged, [B, S, H·D], the
// way the attention rewrite uses the op; the reference materializes the
// head split and merge. It also runs the output-into form on a buffer
// full of garbage, and the causal mask path that skips fully masked
// key blocks.
func TestFusedAttentionViews(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	const b, h, d = 2, 3, 8
	s := 2*attnKBlock + 70
	qkv := randTensor(r, b, s, 3*h*d)
	split := func(which int) *ir.Tensor { // [B, H, S, D] copy
		out := ir.NewTensor(ir.Float, []int{b, h, s, d})
		for bi := 0; bi < b; bi++ {
			for hi := 0; hi < h; hi++ {
				for si := 0; si < s; si++ {
					for di := 0; di < d; di++ {
						out.Float32s()[((bi*h+hi)*s+si)*d+di] = qkv.Float32s()[(bi*s+si)*3*h*d+which*h*d+hi*d+di]
					}
				}
			}
		}
		return out
	}
	view := func(which int) []int64 {
		return View{Offset: which * h * d, Shape: []int{b, h, s, d}, Strides: []int{s * 3 * h * d, d, 3 * h * d, 1}}.Ints()
	}
	causal := ir.NewTensor(ir.Bool, []int{1, 1, s, s})
	for i := 0; i < s; i++ {
		for j := i + 1; j < s; j++ {
			causal.Bools()[i*s+j] = true
		}
	}
	outView := View{Shape: []int{b, h, s, d}, Strides: []int{s * h * d, d, h * d, 1}}
	for _, masked := range []bool{false, true} {
		q, k, v := split(0), split(1), split(2)
		attrs := []*ir.Attribute{fAttr("scale", 0.3), intsAttr("q_view", view(0)), intsAttr("k_view", view(1)), intsAttr("v_view", view(2)),
			intsAttr("out_shape", []int64{b, int64(s), h * d}), intsAttr("out_view", outView.Ints())}
		in := []*ir.Tensor{qkv, qkv, qkv}
		var mask *ir.Tensor
		if masked {
			mask = causal
			in = append(in, mask)
			attrs = append(attrs, sAttr("mask_kind", MaskBoolTrueMasks))
		}
		kind := ""
		if masked {
			kind = MaskBoolTrueMasks
		}
		ref := refAttention(t, q, k, v, mask, 0.3, false, kind, float32(math.Inf(-1)), 1) // [B, H, S, D]
		n := attnNode(attrs...)
		vals, err := inferFusedAttention(n, 1, []Value{{Type: Known(ir.Float, qkv.Shape)}, {Type: Known(ir.Float, qkv.Shape)}, {Type: Known(ir.Float, qkv.Shape)}, maskValue(mask)})
		if err != nil || !SameShape(mustConcrete(t, vals[0].Type.Shape), []int{b, s, h * d}) {
			t.Fatalf("infer %v, %v", vals, err)
		}
		for _, threads := range []int{1, 3} {
			out := ir.NewTensor(ir.Float, []int{b, s, h * d})
			for i := range out.Float32s() {
				out.Float32s()[i] = float32(math.NaN()) // garbage the kernel must overwrite
			}
			if err := runFusedAttentionInto(&Context{Threads: threads}, n, in, []*ir.Tensor{out}); err != nil {
				t.Fatal(err)
			}
			for bi := 0; bi < b; bi++ {
				for hi := 0; hi < h; hi++ {
					for si := 0; si < s; si++ {
						for di := 0; di < d; di++ {
							g := out.Float32s()[(bi*s+si)*h*d+hi*d+di]
							w := ref.Float32s()[((bi*h+hi)*s+si)*d+di]
							if !closeF32(g, w) {
								t.Fatalf("masked %v threads %d: [%d %d %d %d] = %g, want %g", masked, threads, bi, hi, si, di, g, w)
							}
						}
					}
				}
			}
		}
	}
}

func maskValue(m *ir.Tensor) Value {
	if m == nil {
		return Value{}
	}
	return Value{Type: Known(m.DType, m.Shape)}
}

func mustConcrete(t *testing.T, s ir.Shape) []int {
	t.Helper()
	dims, ok := s.Concrete()
	if !ok {
		t.Fatalf("shape %v not concrete", s)
	}
	return dims
}

func TestFusedAttentionViewErrors(t *testing.T) {
	x := randTensor(rand.New(rand.NewSource(1)), 2, 4)
	cases := []struct {
		name  string
		attrs []*ir.Attribute
		want  string
	}{
		{"view past the data", []*ir.Attribute{intsAttr("q_view", View{Offset: 1, Shape: []int{2, 4}, Strides: []int{4, 1}}.Ints())}, "does not fit"},
		{"view rank 1", []*ir.Attribute{intsAttr("q_view", []int64{0, 8, 1})}, "rank 1"},
		{"out_view without out_shape", []*ir.Attribute{intsAttr("out_view", Contiguous([]int{2, 4}).Ints())}, "go together"},
		{"out_view overlapping", []*ir.Attribute{intsAttr("out_shape", []int64{2, 4}), intsAttr("out_view", View{Shape: []int{2, 4}, Strides: []int{1, 1}}.Ints())}, "exactly once"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runFusedAttention(&Context{Threads: 1}, attnNode(c.attrs...), []*ir.Tensor{x, x, x})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// BenchmarkFusedAttentionThreads runs seed 000's attention at S=2048 (12
// heads of 64) on 1 and 2 threads.
func BenchmarkFusedAttentionThreads(b *testing.B) {
	const s, h, d = 2048, 12, 64
	r := rand.New(rand.NewSource(1))
	q, k, v := randTensor(r, 1, h, s, d), randTensor(r, 1, h, s, d), randTensor(r, 1, h, s, d)
	out := ir.NewTensor(ir.Float, []int{1, h, s, d})
	n := attnNode(fAttr("scale", 0.125))
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			// Scratch reused across runs, as the executor's arena does.
			var bufs [][]float32
			used := 0
			ctx := &Context{Threads: threads, Scratch: func(n int) []float32 {
				if used == len(bufs) {
					bufs = append(bufs, make([]float32, n))
				}
				used++
				return bufs[used-1][:n]
			}}
			for i := 0; i < b.N; i++ {
				used = 0
				if err := runFusedAttentionInto(ctx, n, []*ir.Tensor{q, k, v}, []*ir.Tensor{out}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(4*float64(h*s*s*d)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// bf16Near reports whether g, an output of the fused attention's bf16
// path, is within the tolerance the attention tests hold bf16 to against
// a float64 reference: 2.5e-2 + 2e-2·|want|. Q, K, V and the
// probabilities keep 8 significant bits, and a score's error grows with
// its size: on 1031 queries and keys of d = 16, scale 0.5 (the causal and
// full cases of TestFusedAttentionExtensions' shapes, seeds 11 to 13) the
// errors were 1.0–1.5e-3 rms and up to 1.06–1.77e-2 over each case's 8248
// outputs, with the running shifts at the rows' maxima or above them
// (attnShiftHeadroom) alike (2026-11-25).
func bf16Near(g float32, w float64) bool {
	return math.Abs(float64(g)-w) <= 2.5e-2+2e-2*math.Abs(w)
}

// TestFusedAttentionScoresKernel checks which scores kernel plans choose,
// in fp32 and bf16, and their results against the float64 reference: the
// base-2 kernels (less FMA work in the exponential) with no mask and with
// a bool per-key mask (0 and -inf in either unit), the natural ones with
// an additive per-key mask, whose large offsets (-1e4 and float32's
// minimum on padding keys, some rows seeing only padding) must not be
// converted; the rising case makes the running max climb by ~40 over the
// keys, so that the base-2 kernel stops and its shifts are raised
// (raiseShiftBase2). bf16 is held to bf16Near, as elsewhere.
func TestFusedAttentionScoresKernel(t *testing.T) {
	if !tileLoop {
		t.Skip("the scores kernels need the AVX-512 tile")
	}
	const b, h, d = 2, 2, 16
	s := attnKBlock + 40
	cases := []struct {
		name   string
		mask   string // "", "bool", "additive"
		pad    float32
		rising bool
		base2  bool
	}{
		{name: "no mask", base2: true},
		{name: "no mask, rising scores", rising: true, base2: true},
		{name: "bool per-key mask", mask: "bool", base2: true},
		{name: "additive per-key mask, -1e4 padding", mask: "additive", pad: -1e4},
		{name: "additive per-key mask, float32 minimum padding", mask: "additive", pad: -math.MaxFloat32},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewSource(5))
			q, k, v := randTensor(r, b, h, s, d), randTensor(r, b, h, s, d), randTensor(r, b, h, s, d)
			if c.rising {
				for i, qd := 0, q.Float32s(); i < len(qd); i += d {
					qd[i] = 8
				}
				for i, kd := 0, k.Float32s(); i < len(kd); i += d {
					kd[i] = 40 * float32((i/d)%s) / float32(s)
				}
			}
			// Inputs exact in bf16: with scores up to 80, rounding them to
			// bf16 alone moves outputs past bf16's tolerance (either unit).
			q, k, v = bf16Tensor(q), bf16Tensor(k), bf16Tensor(v)
			attrs := []*ir.Attribute{fAttr("scale", 0.25), iAttr("causal", 1)}
			in := []*ir.Tensor{q, k, v}
			var mask *ir.Tensor
			kind := ""
			switch c.mask {
			case "bool":
				mask, kind = randBools(r, 0.3, b, 1, 1, s), MaskBoolTrueMasks
				for i := 0; i < b; i++ {
					mask.Bools()[i*s] = false // every query sees a key
				}
			case "additive":
				mask, kind = randTensor(r, b, 1, 1, s), MaskAdditive
				for i, m := range mask.Float32s() {
					if i%s < 20 { // left padding: the first 20 rows see nothing else
						mask.Float32s()[i] = m + c.pad
					}
				}
			}
			if mask != nil {
				in = append(in, mask)
				attrs = append(attrs, sAttr("mask_kind", kind))
			}
			// The reference's causal cut: a bool mask of the cut or'ed
			// with the bool mask, or -inf added to the additive one.
			cut := ir.NewTensor(ir.Bool, []int{b, 1, s, s})
			refMask, refKind := cut, MaskBoolTrueMasks
			if c.mask == "additive" {
				refMask, refKind = ir.NewTensor(ir.Float, []int{b, 1, s, s}), MaskAdditive
			}
			for bi := 0; bi < b; bi++ {
				for i := 0; i < s; i++ {
					for j := 0; j < s; j++ {
						at := (bi*s+i)*s + j
						switch c.mask {
						case "additive":
							refMask.Float32s()[at] = mask.Float32s()[bi*s+j]
							if j > i {
								refMask.Float32s()[at] = float32(math.Inf(-1))
							}
						case "bool":
							cut.Bools()[at] = j > i || mask.Bools()[bi*s+j]
						default:
							cut.Bools()[at] = j > i
						}
					}
				}
			}
			want := refAttention(t, q, k, v, refMask, 0.25, false, refKind, float32(math.Inf(-1)), 1)
			p, err := planFusedAttention(attnNode(attrs...), in)
			if err != nil {
				t.Fatal(err)
			}
			for _, prec := range []Precision{PrecisionFP32, PrecisionBF16} {
				if prec == PrecisionBF16 && !kernel.BF16 {
					continue
				}
				close := closeF64
				if prec == PrecisionBF16 {
					close = bf16Near
				}
				for _, threads := range []int{1, 2} {
					got := ir.NewTensor(ir.Float, p.out)
					p.run(&Context{Threads: threads, Precision: prec}, got.Float32s(), nil, true)
					if !p.scoresExp || p.scoresBase2 != c.base2 || p.bf16 != (prec == PrecisionBF16) {
						t.Fatalf("%v: bf16 %v, scoresExp %v, scoresBase2 %v; want true, %v", prec, p.bf16, p.scoresExp, p.scoresBase2, c.base2)
					}
					for i, g := range got.Float32s() {
						if w := want.Float32s()[i]; !close(g, float64(w)) {
							t.Fatalf("%v, threads %d: Y[%d] = %g, want %g", prec, threads, i, g, w)
						}
					}
				}
			}
		})
	}
}
