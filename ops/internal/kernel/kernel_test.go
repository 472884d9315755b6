package kernel

import (
	"math"
	"testing"
)

func TestSgemm6x16(t *testing.T) {
	if !Available {
		t.Skip("no AVX2+FMA on this CPU")
	}
	const k, ldc = 5, 19
	a := make([]float32, k*MR)
	b := make([]float32, k*NR)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	for i := range b {
		b[i] = float32(i%5) * 0.5
	}
	c := make([]float32, (MR-1)*ldc+NR+3)
	for _, add := range []bool{true, false} {
		for i := range c {
			c[i] = 1
		}
		Sgemm6x16(k, &a[0], &b[0], &c[0], ldc, add)
		checkTile(t, a, b, c, k, ldc, add)
	}
}

func checkTile(t *testing.T, a, b, c []float32, k, ldc int, add bool) {
	t.Helper()
	for r := 0; r < MR; r++ {
		for j := 0; j < ldc && r*ldc+j < len(c); j++ {
			want := float32(1)
			if j < NR && !add {
				want = 0
			}
			if j < NR {
				for p := 0; p < k; p++ {
					want += a[p*MR+r] * b[p*NR+j]
				}
			}
			if got := c[r*ldc+j]; got != want {
				t.Fatalf("add=%v: C[%d][%d] = %g, want %g", add, r, j, got, want)
			}
		}
	}
}

func TestExpShiftSum8(t *testing.T) {
	if !Available {
		t.Skip("no AVX2+FMA on this CPU")
	}
	inf := float32(math.Inf(1))
	src := []float32{0, 1, -1, 10, -10, 88, -87, -88.5, -inf, inf, float32(math.NaN()), 0.5, 50, -50, 3.25, -0.125}
	for x := float32(-87); x < 88; x += 0.37 {
		src = append(src, x)
	}
	src = src[:len(src)/8*8]
	dst := make([]float32, len(src))
	const shift = 0.75
	sum := ExpShiftSum8(&dst[0], &src[0], len(src), shift)
	var want float64
	for i, x := range src {
		a := float64(x - shift)
		e := math.Exp(min(max(a, ExpClampLow), float64(float32(ExpClampHigh))))
		if a < ExpClampLow {
			e = 0
		}
		if math.IsNaN(a) {
			if !math.IsNaN(float64(dst[i])) {
				t.Errorf("exp(NaN) = %g", dst[i])
			}
			continue
		}
		want += e
		if e < 0x1p-126 && dst[i] == 0 {
			continue // subnormal results may flush to zero
		}
		if d := math.Abs(float64(dst[i]) - e); d > 5e-7*e {
			t.Errorf("exp(%g - %g) = %g, want %g", x, shift, dst[i], e)
		}
	}
	if !math.IsNaN(float64(sum)) {
		t.Errorf("sum with a NaN = %g", sum)
	}
	sum = ExpShiftSum8(&dst[0], &src[0], 8, shift) // first 8: no NaN
	if w := float32(math.Exp(-0.75) + math.Exp(0.25) + math.Exp(-1.75) + math.Exp(9.25) + math.Exp(-10.75) + math.Exp(87.25) + math.Exp(-87.75)); math.Abs(float64(sum-w)) > 1e-6*float64(w) {
		t.Errorf("sum = %g, want %g", sum, w)
	}
}
