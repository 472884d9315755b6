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
