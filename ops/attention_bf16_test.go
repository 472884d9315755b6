package ops

import (
	"math"
	"math/rand"
	"testing"

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
// with the vector conversion, 34 with the scalar one.
func TestAttnBF16Products(t *testing.T) {
	if !kernel.BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	for _, d := range []int{34, 64} {
		attnBF16Products(t, d)
	}
}

func attnBF16Products(t *testing.T, d int) {
	r := rand.New(rand.NewSource(12))
	const sq, sk, dv, rs = 37, 45, 13, 220 // rows of a wide projection output
	const scale = 0.17
	data := make([]float32, 3*sk*rs)
	for i := range data {
		data[i] = float32(r.NormFloat64())
	}
	qOff, kOff, vOff := 0, 70, 140+d-34 // three heads' columns in the same rows
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
