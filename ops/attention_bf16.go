package ops

import (
	"unsafe"

	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// The fused attention kernel's bf16 products (Context.Precision bf16, on
// CPUs with AVX512_BF16): Q, K and V are rounded to bf16 as they are
// packed, the probabilities as they enter the second product, and both
// products accumulate in fp32 (kernel.BF16Gemm8x32Loop); the scores, the
// softmax and the output stay fp32. A k pair is one 32-bit word, its even
// element in the low half. Layout, with dw = ⌈D/2⌉ and skw = ⌈Sk/2⌉:
//
//	Kw  K's rows as pair words over D (keys padded to a multiple of 8):
//	    Kw[key·dw + p] = (K[key][2p], K[key][2p+1])
//	Vw  Vᵀ's rows as pair words over the keys (Dv padded to 8):
//	    Vw[j·skw + p] = (V[2p][j], V[2p+1][j])
//	Qw  scale·Qᵀ as B-panels of 32 queries over D pairs:
//	    Qw[n·32·dw + p·32 + c] = scale·(Q[32n+c][2p], Q[32n+c][2p+1])
//	Pw  one panel's probabilities as B pairs over its block's keys:
//	    Pw[p·32 + c] = (P[2p][c], P[2p+1][c])  (kernel.PairRowsBF16x32)
//
// The scores tile of 8 keys × 32 queries is Kw's 8 rows (read in place)
// times a Qw panel, stored transposed as the fp32 kernel's; the context
// update is accᵀ += Vw's 8 rows (from the block's first key pair) times
// Pw. Key blocks start at multiples of 8, so at whole words of Vw.

// attnBF16Lanes is the bf16 path's query panel width (kernel's 32).
const attnBF16Lanes = 32

// bf16Pair rounds two floats to bf16 and packs them, lo in the low half.
func bf16Pair(lo, hi float32) uint32 {
	return uint32(blas.BF16Round(lo)) | uint32(blas.BF16Round(hi))<<16
}

// wordsOf views float32 scratch as the 32-bit words the bf16 operands are
// kept in.
func wordsOf(f []float32) []uint32 {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&f[0])), len(f))
}

// packAttnKBF16 packs keys [k0, k1) (k0 a multiple of 8) of the sk×d
// matrix at data[off] (element (key, j) at off + key·rs + j·cs) into dst
// (Kw), zeroing the padding keys past sk in the last sliver.
func packAttnKBF16(dst []uint32, data []float32, off, rs, cs, sk, d, k0, k1 int) {
	dw := (d + 1) / 2
	at := func(key, j int) float32 {
		if j >= d {
			return 0
		}
		return data[off+key*rs+j*cs]
	}
	for key := k0; key < k1; key++ {
		row := dst[key*dw : (key+1)*dw]
		if cs == 1 && d%32 == 0 && kernel.BF16 {
			kernel.CvtBF16(&row[0], &data[off+key*rs], d)
			continue
		}
		for p := range row {
			row[p] = bf16Pair(at(key, 2*p), at(key, 2*p+1))
		}
	}
	if k1 == sk {
		clear(dst[sk*dw : ceilTo(sk, 8)*dw])
	}
}

// packAttnVBF16 packs keys [k0, k1) (k0 even) of the transpose of the
// sk×dv matrix at data[off] (element (key, j) at off + key·rs + j·cs)
// into dst (Vw); the rows past dv (padding to 8) are zeroed by the task
// that packs key 0.
func packAttnVBF16(dst []uint32, data []float32, off, rs, cs, sk, dv, k0, k1 int) {
	skw := (sk + 1) / 2
	for key := k0; key < k1; key += 2 {
		base, next := off+key*rs, off+(key+1)*rs
		for j := 0; j < dv; j++ {
			hi := float32(0)
			if key+1 < sk {
				hi = data[next+j*cs]
			}
			dst[j*skw+key/2] = bf16Pair(data[base+j*cs], hi)
		}
	}
	if k0 == 0 {
		clear(dst[dv*skw : ceilTo(dv, 8)*skw])
	}
}

// packQBF16 packs scale·Q[i0:i1] (i0 a multiple of 32) of the sq×d
// matrix at data[off] (element (query, j) at off + query·rs + j·cs) into
// qw (Qw), zero-padding the last panel's lanes past sq.
func packQBF16(qw []uint32, data []float32, off, rs, cs, sq, d int, scale float32, i0, i1 int) {
	dw := (d + 1) / 2
	for pn := i0 / attnBF16Lanes; pn*attnBF16Lanes < i1; pn++ {
		pan := qw[pn*attnBF16Lanes*dw : (pn+1)*attnBF16Lanes*dw]
		lanes := min(attnBF16Lanes, sq-pn*attnBF16Lanes)
		if lanes < attnBF16Lanes {
			clear(pan)
		}
		for c := 0; c < lanes; c++ {
			base := off + (pn*attnBF16Lanes+c)*rs
			for p := 0; p < dw; p++ {
				hi := float32(0)
				if 2*p+1 < d {
					hi = scale * data[base+(2*p+1)*cs]
				}
				pan[p*attnBF16Lanes+c] = bf16Pair(scale*data[base+2*p*cs], hi)
			}
		}
	}
}

// scoresBF16 computes the transposed scores of keys [j0, j0+keys) (keys a
// multiple of 8) against one Qw panel into st (keys × 32, row-major):
// Kw's 8-key slivers read in place, d the head size.
func scoresBF16(st []float32, kw, qpanel []uint32, d, j0, keys int) {
	dw := (d + 1) / 2
	_ = kw[(j0+keys)*dw-1]
	_ = st[keys*attnBF16Lanes-1]
	kernel.BF16Gemm8x32Loop(dw, &kw[j0*dw], dw, &qpanel[0], &st[0], attnBF16Lanes, keys/8, 8*dw, 0, 8*attnBF16Lanes, false)
}

// contextBF16 adds P·V for keys [j0, j0+cols) to the transposed
// accumulator acc (dvPad rows of ldAcc floats, this panel's 32 lanes at
// acc[0]): the panel's probabilities st (cols × 32) are paired into pw
// (⌈cols/2⌉·32 words), then multiplied by Vw's rows (sk keys) from j0.
func contextBF16(acc []float32, ldAcc int, st []float32, pw, vw []uint32, sk, dvPad, j0, cols int) {
	skw := (sk + 1) / 2
	kp := (cols + 1) / 2
	_ = st[cols*attnBF16Lanes-1]
	_ = pw[kp*attnBF16Lanes-1]
	kernel.PairRowsBF16x32(&pw[0], &st[0], cols)
	_ = vw[(dvPad-1)*skw+j0/2+kp-1]
	_ = acc[(dvPad-1)*ldAcc+attnBF16Lanes-1]
	kernel.BF16Gemm8x32Loop(kp, &vw[j0/2], skw, &pw[0], &acc[0], ldAcc, dvPad/8, 8*skw, 0, 8*ldAcc, true)
}
