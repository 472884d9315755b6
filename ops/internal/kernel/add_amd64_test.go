package kernel

import (
	"math"
	"testing"
)

// TestAddTo16 checks AddTo16 and MulTo16 against Go's float32 addition
// and multiplication, element by element and bit for bit, over the
// unrolled loop and its tail, with special values, and that they touch
// nothing past n.
func TestAddTo16(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	for _, k := range []struct {
		name string
		kern func(dst, src *float32, n int)
		op   func(a, b float32) float32
	}{
		{"AddTo16", AddTo16, func(a, b float32) float32 { return a + b }},
		{"MulTo16", MulTo16, func(a, b float32) float32 { return a * b }},
	} {
		t.Run(k.name, func(t *testing.T) { checkTo16(t, k.kern, k.op) })
	}
}

// specials are the float32 values the kernel tests mix in.
var specials = []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-38}

// checkTo16 checks the dst op= src kernel kern against op.
func checkTo16(t *testing.T, kern func(dst, src *float32, n int), op func(a, b float32) float32) {
	for _, n := range []int{16, 48, 64, 80, 256, 16 * 37} {
		dst := make([]float32, n+16)
		src := make([]float32, n+16)
		for i := range dst {
			dst[i] = float32(math.Sin(float64(i))) * 1000
			src[i] = float32(math.Cos(float64(3*i))) * 3
			if i%7 == 0 {
				dst[i] = specials[i%len(specials)]
			}
			if i%11 == 0 {
				src[i] = specials[(i/11)%len(specials)]
			}
		}
		want := make([]float32, len(dst))
		for i := range want {
			want[i] = dst[i]
			if i < n {
				want[i] = op(dst[i], src[i])
			}
		}
		kern(&dst[0], &src[0], n)
		for i := range dst {
			if math.Float32bits(dst[i]) != math.Float32bits(want[i]) && !(dst[i] != dst[i] && want[i] != want[i]) {
				t.Fatalf("n=%d: dst[%d] = %g, want %g", n, i, dst[i], want[i])
			}
		}
	}
}

// TestSilu16 checks Silu16 against Sigmoid16 followed by Go's float32
// multiplication by x, element by element and bit for bit, over values
// across σ's range, its clamps and special values, in place and not, and
// that it touches nothing past n.
func TestSilu16(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const n = 16 * 40
	x := make([]float32, n+16)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) * float32(1+i%120)
		if i%9 == 0 {
			x[i] = specials[(i/9)%len(specials)]
		}
	}
	sig := make([]float32, n)
	Sigmoid16(&sig[0], &x[0], n)
	for _, inPlace := range []bool{false, true} {
		dst := make([]float32, len(x))
		for i := range dst {
			dst[i] = -7
		}
		if inPlace {
			copy(dst, x[:n])
			Silu16(&dst[0], &dst[0], n)
		} else {
			Silu16(&dst[0], &x[0], n)
		}
		for i := range dst {
			want := float32(-7)
			if i < n {
				want = x[i] * sig[i]
			}
			if math.Float32bits(dst[i]) != math.Float32bits(want) && !(dst[i] != dst[i] && want != want) {
				t.Fatalf("in place %v: dst[%d] = %g (x %g), want %g", inPlace, i, dst[i], x[i], want)
			}
		}
	}
}
