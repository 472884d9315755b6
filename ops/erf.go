package ops

import (
	"math"

	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Float32 Erf and Gelu (approximate "none"): the elementwise kernels of the
// Erf and Gelu ops on float32 tensors, and of the GELU that PyTorch exports
// as x·0.5·(1 + Erf(x/√2)) once the graph rewrite has made it one Gelu.
//
// erf(x) for |x| ≤ 0.921875 is x + x·p(x²), p of degree 5; above it is
// sign(x)·(1 − erfc(|x|)) with erfc(t) = exp(g(t) − t²), g of degree 8 in
// t − 2.421875 fitted to log erfc(t) + t² on [0.921875, 3.9192059]
// (centred, so that Horner's partial sums stay small; where erfc(t) =
// 2⁻²⁵: past it erf rounds to ±1 in float32 and erfc is taken as 0), t²
// split exactly into two floats for the exponential's argument. Both
// polynomials are minimax fits (Lawson's iteration against mpmath, float32
// coefficients rounded one by one from the top, refitting the rest:
// tools/erffit/erf_fit.py prints them), the first for erf's relative
// error, the second for erfc's. Measured against
// math.Erf over a dense sweep of float32 (erf_test.go, 44 M values): at
// most 1.3 ulp, in the assembly and in the Go versions (the test allows 2).
//
// Gelu(x) = 0.5·x·(1 + erf(x/√2)) takes 1 + erf from the same pieces
// without cancellation: 1 + erf(z) is erfc(|z|) itself for z below
// −0.921875 (and 2 − erfc(z) above 0.921875), so its negative tail keeps
// float32's relative precision where 1 + erf(z) computed after erf would
// lose it: at most 4.2 ulp wherever erfc is not cut to 0 (the test allows
// 5; the rounding of g, about 1.5·10⁻⁷, dominates). Below x = −5.5426
// (x/√2 = −3.9192059) Gelu is −0, its exact value being above −8.3·10⁻⁸
// there (the unfused float32 graph gives 0 or an ulp of 1 times x/2
// there too). Gelu(−Inf) is NaN, as the exported graph computes it
// (−Inf·0).
//
// With AVX-512 (16 lanes) or AVX2+FMA (8 lanes) the kernels are assembly
// (kernel.Erf16, kernel.Erf8) evaluating the same polynomials; elsewhere
// the Go functions below run element by element.
const (
	erfSmallMax = 0.921875
	erfOneAt    = 3.9192059 // erfc(t) = 2^-25: erf(t) rounds to 1 from here on

	erfS0 = 0.12837915
	erfS1 = -0.37612495
	erfS2 = 0.11281816
	erfS3 = -0.026766613
	erfS4 = 0.0049931766
	erfS5 = -0.0005990836

	erfLMid = 2.421875 // g is a polynomial in t − erfLMid

	erfL0 = -1.5289143
	erfL1 = -0.36165035
	erfL2 = 0.05873262
	erfL3 = -0.011561463
	erfL4 = 0.002336692
	erfL5 = -0.00045823987
	erfL6 = 8.4870364e-05
	erfL7 = -1.42990675e-05
	erfL8 = 1.6328249e-06

	invSqrt2 = 0.70710678118654752440
)

// erfSmall is erf(x) for |x| ≤ erfSmallMax (and NaN).
func erfSmall(x float32) float32 {
	s := x * x
	p := ((((erfS5*s+erfS4)*s+erfS3)*s+erfS2)*s+erfS1)*s + erfS0
	return p*x + x
}

// erfcLarge is erfc(t) for t > erfSmallMax (0 from erfOneAt on), given
// sq, t² computed from the input exactly (x² for erf, x²/2 for Gelu: the
// rounding of x/√2 would otherwise be amplified 2t² times): exp(g(t) −
// sq) with sq split exactly into a + lo, reduced as g − (a + n·ln2hi) − lo
// − n·ln2lo (the first difference exact, the others small) so that only
// g's rounding reaches the result.
func erfcLarge(t float32, sq float64) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	if t >= erfOneAt {
		return 0
	}
	u := t - erfLMid
	g := ((((((((erfL8*u+erfL7)*u+erfL6)*u+erfL5)*u+erfL4)*u+erfL3)*u+erfL2)*u+erfL1)*u + erfL0)
	a := float32(sq)
	lo := float32(sq - float64(a)) // exact: sq has at most 48 significant bits
	n := float32(math.RoundToEven(float64((g - a) * log2e)))
	f := ((g - (a + n*ln2hi)) - lo) - n*ln2lo // a + n·ln2hi is exact, g minus it small
	p := ((((1.9875691500e-4*f+1.3981999507e-3)*f+8.3334519073e-3)*f+4.1665795894e-2)*f+1.6666665459e-1)*f + 5.0000001201e-1
	p = p*(f*f) + f + 1
	return p * math.Float32frombits(uint32(127+int32(n))<<23) // n in [-26, -1]: 2^n is normal
}

// erf32 is the error function in float32.
func erf32(x float32) float32 {
	t := float32(math.Abs(float64(x)))
	if !(t > erfSmallMax) {
		return erfSmall(x)
	}
	return float32(math.Copysign(float64(1-erfcLarge(t, float64(x)*float64(x))), float64(x)))
}

// gelu32 is x·Φ(x) = 0.5·x·(1 + erf(x/√2)) in float32.
func gelu32(x float32) float32 {
	z := x * invSqrt2
	t := float32(math.Abs(float64(z)))
	sq := 0.5 * float64(x) * float64(x) // (x/√2)², exactly
	var h float32                       // 1 + erf(z)
	switch {
	case !(t > erfSmallMax):
		h = 1 + erfSmall(z)
	case z < 0:
		h = erfcLarge(t, sq)
	default:
		h = 2 - erfcLarge(t, sq)
	}
	return 0.5 * x * h
}

// erfGeluChunk is how many elements one task of a parallel Erf or Gelu
// takes: about 10 µs of the vector kernel.
const erfGeluChunk = 1 << 14

// erfSlice sets dst[i] = erf(src[i]) (len(dst) = len(src)) on up to threads
// threads.
func erfSlice(dst, src []float32, threads int) { erfGeluSlice(dst, src, threads, false) }

// geluSlice sets dst[i] = gelu(src[i]) (len(dst) = len(src)) on up to
// threads threads.
func geluSlice(dst, src []float32, threads int) { erfGeluSlice(dst, src, threads, true) }

func erfGeluSlice(dst, src []float32, threads int, gelu bool) {
	src = src[:len(dst)]
	tasks := (len(dst) + erfGeluChunk - 1) / erfGeluChunk
	parallelFor(threads, tasks, func(t int) {
		lo, hi := t*erfGeluChunk, min(len(dst), (t+1)*erfGeluChunk)
		erfGeluSerial(dst[lo:hi], src[lo:hi], gelu)
	})
}

// erfGeluSerial is erfGeluSlice on the calling goroutine. The vector
// kernels take whole vectors; a partial last one goes through a padded
// copy, so that every element gets the same arithmetic.
func erfGeluSerial(dst, src []float32, gelu bool) {
	lanes := 0
	switch {
	case kernel.AVX512:
		lanes = 16
	case kernel.Available:
		lanes = 8
	default:
		f := erf32
		if gelu {
			f = gelu32
		}
		for i, x := range src {
			dst[i] = f(x)
		}
		return
	}
	whole := len(dst) / lanes * lanes
	if whole > 0 {
		erfVec(&dst[0], &src[0], whole, lanes, gelu)
	}
	if whole < len(dst) {
		var buf [16]float32
		copy(buf[:], src[whole:])
		erfVec(&buf[0], &buf[0], lanes, lanes, gelu)
		copy(dst[whole:], buf[:])
	}
}

// erfVec runs the assembly kernel of the given width on n elements (n a
// multiple of lanes).
func erfVec(dst, src *float32, n, lanes int, gelu bool) {
	if lanes == 16 {
		kernel.Erf16(dst, src, n, gelu)
		return
	}
	kernel.Erf8(dst, src, n, gelu)
}
