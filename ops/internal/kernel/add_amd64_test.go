package kernel

import (
	"math"
	"testing"
)

// TestAddTo16 checks AddTo16 against Go's float32 addition, element by
// element and bit for bit, over the unrolled loop and its tail, with
// special values, and that it touches nothing past n.
func TestAddTo16(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-38}
	for _, n := range []int{16, 48, 64, 80, 256, 16 * 37} {
		dst := make([]float32, n+16)
		src := make([]float32, n+16)
		for i := range dst {
			dst[i] = float32(math.Sin(float64(i))) * 1000
			src[i] = float32(math.Cos(float64(3*i))) * 3
			if i%7 == 0 {
				dst[i] = special[i%len(special)]
			}
			if i%11 == 0 {
				src[i] = special[(i/11)%len(special)]
			}
		}
		want := make([]float32, len(dst))
		for i := range want {
			want[i] = dst[i]
			if i < n {
				want[i] = dst[i] + src[i]
			}
		}
		AddTo16(&dst[0], &src[0], n)
		for i := range dst {
			if math.Float32bits(dst[i]) != math.Float32bits(want[i]) && !(dst[i] != dst[i] && want[i] != want[i]) {
				t.Fatalf("n=%d: dst[%d] = %g, want %g", n, i, dst[i], want[i])
			}
		}
	}
}
