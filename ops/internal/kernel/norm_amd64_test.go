package kernel

import (
	"math"
	"math/rand"
	"testing"
)

// TestSumSquaresF64 checks SumSquaresF64 for every n from 0 to 100: with
// small integers and halves (every partial sum exact in float64, so any
// order of additions gives the exact sum) it must give the exact sum, NaN
// poison just past n must not leak in (the masked tail reads no lane past
// n), and on random normal values it must agree with a float64 sum to
// within the rounding of 100 additions.
func TestSumSquaresF64(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewSource(1))
	for n := 0; n <= 100; n++ {
		x := make([]float32, n+16)
		var want float64
		for i := 0; i < n; i++ {
			x[i] = float32(r.Intn(41)-20) / 2
			want += float64(x[i]) * float64(x[i])
		}
		for i := n; i < len(x); i++ {
			x[i] = float32(math.NaN())
		}
		if got := SumSquaresF64(&x[0], n); got != want {
			t.Fatalf("n=%d: exact case %v, want %v", n, got, want)
		}
		want = 0
		for i := 0; i < n; i++ {
			x[i] = float32(r.NormFloat64())
			want += float64(x[i]) * float64(x[i])
		}
		if got := SumSquaresF64(&x[0], n); math.Abs(got-want) > 1e-14*want {
			t.Fatalf("n=%d: %v, want %v", n, got, want)
		}
	}
}
