package kernel

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// bf16ScoreTiles returns n tiles of 8 random rows of k pair words (at a
// stride of as words, rows lda apart), a k-pair×32 panel of pair words,
// and the tiles' scores as BF16Gemm8x32Loop computes them (8×32 a tile,
// contiguous), checked against float64 sums of the bf16-rounded inputs:
// what ScoresExpBF16x32 should start from.
func bf16ScoreTiles(t *testing.T, seed int64, k, lda, n, as int, scale float64) (a, b []uint32, raw []float32) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	rnd := func() uint32 {
		return uint32(bf16Of(float32(r.NormFloat64()*scale))) | uint32(bf16Of(float32(r.NormFloat64()*scale)))<<16
	}
	a = make([]uint32, n*as)
	b = make([]uint32, 32*k)
	for i := range a {
		a[i] = rnd()
	}
	for i := range b {
		b[i] = rnd()
	}
	raw = make([]float32, n*8*32)
	BF16Gemm8x32Loop(k, &a[0], lda, &b[0], &raw[0], 32, n, as, 0, 8*32, false)
	half := func(w uint32, hi int) float64 { return float64(f32Of(uint16(w >> (16 * hi)))) }
	for tile := 0; tile < n; tile++ {
		for row := 0; row < 8; row++ {
			for c := 0; c < 32; c++ {
				var want, mag float64
				for p := 0; p < k; p++ {
					aw, bw := a[tile*as+row*lda+p], b[p*32+c]
					for hi := 0; hi < 2; hi++ {
						want += half(aw, hi) * half(bw, hi)
						mag += math.Abs(half(aw, hi) * half(bw, hi))
					}
				}
				if got := float64(raw[tile*256+row*32+c]); math.Abs(got-want) > float64(2*k+1)*0x1p-23*mag {
					t.Fatalf("tile %d row %d col %d: score %g, float64 reference %g", tile, row, c, got, want)
				}
			}
		}
	}
	return a, b, raw
}

// expBF16RelErr bounds the relative error of ScoresExpBF16x32's
// exponentials before their rounding to bf16: its polynomial's 1.02e-4
// and the float32 arithmetic's few ulp.
const expBF16RelErr = 1.04e-4

// bf16ScoresKernel is one of the bf16 scores kernels with what its test
// expects of it: exp (float64) of its arguments and the slack its test
// puts the limits at above the shifts.
type bf16ScoresKernel struct {
	name  string
	run   func(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
	exp   func(float64) float64
	slack float32
}

// TestScoresExpBF16x32 checks each bf16 scores kernel against
// BF16Gemm8x32Loop's scores (themselves checked against a float64
// reference with bf16-rounded inputs) and float64 exponentials (powers of
// 2 in base 2): the pair words (within half a bf16 ulp, plus
// expBF16RelErr, of exp(score - shift), the even key in the low half), the
// fp32 column sums (within expBF16RelErr), the per-key bias (-Inf keys
// give exact zeros) and a row bias by diagonals after it, the stop at the first tile a column of which rises
// above its limit (the slack above its shift), with its maxima, -Inf shifts, and
// that nothing is written past a tile's staging (128 words past the last
// tile stored, or past the one it stops at).
func TestScoresExpBF16x32(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	for _, kern := range []bf16ScoresKernel{
		{"natural", ScoresExpBF16x32, math.Exp, 8},
		{"base2", ScoresExpBF16x32Base2, math.Exp2, float32(8 * math.Log2E)},
	} {
		// k = 5: a tile's exponentials all after the next tile's products;
		// 21: partly during them; 32 (seed 000's heads): all during them.
		for _, k := range []int{5, 21, 32} {
			t.Run(fmt.Sprintf("%s/k=%d", kern.name, k), func(t *testing.T) { testScoresExpBF16x32(t, kern, k) })
		}
	}
}

func testScoresExpBF16x32(t *testing.T, kern bf16ScoresKernel, k int) {
	const n = 5
	lda := k + 4
	as := 8*lda + 3
	a, b, raw := bf16ScoreTiles(t, 7, k, lda, n, as, 0.6)
	negInf := float32(math.Inf(-1))
	r := rand.New(rand.NewSource(8))
	bias := keyBiasTiles(r, n, 5)
	// A row bias by diagonals: row 8t + r reads rb[rb0 - (8t + r) + c].
	rb := make([]float32, 8*n-1+32)
	for i := range rb {
		rb[i] = float32(r.NormFloat64())
	}
	rb0 := 8*n - 1
	for _, v := range []struct{ bias, row bool }{{false, false}, {true, false}, {true, true}} {
		withBias := v.bias
		score := func(tile, row, c int) float32 {
			s := raw[tile*256+row*32+c]
			if withBias {
				s += bias[8*tile+row]
			}
			if v.row {
				s += rb[rb0-(8*tile+row)+c]
			}
			return s
		}
		colMax := func(tile int) (m [32]float32) {
			for c := range m {
				m[c] = negInf
				for row := 0; row < 8; row++ {
					m[c] = max(m[c], score(tile, row, c))
				}
			}
			return m
		}
		var shift [32]float32 // every tile stays under it: the overall column max
		for c := range shift {
			shift[c] = negInf
			for tile := 0; tile < n; tile++ {
				shift[c] = max(shift[c], colMax(tile)[c])
			}
		}
		run := func(shift [32]float32) (got []uint32, sum, mx [32]float32, done int) {
			got = make([]uint32, n*128+128+5) // a tile's 128 words of staging past the last
			for i := range got {
				got[i] = 0xdeadbeef
			}
			for c := range sum {
				sum[c] = float32(c) // the kernel adds to it
			}
			var bp, rbp *float32
			if withBias {
				bp = &bias[0]
			}
			if v.row {
				rbp = &rb[rb0]
			}
			done = kern.run(k, &a[0], lda, &b[0], &got[0], n, as, &shift[0], &limitsAbove(shift, kern.slack)[0], &sum[0], &mx[0], bp, rbp, -1)
			return got, sum, mx, done
		}
		got, sum, _, done := run(shift)
		if done != n {
			t.Fatalf("bias=%v: returned %d, want %d", withBias, done, n)
		}
		var want [32]float64
		for tile := 0; tile < n; tile++ {
			for row := 0; row < 8; row++ {
				for c := 0; c < 32; c++ {
					w := got[tile*128+row/2*32+c]
					g := f32Of(uint16(w >> (16 * (row % 2))))
					s := score(tile, row, c)
					if math.IsInf(float64(s), -1) {
						if g != 0 {
							t.Fatalf("bias=%v tile %d row %d col %d: masked, got %g", withBias, tile, row, c, g)
						}
						continue
					}
					e := kern.exp(float64(s - shift[c])) // the difference rounded to float32, as the kernel has it
					want[c] += e
					if rel := math.Abs(float64(g)-e) / e; rel > 0x1p-8+expBF16RelErr {
						t.Fatalf("bias=%v tile %d row %d col %d: %g, want exp(%g - %g) = %g (rel %.2g)", withBias, tile, row, c, g, s, shift[c], e, rel)
					}
				}
			}
		}
		for i := n*128 + 128; i < len(got); i++ {
			if got[i] != 0xdeadbeef {
				t.Fatalf("bias=%v: word %d past the tiles and their staging written", withBias, i)
			}
		}
		for c := range sum {
			if w := want[c] + float64(c); math.Abs(float64(sum[c])-w) > expBF16RelErr*want[c]+1e-6*w {
				t.Errorf("bias=%v: sum[%d] = %g, want %g", withBias, c, sum[c], w)
			}
		}

		// Shifts more than the slack below tile 3's column c (the first
		// where tile 3 rises above tiles 0..2) and above every other (with
		// a margin for the rounding of shift + slack): the kernel stops at
		// tile 3 with its maxima.
		low := shift
		m3 := colMax(3)
		c := 0
		const margin = 1e-3
		for ; c < 32; c++ {
			low[c] = m3[c] - kern.slack - 0.5
			for tile := 0; tile < 3; tile++ {
				low[c] = max(low[c], colMax(tile)[c]-kern.slack+margin)
			}
			if low[c] < m3[c]-kern.slack-margin {
				break
			}
			low[c] = shift[c]
		}
		if c == 32 {
			t.Fatalf("bias=%v: random data: tile 3 rises above tiles 0..2 in no column", withBias)
		}
		got, _, mx, done := run(low)
		if done != 3 || mx != m3 {
			t.Fatalf("bias=%v: returned %d with maxima %v, want 3 with %v", withBias, done, mx, m3)
		}
		for i := 3*128 + 128; i < len(got); i++ {
			if got[i] != 0xdeadbeef {
				t.Fatalf("bias=%v: word %d written past the stop and its staging", withBias, i)
			}
		}

		// -Inf shifts: without the bias tile 0 stops the kernel; with it
		// tile 0 (every key masked) gives zeros and tile 1 stops it.
		var inf [32]float32
		for c := range inf {
			inf[c] = negInf
		}
		stop := 0
		if withBias {
			stop = 1
		}
		got, sum, mx, done = run(inf)
		if done != stop || mx != colMax(stop) {
			t.Fatalf("bias=%v, -Inf shift: returned %d with maxima %v, want %d with %v", withBias, done, mx, stop, colMax(stop))
		}
		for i := 0; i < stop*128; i++ {
			if got[i] != 0 {
				t.Fatalf("bias=%v, -Inf shift: masked tile 0's word %d = %#08x", withBias, i, got[i])
			}
		}
		for c := range sum {
			if sum[c] != float32(c) {
				t.Fatalf("bias=%v, -Inf shift: sums %v, want 0, 1, 2...", withBias, sum)
			}
		}
	}
}
