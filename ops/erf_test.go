package ops

import (
	"math"
	"testing"

	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// ulpsOff is how many float32 ulps got is from the exact value want: the
// difference over the spacing of float32 at |want| (2^-149 below the
// normal range). Matching NaNs and equal infinities are 0 off.
func ulpsOff(got float32, want float64) float64 {
	switch {
	case math.IsNaN(want) && got != got:
		return 0
	case math.IsInf(want, 0) && float64(got) == want:
		return 0
	}
	a := math.Abs(want)
	ulp := math.Ldexp(1, -149)
	if a >= math.Ldexp(1, -126) {
		_, e := math.Frexp(a) // a = f·2^e, f in [0.5, 1)
		ulp = math.Ldexp(1, e-24)
	}
	return math.Abs(float64(got)-want) / ulp
}

// geluExact is 0.5·x·(1 + erf(x/√2)) in float64, through erfc on the
// negative side so that its tail keeps its relative precision.
func geluExact(x float32) float64 {
	z := float64(x) / math.Sqrt2
	if z < 0 {
		return 0.5 * float64(x) * math.Erfc(-z)
	}
	return 0.5 * float64(x) * (1 + math.Erf(z))
}

// erfSweep returns a dense sweep of float32 values: every bit pattern in
// steps of 97 from 0 to +Inf (a multiple of every float32 exponent's
// mantissa range in the region where erf is not ±1 or ±0 is visited
// thousands of times), their negations, and edge cases.
func erfSweep() []float32 {
	var xs []float32
	for b := uint32(0); b < 0x7f800000; b += 97 {
		x := math.Float32frombits(b)
		xs = append(xs, x, -x)
	}
	inf := float32(math.Inf(1))
	return append(xs, 0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()),
		erfSmallMax, -erfSmallMax, math.Nextafter32(erfSmallMax, 1), erfOneAt, math.Nextafter32(erfOneAt, 0),
		1e-45, -1e-45, 1e30, -1e30, math.MaxFloat32, -math.MaxFloat32)
}

// erfImpls are the implementations this CPU can run: the Go functions
// always, the assembly kernels where the CPU has them.
func erfImpls() map[string]func(dst, src []float32, gelu bool) {
	impls := map[string]func(dst, src []float32, gelu bool){
		"go": func(dst, src []float32, gelu bool) {
			f := erf32
			if gelu {
				f = gelu32
			}
			for i, x := range src {
				dst[i] = f(x)
			}
		},
	}
	whole := func(lanes int) func(dst, src []float32, gelu bool) {
		return func(dst, src []float32, gelu bool) {
			n := len(src) / lanes * lanes
			erfVec(&dst[0], &src[0], n, lanes, gelu)
			var buf [16]float32
			copy(buf[:], src[n:])
			erfVec(&buf[0], &buf[0], lanes, lanes, gelu)
			copy(dst[n:], buf[:])
		}
	}
	if kernel.Available {
		impls["avx2"] = whole(8)
	}
	if kernel.AVX512 {
		impls["avx512"] = whole(16)
	}
	return impls
}

func TestErf32Accuracy(t *testing.T) {
	xs := erfSweep()
	got := make([]float32, len(xs))
	for name, impl := range erfImpls() {
		impl(got, xs, false)
		worst, at := 0.0, float32(0)
		for i, x := range xs {
			want := math.Erf(float64(x))
			if u := ulpsOff(got[i], want); u > worst || u != u {
				worst, at = u, x
			}
			if x == 0 && math.Signbit(float64(got[i])) != math.Signbit(float64(x)) {
				t.Errorf("%s: erf(%v) = %v, sign lost", name, x, got[i])
			}
		}
		t.Logf("%s: erf over %d values: at most %.2f ulp (at %v)", name, len(xs), worst, at)
		if !(worst <= 2) {
			t.Errorf("%s: erf(%v) = %v is %.2f ulp from %v, more than 2", name, at, erf32Of(got, xs, at), worst, math.Erf(float64(at)))
		}
	}
}

// erf32Of returns the result at the first position of x in xs.
func erf32Of(got, xs []float32, x float32) float32 {
	for i, v := range xs {
		if v == x || (v != v && x != x) {
			return got[i]
		}
	}
	return float32(math.NaN())
}

func TestGelu32Accuracy(t *testing.T) {
	xs := erfSweep()
	got := make([]float32, len(xs))
	for name, impl := range erfImpls() {
		impl(got, xs, true)
		worst, at := 0.0, float32(0)
		for i, x := range xs {
			want := geluExact(x)
			if x*invSqrt2 <= -erfOneAt { // the cut tail: -0, the exact value tiny
				if got[i] != 0 && !(math.IsInf(float64(x), -1) && got[i] != got[i]) || math.Abs(want) > 8.3e-8 {
					t.Errorf("%s: gelu(%v) = %v, want -0 (exact %v)", name, x, got[i], want)
				}
				continue
			}
			if u := ulpsOff(got[i], want); u > worst || u != u {
				worst, at = u, x
			}
		}
		t.Logf("%s: gelu over %d values: at most %.2f ulp (at %v)", name, len(xs), worst, at)
		if !(worst <= 5) {
			t.Errorf("%s: gelu(%v) = %v is %.2f ulp from %v, more than 5", name, at, erf32Of(got, xs, at), worst, geluExact(at))
		}
	}
}

func TestErfGeluEdges(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		x, erf, gelu float32
	}{
		{0, 0, 0},
		{negZero, negZero, negZero},
		{inf, 1, inf},
		{-inf, -1, nan}, // -Inf·0, as the exported graph computes it
		{nan, nan, nan},
		{1e30, 1, 1e30},
		{-1e30, -1, negZero},
		{4, 1, 3.9998734},
		{6, 1, 6},
	}
	same := func(a, b float32) bool {
		return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
	}
	for name, impl := range erfImpls() {
		for _, c := range cases {
			var got [1]float32
			impl(got[:], []float32{c.x}, false)
			if !same(got[0], c.erf) {
				t.Errorf("%s: erf(%v) = %v, want %v", name, c.x, got[0], c.erf)
			}
			impl(got[:], []float32{c.x}, true)
			if !same(got[0], c.gelu) {
				t.Errorf("%s: gelu(%v) = %v, want %v", name, c.x, got[0], c.gelu)
			}
		}
	}
}

// The assembly kernels evaluate the same polynomials in the same order:
// their results are equal bit for bit, and erfSlice and geluSlice give
// every element, the partial last vector's and the threads' included, the
// same value.
func TestErfKernelsAgree(t *testing.T) {
	var xs []float32
	for i, x := range erfSweep() {
		if i%61 == 0 {
			xs = append(xs, x)
		}
	}
	ref := make([]float32, len(xs))
	got := make([]float32, len(xs))
	impls := erfImpls()
	for _, gelu := range []bool{false, true} {
		impls["go"](ref, xs, gelu)
		if kernel.Available {
			impls["avx2"](ref, xs, gelu)
		}
		if kernel.AVX512 {
			impls["avx512"](got, xs, gelu)
			for i := range xs {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("gelu %v: AVX-512 gives %v at %v, AVX2 %v", gelu, got[i], xs[i], ref[i])
				}
			}
		}
		for _, n := range []int{1, 15, 17, 1000, len(xs)} {
			for _, threads := range []int{1, 2} {
				clear(got)
				if gelu {
					geluSlice(got[:n], xs[:n], threads)
				} else {
					erfSlice(got[:n], xs[:n], threads)
				}
				for i := range n {
					if math.Float32bits(got[i]) != math.Float32bits(ref[i]) && (got[i] == got[i] || ref[i] == ref[i]) {
						t.Fatalf("gelu %v, n %d, %d threads: element %d (%v) is %v, want %v", gelu, n, threads, i, xs[i], got[i], ref[i])
					}
				}
			}
		}
	}
}

func BenchmarkErf32(b *testing.B) {
	xs := make([]float32, 1<<16)
	for i := range xs {
		xs[i] = float32(i-len(xs)/2) / 4096
	}
	dst := make([]float32, len(xs))
	b.Run("kernel", func(b *testing.B) {
		b.SetBytes(int64(4 * len(xs)))
		for range b.N {
			erfSlice(dst, xs, 1)
		}
	})
	b.Run("math.Erf", func(b *testing.B) {
		b.SetBytes(int64(4 * len(xs)))
		for range b.N {
			for i, x := range xs {
				dst[i] = float32(math.Erf(float64(x)))
			}
		}
	})
}
