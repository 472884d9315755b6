package kernel

import (
	"math"
	"math/rand"
	"testing"
)

// TestRowKernels checks DotRows16 and AxpyRows16 against float64 sums, over
// rows at a stride wider than they are, and shapes with whole groups of
// 64 columns, 16-column rests and no keys at all.
func TestRowKernels(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewSource(5))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	for _, c := range []struct{ n, d, ld int }{
		{0, 64, 64}, {1, 16, 16}, {7, 64, 192}, {100, 128, 130}, {33, 80, 96}, {5, 144, 144}, {9, 32, 2304},
	} {
		k := fill(max(c.n*c.ld, 1) + c.d)
		q := fill(c.d)
		dst := make([]float32, c.n+1)
		dst[c.n] = 42 // past n: untouched
		DotRows16(&dst[0], &q[0], &k[0], c.ld, c.n, c.d)
		for j := 0; j < c.n; j++ {
			var want float64
			for e := 0; e < c.d; e++ {
				want += float64(q[e]) * float64(k[j*c.ld+e])
			}
			if math.Abs(float64(dst[j])-want) > 1e-5*(1+math.Abs(want))*float64(c.d)/16 {
				t.Fatalf("%+v: DotRows16 dst[%d] = %g, want %g", c, j, dst[j], want)
			}
		}
		if dst[c.n] != 42 {
			t.Fatalf("%+v: DotRows16 wrote past n", c)
		}
		p := fill(max(c.n, 1))
		o := fill(c.d + 1)
		base := append([]float32{}, o...)
		AxpyRows16(&o[0], &p[0], &k[0], c.ld, c.n, c.d)
		for e := 0; e < c.d; e++ {
			want := float64(base[e])
			for j := 0; j < c.n; j++ {
				want += float64(p[j]) * float64(k[j*c.ld+e])
			}
			if math.Abs(float64(o[e])-want) > 1e-5*(1+math.Abs(want))*float64(max(c.n, 1))/16 {
				t.Fatalf("%+v: AxpyRows16 o[%d] = %g, want %g", c, e, o[e], want)
			}
		}
		if o[c.d] != base[c.d] {
			t.Fatalf("%+v: AxpyRows16 wrote past dv", c)
		}
	}
}
