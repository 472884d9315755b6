package blas

import (
	"math"
	"unsafe"

	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// The bf16 GEMM: both operands are rounded to bfloat16 (the top 16 bits
// of a float32: 8 exponent bits, 8 significant bits) as they are packed,
// and the products are accumulated in fp32. Every product of two bf16 is
// exact in fp32, so the error comes from the rounding of the operands
// (relative 2^-9 each) and the fp32 sums. On CPUs with AVX512_BF16
// (kernel.BF16) the micro-kernel is VDPBF16PS, two multiply-adds per fp32
// lane, twice the fp32 FMA's flops; elsewhere a Go kernel computes the
// same result slowly (callers that want speed check BF16Fast).
//
// Layout. A k pair (B[2p][j], B[2p+1][j]) or (A[i][2p], A[i][2p+1]) is one
// 32-bit word, the even element in the low half; packed buffers are the
// []float32 buffers of the fp32 GEMM holding these words. An A block is
// row-major: each row's pairs at a row stride of bf16Stride(kb) words,
// rows padded with zeros to a multiple of mr. A B panel is kp×nr words
// (kp = ⌈kb/2⌉ pairs), word p·nr + j the pair of column j.

// BF16Fast reports whether the bf16 GEMM runs on the CPU's bf16
// instructions (AVX512_BF16) rather than the portable Go kernel.
func BF16Fast() bool { return kernel.BF16 }

// PackBBF16 packs op(B) (k×n, row stride ldb) rounded to bf16, nearest
// even, for SgemmPacked, which then multiplies in bf16 with fp32
// accumulation.
func PackBBF16(transB bool, k, n int, b []float32, ldb int) *PackedB {
	return packWhole("PackBBF16", bf16Tiles{}, transB, k, n, b, ldb)
}

// SgemmBF16 is SgemmThreads in bf16: C = alpha·op(A)·op(B) + beta·C with
// alpha·op(A) and op(B) rounded to bf16 as they are packed, products
// accumulated in fp32, and beta·C in fp32.
func SgemmBF16(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm("SgemmBF16", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if threads < 1 {
		threads = Threads()
	}
	gemmGo(bf16Tiles{}, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc, threads, nil, 0, nil)
}

// SgemmBiasBF16 is SgemmBias in bf16 (see SgemmBF16); the bias is added,
// and the epilogue runs, in fp32.
func SgemmBiasBF16(threads int, transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int, epi Epilogue) {
	gemmBias("SgemmBiasBF16", bf16Tiles{}, threads, transA, transB, m, n, k, a, lda, b, ldb, bias, c, ldc, epi)
}

// BF16Round returns x rounded to bf16 (nearest even) as its 16 bits, as
// the CPU's VCVTNE2PS2BF16 does: NaN stays NaN (quieted), subnormals
// become zeros of their sign.
func BF16Round(x float32) uint16 {
	b := math.Float32bits(x)
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return uint16(b>>16) | 0x40
	case b&0x7f800000 == 0: // zero or subnormal
		return uint16(b>>16) & 0x8000
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16Float returns the float32 value of a bf16.
func BF16Float(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// bf16Tiles is the bf16 GEMM's packing and micro-kernel (see the layout
// above); portable forces the Go kernel (for tests).
type bf16Tiles struct{ portable bool }

// bf16Stride is the row stride, in words, of a packed A block over kb of
// k: the pairs rounded up to a 64-byte line.
func bf16Stride(kb int) int { return ((kb+1)/2 + 15) / 16 * 16 }

func (bf16Tiles) aLen(_ bool, _ float32, mc, kb int) int {
	return (mc + mr - 1) / mr * mr * bf16Stride(kb)
}
func (bf16Tiles) bLen(nPanels, kb int) int { return nPanels * nr * ((kb + 1) / 2) }

// words views a float32 buffer as the 32-bit words it holds.
func words(f []float32) []uint32 {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&f[0])), len(f))
}

// pairWord packs two bf16 into a word, lo in the low half.
func pairWord(lo, hi float32) uint32 {
	return uint32(BF16Round(lo)) | uint32(BF16Round(hi))<<16
}

// cvtRow stores the k floats of src as ⌈k/2⌉ pair words (a zero high half
// when k is odd), with the vector conversion where the CPU has it.
func cvtRow(dst []uint32, src []float32) {
	k := len(src)
	done := 0
	if kernel.BF16 && k >= 32 {
		done = k &^ 31
		kernel.CvtBF16(&dst[0], &src[0], done)
	}
	for p := done; p+1 < k; p += 2 {
		dst[p/2] = pairWord(src[p], src[p+1])
	}
	if k%2 == 1 {
		dst[k/2] = uint32(BF16Round(src[k-1]))
	}
}

func (bf16Tiles) packA(trans bool, alpha float32, a []float32, lda, i0, mb, p0, kb int, dst []float32) aBlock {
	w := bf16Stride(kb)
	kp := (kb + 1) / 2
	d := words(dst)
	for r := 0; r < (mb+mr-1)/mr*mr; r++ {
		row := d[r*w : r*w+kp]
		switch {
		case r >= mb:
			clear(row)
		case !trans && alpha == 1:
			cvtRow(row, a[(i0+r)*lda+p0:(i0+r)*lda+p0+kb])
		default:
			at := func(p int) float32 {
				if p >= kb {
					return 0
				}
				if trans {
					return alpha * a[(p0+p)*lda+i0+r]
				}
				return alpha * a[(i0+r)*lda+p0+p]
			}
			for p := range row {
				row[p] = pairWord(at(2*p), at(2*p+1))
			}
		}
	}
	return aBlock{buf: dst, bufLd: w}
}

func (bf16Tiles) packB(trans bool, b []float32, ldb, p0, kb, j0, nb int, dst []float32, plo, phi int) {
	kp := (kb + 1) / 2
	d := words(dst)
	at := func(p, j int) float32 { // op(B)[p0+p][j], 0 past kb
		switch {
		case p >= kb:
			return 0
		case trans:
			return b[j*ldb+p0+p]
		}
		return b[(p0+p)*ldb+j]
	}
	for jp := plo; jp < phi; jp++ {
		pan := d[jp*kp*nr : (jp+1)*kp*nr]
		jb := j0 + jp*nr
		cols := min(nr, j0+nb-jb)
		if cols < nr {
			clear(pan)
		}
		for p := 0; p < kp; p++ {
			out := pan[p*nr : p*nr+cols]
			for j := range out {
				out[j] = pairWord(at(2*p, jb+j), at(2*p+1, jb+j))
			}
		}
	}
}

func (t bf16Tiles) tile(kb int, ab aBlock, ip int, bp []float32, c []float32, ldc int, add bool, bias, pf []float32) {
	as, w := ab.sliver(ip, kb)
	kp := (kb + 1) / 2
	if kernel.BF16 && !t.portable {
		_ = c[(mr-1)*ldc+nr-1]
		kernel.BF16Gemm8x32(kp, &words(as)[0], w, &words(bp)[0], &c[0], ldc, firstOrNil(bias), add, firstOrNil(pf), len(pf)/floatsPerLine)
		return
	}
	kernelGoBF16(kp, words(as), w, words(bp), c, ldc, add)
	if bias != nil {
		addBias(c, ldc, bias)
	}
}

// kernelGoBF16 is the portable bf16 micro-kernel: C[0:mr, 0:nr] (row
// stride ldc) += (or, when add is false, =) the product of mr rows of A
// (pair words at a[r·lda + p]) and a packed B panel (b[p·nr + j]) over kp
// pairs, accumulating in fp32 like VDPBF16PS (the odd product first).
func kernelGoBF16(kp int, a []uint32, lda int, b []uint32, c []float32, ldc int, add bool) {
	var acc [maxTile]float32
	half := func(w uint32, hi bool) float32 {
		if hi {
			return math.Float32frombits(w & 0xffff0000)
		}
		return math.Float32frombits(w << 16)
	}
	for r := 0; r < mr; r++ {
		row := acc[r*nr : r*nr+nr]
		for p := 0; p < kp; p++ {
			av := a[r*lda+p]
			a0, a1 := half(av, false), half(av, true)
			for j, bv := range b[p*nr : p*nr+nr] {
				row[j] += a1 * half(bv, true)
				row[j] += a0 * half(bv, false)
			}
		}
	}
	storeTile(acc[:], c, ldc, add)
}
