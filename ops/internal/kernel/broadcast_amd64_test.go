package kernel

import (
	"fmt"
	"math"
	"testing"
)

func TestCPUFamily(t *testing.T) {
	for _, tc := range []struct {
		name string
		eax  uint32
		want uint32
	}{
		{"Zen 4 (EPYC 9004)", 0x00A10F11, 0x19},
		{"Zen 3 (EPYC 7003)", 0x00A00F11, 0x19},
		{"Zen 5 (EPYC 9005)", 0x00B00F21, 0x1A},
		{"Sapphire Rapids", 0x000806F8, 0x06},
	} {
		if got := cpuFamily(tc.eax); got != tc.want {
			t.Errorf("%s: cpuFamily(%#x) = %#x, want %#x", tc.name, tc.eax, got, tc.want)
		}
	}
}

func TestEmbeddedBroadcastFrom(t *testing.T) {
	for _, tc := range []struct {
		env        string
		zen4, want bool
	}{
		{"", true, true},
		{"", false, false},
		{"on", false, true},
		{"off", true, false},
		{"yes", false, false}, // not a value it knows: the CPU decides
		{"yes", true, true},
	} {
		if got := embeddedBroadcastFrom(tc.env, tc.zen4); got != tc.want {
			t.Errorf("embeddedBroadcastFrom(%q, %v) = %v, want %v", tc.env, tc.zen4, got, tc.want)
		}
	}
}

// TestBroadcastForms runs the 8×32 row kernels' tests with each form of
// A's broadcasts, whichever this CPU picks.
func TestBroadcastForms(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	saved := EmbeddedBroadcast
	defer func() { EmbeddedBroadcast = saved }()
	tests := []struct {
		name string
		run  func(*testing.T)
	}{
		{"Sgemm8x32Rows", TestSgemm8x32Rows},
		{"Sgemm8x32RowsLoop", TestSgemm8x32RowsLoop},
		{"ScoresExp8x32", TestScoresExp8x32},
		{"ScoresExp8x32Bias", TestScoresExp8x32Bias},
		{"ScoresExpLimits", TestScoresExpLimits},
		{"BF16Gemm8x32", TestBF16Gemm8x32},
		{"BF16Gemm8x32Loop", TestBF16Gemm8x32Loop},
		{"ScoresExpBF16x32", TestScoresExpBF16x32},
	}
	for _, embedded := range []bool{false, true} {
		EmbeddedBroadcast = embedded
		for _, tc := range tests {
			t.Run(fmt.Sprintf("embedded=%v/%s", embedded, tc.name), tc.run)
		}
	}
}

// TestBroadcastFormsSameBits checks that the two forms of the fp32 scores
// kernels store the same bits, sums, maxima and stop.
func TestBroadcastFormsSameBits(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	for _, kern := range []struct {
		name                string
		broadcast, embedded scoresFunc
	}{
		{"natural", scoresExp8x32Broadcast, scoresExp8x32Embedded},
		{"base2", scoresExp8x32Base2Broadcast, scoresExp8x32Base2Embedded},
	} {
		const k, lda, n, ldc = 64, 70, 6, 33
		as, cs := 8*lda+1, 8*ldc+3
		a, b, raw := randScoreTiles(7, k, lda, n, as, ldc, cs)
		// Shifts from the first tile's column maxima, so that a later
		// tile rises above a limit 1 above them and the kernel stops.
		var shift [32]float32
		for c := range shift {
			shift[c] = float32(math.Inf(-1))
			for row := 0; row < 8; row++ {
				shift[c] = max(shift[c], raw[row*ldc+c])
			}
		}
		limit := limitsAbove(shift, 1)
		run := func(f scoresFunc) ([]float32, [32]float32, [32]float32, int) {
			c := make([]float32, (n+1)*cs)
			var sum, mx [32]float32
			done := f(k, &a[0], lda, &b[0], &c[0], ldc, n, as, cs, &shift[0], &limit[0], &sum[0], &mx[0], nil, nil, 0)
			return c, sum, mx, done
		}
		c1, sum1, mx1, done1 := run(kern.broadcast)
		c2, sum2, mx2, done2 := run(kern.embedded)
		if done1 != done2 || done1 == n {
			t.Fatalf("%s: stopped at %d (broadcast) and %d (embedded), want the same tile before %d", kern.name, done1, done2, n)
		}
		for i := range c1 {
			if math.Float32bits(c1[i]) != math.Float32bits(c2[i]) {
				t.Fatalf("%s: C[%d] = %g (broadcast), %g (embedded)", kern.name, i, c1[i], c2[i])
			}
		}
		if sum1 != sum2 || mx1 != mx2 {
			t.Fatalf("%s: sums %v / %v, maxima %v / %v", kern.name, sum1, sum2, mx1, mx2)
		}
	}
}
