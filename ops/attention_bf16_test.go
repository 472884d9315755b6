package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// rb rounds x to bf16 and back.
func rb(x float32) float64 { return float64(blas.BF16Float(blas.BF16Round(x))) }

// half returns the low (hi false) or high bf16 of a pair word as a float.
func half(w uint32, hi bool) float64 {
	if hi {
		return float64(blas.BF16Float(uint16(w >> 16)))
	}
	return float64(blas.BF16Float(uint16(w)))
}

// TestAttnBF16Products builds one head's bf16 operands with the packers
// (strided like a fused QKV projection's heads, odd sizes so that every
// padding path runs) and checks the scores tiles and the context update
// against float64 sums of the same rounded operands. Head size 64 packs K
// with the vector conversion, 34 with the scalar one; Dv 32 packs Vᵀ with
// the vector scatter, 13 with the scalar loop.
func TestAttnBF16Products(t *testing.T) {
	if !kernel.BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	for _, c := range [][2]int{{34, 13}, {64, 32}} {
		attnBF16Products(t, c[0], c[1])
	}
}

func attnBF16Products(t *testing.T, d, dv int) {
	r := rand.New(rand.NewSource(12))
	const sq, sk, rs = 37, 45, 240 // rows of a wide projection output
	const scale = 0.17
	data := make([]float32, 3*sk*rs)
	for i := range data {
		data[i] = float32(r.NormFloat64())
	}
	qOff, kOff, vOff := 0, 70, 140+d-34 // three heads' columns in the same rows
	if vOff+dv > rs {
		t.Fatalf("row of %d floats too short", rs)
	}
	dw, skw := (d+1)/2, (sk+1)/2
	skPad, dvPad, sqPad := ceilTo(sk, 8), ceilTo(dv, 8), ceilTo(sq, attnBF16Lanes)
	kw := make([]uint32, skPad*dw)
	vw := make([]uint32, dvPad*skw)
	qw := make([]uint32, sqPad*dw)
	for i := range kw {
		kw[i] = 0xdeadbeef // padding must be overwritten
	}
	for i := range vw {
		vw[i] = 0xdeadbeef
	}
	// Pack in two tasks each, as the kernel's chunks do.
	packAttnKBF16(kw, data, kOff, rs, 1, sk, d, 0, 24)
	packAttnKBF16(kw, data, kOff, rs, 1, sk, d, 24, sk)
	packAttnVBF16(vw, data, vOff, rs, 1, sk, dv, 0, 24)
	packAttnVBF16(vw, data, vOff, rs, 1, sk, dv, 24, sk)
	packQBF16(qw, data, qOff, rs, 1, sq, d, scale, 0, 32)
	packQBF16(qw, data, qOff, rs, 1, sq, d, scale, 32, sq)
	K := func(key, j int) float64 {
		if key >= sk || j >= d {
			return 0
		}
		return rb(data[kOff+key*rs+j])
	}
	for key := 0; key < skPad; key++ {
		for p := 0; p < dw; p++ {
			w := kw[key*dw+p]
			if half(w, false) != K(key, 2*p) || half(w, true) != K(key, 2*p+1) {
				t.Fatalf("d=%d: Kw[%d][%d] = %#08x", d, key, p, w)
			}
		}
	}
	// Scores for the first panel (queries 0..31), keys 0..skPad.
	st := make([]float32, skPad*attnBF16Lanes)
	scoresBF16(st, kw, qw[:attnBF16Lanes*dw], d, 0, skPad)
	for key := 0; key < skPad; key++ {
		for c := 0; c < attnBF16Lanes; c++ {
			var want float64
			for j := 0; j < d; j++ {
				want += K(key, j) * rb(scale*data[qOff+c*rs+j])
			}
			if got := float64(st[key*attnBF16Lanes+c]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("d=%d: score key %d query %d = %g, want %g", d, key, c, got, want)
			}
		}
	}
	// Context: the last panel (queries 32..36) against keys 8..8+cols with
	// an odd count, into an accumulator that already holds values.
	const j0, cols, ldAcc = 8, 29, 40
	P := make([]float32, cols*attnBF16Lanes)
	for i := range P {
		P[i] = r.Float32()
	}
	acc := make([]float32, dvPad*ldAcc)
	for i := range acc {
		acc[i] = r.Float32()
	}
	old := append([]float32(nil), acc...)
	pw := make([]uint32, (cols+1)/2*attnBF16Lanes)
	contextBF16(acc, ldAcc, P, pw, vw, sk, dvPad, j0, cols)
	for j := 0; j < dvPad; j++ {
		for c := 0; c < ldAcc; c++ {
			want := float64(old[j*ldAcc+c])
			if c < attnBF16Lanes && j < dv {
				for key := 0; key < cols; key++ {
					want += rb(P[key*attnBF16Lanes+c]) * rb(data[vOff+(j0+key)*rs+j])
				}
			}
			if got := float64(acc[j*ldAcc+c]); math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("d=%d: acc[%d][%d] = %g, want %g", d, j, c, got, want)
			}
		}
	}
}

// TestFusedAttentionBF16Views runs the fused kernel in bf16 on Q, K and V
// read from a fused QKV projection (head sizes 64, the vector K packing,
// and 34 with Dv 13, odd pairs), over several key blocks with a causal
// mask, against the fp32 kernel: within 1% of the output's scale, and not
// equal to it (bf16 really ran).
func TestFusedAttentionBF16Views(t *testing.T) {
	if !kernel.BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	r := rand.New(rand.NewSource(13))
	for _, c := range []struct{ d, dv int }{{64, 64}, {34, 13}} {
		const h = 2
		s := attnKBlock + 70
		width := h * (2*c.d + c.dv)
		qkv := randTensor(r, 1, s, width)
		view := func(off, d int) []int64 {
			return View{Offset: off, Shape: []int{1, h, s, d}, Strides: []int{s * width, d, width, 1}}.Ints()
		}
		n := attnNode(fAttr("scale", 0.125), iAttr("causal", 1),
			intsAttr("q_view", view(0, c.d)), intsAttr("k_view", view(h*c.d, c.d)), intsAttr("v_view", view(2*h*c.d, c.dv)))
		in := []*ir.Tensor{qkv, qkv, qkv}
		want, err := runFusedAttention(&Context{Threads: 2}, n, in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := runFusedAttention(&Context{Threads: 2, Precision: PrecisionBF16}, n, in)
		if err != nil {
			t.Fatal(err)
		}
		d, scale := maxAbsDiff(got[0], want[0])
		t.Logf("D=%d Dv=%d: bf16 vs fp32 max diff %.3g of max |y| %.3g", c.d, c.dv, d, scale)
		if d == 0 || d > 1e-2*scale {
			t.Errorf("D=%d Dv=%d: bf16 vs fp32 max diff %g, want in (0, %g]", c.d, c.dv, d, 1e-2*scale)
		}
	}
}

// bf16Tensor returns a copy of t with every element rounded to bf16.
func bf16Tensor(t *ir.Tensor) *ir.Tensor {
	out := ir.NewTensor(ir.Float, t.Shape)
	for i, v := range t.Float32s() {
		out.Float32s()[i] = float32(rb(v))
	}
	return out
}

// TestFusedAttentionBF16FastPath runs the bf16 attention's fast path
// (kernel.ScoresExpBF16x32: plain, causal, per-key masks) and the blocks
// it leaves to the scores-then-softmax path (those a per-query mask
// touches) on operands
// already rounded to bf16, with a scale of a power of two (so that
// scale·Q rounds to itself), against the float64 reference of those
// operands: the only rounding left is the probabilities' to bf16, half a
// bf16 ulp of each, so the output is within 2⁻⁸·max|V|. The cases span
// several key blocks, partial slivers of keys, odd head sizes, and scores
// that rise more than attnRescaleSlack within and across blocks (the
// shift raised under the kernel's stored pairs).
func TestFusedAttentionBF16FastPath(t *testing.T) {
	if !kernel.BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	const scale = 0.125
	negInf := float32(math.Inf(-1))
	cases := []struct {
		name     string
		b, h     int
		sq, sk   int
		d, dv    int
		causal   bool
		mask     string // "": none; "keys": bool [B,1,1,Sk]; "add": additive [B,1,1,Sk]; "rows": bool [Sq,Sk]; "lengths": kv_lengths
		rising   bool   // scores that rise by far more than the slack along the keys
		wantFast bool
	}{
		{name: "plain", b: 1, h: 2, sq: 70, sk: attnKBlock + 77, d: 64, dv: 64},
		{name: "plain odd sizes", b: 2, h: 1, sq: 33, sk: 45, d: 34, dv: 13},
		{name: "causal", b: 1, h: 2, sq: attnKBlock + 77, sk: attnKBlock + 77, d: 64, dv: 64, causal: true},
		{name: "causal odd", b: 1, h: 1, sq: 61, sk: 61, d: 34, dv: 13, causal: true},
		{name: "key padding", b: 2, h: 2, sq: 40, sk: attnKBlock + 51, d: 64, dv: 32, mask: "keys"},
		{name: "causal, key padding", b: 2, h: 1, sq: 90, sk: 90, d: 32, dv: 32, causal: true, mask: "keys"},
		{name: "kv_lengths", b: 3, h: 1, sq: 40, sk: attnKBlock + 30, d: 64, dv: 64, mask: "lengths"},
		{name: "causal, kv_lengths", b: 2, h: 1, sq: 77, sk: 77, d: 32, dv: 16, causal: true, mask: "lengths"},
		{name: "additive per key", b: 2, h: 1, sq: 37, sk: 100, d: 64, dv: 16, mask: "add"},
		{name: "rising scores", b: 1, h: 1, sq: 64, sk: 2*attnKBlock + 9, d: 64, dv: 64, rising: true},
		{name: "rising scores, causal", b: 1, h: 1, sq: 2*attnKBlock + 9, sk: 2*attnKBlock + 9, d: 64, dv: 64, causal: true, rising: true},
		{name: "per-query mask (scores, then softmax)", b: 1, h: 2, sq: 50, sk: 70, d: 64, dv: 64, mask: "rows"},
	}
	r := rand.New(rand.NewSource(21))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := randTensor(r, c.b, c.h, c.sq, c.d)
			k := randTensor(r, c.b, c.h, c.sk, c.d)
			if c.rising { // key j's scores grow with j: the running max rises by ~40 over the keys
				for i, qd := 0, q.Float32s(); i < len(qd); i += c.d {
					qd[i] = 8
				}
				for i, kd := 0, k.Float32s(); i < len(kd); i += c.d {
					kd[i] = 40 * float32((i/c.d)%c.sk) / float32(c.sk)
				}
			}
			q, k = bf16Tensor(q), bf16Tensor(k)
			v := bf16Tensor(randTensor(r, c.b, c.h, c.sk, c.dv))
			attrs := []*ir.Attribute{fAttr("scale", scale)}
			in := []*ir.Tensor{q, k, v}
			var refMask *ir.Tensor // the mask the reference applies (the causal cut included)
			kind := ""
			switch c.mask {
			case "keys", "rows":
				shape := []int{c.b, 1, 1, c.sk}
				if c.mask == "rows" {
					shape = []int{c.sq, c.sk}
				}
				m := randBools(r, 0.3, shape...)
				if c.mask == "keys" {
					for b := 0; b < c.b; b++ { // padding at the end too, past a key block
						for j := c.sk - 5; j < c.sk; j++ {
							m.Bools()[b*c.sk+j] = true
						}
						m.Bools()[b*c.sk] = false // every query sees a key
					}
				}
				in, refMask, kind = append(in, m), m, MaskBoolTrueMasks
			case "lengths":
				lens := []int64{int64(c.sk), int64(c.sk) - 13, 5}[:c.b]
				m := ir.NewTensor(ir.Bool, []int{c.b, 1, 1, c.sk})
				for b, n := range lens {
					for j := int(n); j < c.sk; j++ {
						m.Bools()[b*c.sk+j] = true
					}
				}
				in, refMask, kind = append(in, nil, ir.FromSlice([]int{c.b}, lens)), m, MaskBoolTrueMasks
			case "add":
				m := randTensor(r, c.b, 1, 1, c.sk)
				m.Float32s()[3] = negInf
				in, refMask, kind = append(in, m), m, MaskAdditive
			}
			if kind != "" && c.mask != "lengths" {
				attrs = append(attrs, sAttr("mask_kind", kind))
			}
			if c.causal {
				attrs = append(attrs, iAttr("causal", 1))
				cm := ir.NewTensor(ir.Bool, []int{c.b, 1, c.sq, c.sk})
				for b := 0; b < c.b; b++ {
					for i := 0; i < c.sq; i++ {
						for j := 0; j < c.sk; j++ {
							masked := j > i
							if refMask != nil {
								masked = masked || refMask.Bools()[b*c.sk+j]
							}
							cm.Bools()[(b*c.sq+i)*c.sk+j] = masked
						}
					}
				}
				refMask, kind = cm, MaskBoolTrueMasks
			}
			want := refAttention(t, q, k, v, refMask, scale, false, kind, negInf, 1)
			n := attnNode(attrs...)
			p, err := planFusedAttention(n, in)
			if err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 2} {
				got := ir.NewTensor(ir.Float, p.out)
				p.run(&Context{Threads: threads, Precision: PrecisionBF16}, got.Float32s(), nil, true)
				if !p.bf16 || !p.scoresExp {
					t.Fatalf("bf16 %v, fast path %v; want both", p.bf16, p.scoresExp)
				}
				var maxV float64
				for _, x := range v.Float32s() {
					maxV = max(maxV, math.Abs(float64(x)))
				}
				tol := 0x1p-8*maxV + 1e-5
				d, _ := maxAbsDiff(got, want)
				if !(d <= tol) {
					t.Fatalf("threads %d: max |bf16 - float64 reference| %g, want ≤ %g", threads, d, tol)
				}
			}
		})
	}
}
