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
//	Vw  Vᵀ as A-slivers of 8 value dims over the key pairs (Dv padded to 8):
//	    Vw[s·8·skw + p·8 + r] = (V[2p][8s+r], V[2p+1][8s+r])
//	Qw  scale·Qᵀ as B-panels of 32 queries over D pairs:
//	    Qw[n·32·dw + p·32 + c] = scale·(Q[32n+c][2p], Q[32n+c][2p+1])
//	Pw  one panel's probabilities as B pairs over its block's keys:
//	    Pw[p·32 + c] = (P[2p][c], P[2p+1][c])  (kernel.PairRowsBF16x32)
//
// The scores tile of 8 keys × 32 queries is Kw's 8 rows (read in place)
// times a Qw panel, stored transposed as the fp32 kernel's; the context
// update is accᵀ += a Vw sliver (from the block's first key pair) times
// Pw. Key blocks start at multiples of 8, so at whole pairs of Vw. Vw is
// a sliver layout rather than rows so that packing it needs no transpose
// of words: two rows of V become 16 pair words for 2 slivers.

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
// into dst (Vw), zeros in the value dims past dv and the key past sk.
func packAttnVBF16(dst []uint32, data []float32, off, rs, cs, sk, dv, k0, k1 int) {
	skw := (sk + 1) / 2
	dvPad := ceilTo(dv, 8)
	vec := 0 // value dims the vector kernel packs, for whole pairs of keys
	if cs == 1 && kernel.BF16 {
		vec = dv &^ 15
	}
	if pairs := (k1 - k0) / 2; vec > 0 && pairs > 0 {
		_ = data[off+(k0+2*pairs-1)*rs+vec-1]
		_ = dst[(vec/8-1)*8*skw+(k0/2+pairs)*8-1]
		kernel.PairSliversBF16(&dst[k0/2*8], &data[off+k0*rs], rs, pairs, vec/8, 8*skw)
	}
	at := func(key, j int) float32 {
		if key >= sk || j >= dv {
			return 0
		}
		return data[off+key*rs+j*cs]
	}
	for key := k0; key < k1; key += 2 {
		first := vec
		if key+1 >= k1 {
			first = 0 // an odd last key: every column here
		}
		p := key / 2
		for j := first; j < dvPad; j++ {
			dst[(j/8)*8*skw+p*8+j%8] = bf16Pair(at(key, j), at(key+1, j))
		}
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
		if lanes == attnBF16Lanes && cs == 1 && d%2 == 0 && kernel.BF16 && 31*rs < 1<<31 && d > 0 {
			_ = data[off+(pn*attnBF16Lanes+31)*rs+d-1]
			kernel.GatherPairsBF16x32(&pan[0], &data[off+pn*attnBF16Lanes*rs], rs, d/2, scale)
			continue
		}
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
// (⌈cols/2⌉·32 words), then multiplied by Vw's slivers (sk keys) from j0
// (contextPairsBF16).
func contextBF16(acc []float32, ldAcc int, st []float32, pw, vw []uint32, sk, dvPad, j0, cols int) {
	_ = st[cols*attnBF16Lanes-1]
	_ = pw[(cols+1)/2*attnBF16Lanes-1]
	kernel.PairRowsBF16x32(&pw[0], &st[0], cols)
	contextPairsBF16(acc, ldAcc, pw, vw, sk, dvPad, j0, cols)
}

// contextPairsBF16 adds P·V for keys [j0, j0+cols) to the transposed
// accumulator acc (as contextBF16) from the panel's probabilities already
// in pairs, pw (⌈cols/2⌉·32 words; with cols odd the last pair's high
// halves are 0): what kernel.ScoresExpBF16x32 stores.
func contextPairsBF16(acc []float32, ldAcc int, pw, vw []uint32, sk, dvPad, j0, cols int) {
	skw := (sk + 1) / 2
	kp := (cols + 1) / 2
	_ = pw[kp*attnBF16Lanes-1]
	_ = vw[(dvPad/8-1)*8*skw+(j0/2+kp)*8-1]
	_ = acc[(dvPad-1)*ldAcc+attnBF16Lanes-1]
	kernel.BF16Gemm8x32LoopA8(kp, &vw[j0/2*8], 8, &pw[0], &acc[0], ldAcc, dvPad/8, 8*skw, 0, 8*ldAcc, true)
}
