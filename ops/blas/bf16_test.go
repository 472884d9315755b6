package blas

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

func TestBF16Round(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // tie, even below
		{0x3f818000, 0x3f82}, // tie, even above
		{0x3f808001, 0x3f81}, // above the tie
		{0x7f7fffff, 0x7f80}, // max float rounds to +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x7f800001, 0x7fc0}, // signalling NaN, quieted
		{0x00000001, 0x0000}, // subnormal to +0
		{0x807fffff, 0x8000}, // subnormal to -0
		{0x00800000, 0x0080}, // smallest normal
	} {
		if got := BF16Round(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("BF16Round(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if BF16Float(0x4049) != 3.140625 {
		t.Errorf("BF16Float(0x4049) = %g", BF16Float(0x4049))
	}
}

// bf16Ref is naiveGemm on operands rounded to bf16 (alpha·A rounded, as
// the packing does), in float64.
func bf16Ref(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float32 {
	round := func(x []float32, scale float32) []float32 {
		out := make([]float32, len(x))
		for i, v := range x {
			out[i] = BF16Float(BF16Round(scale * v))
		}
		return out
	}
	return naiveGemm(transA, transB, m, n, k, 1, round(a, alpha), lda, round(b, 1), ldb, float64(beta), c, ldc)
}

// checkBF16 compares got with want within fp32 accumulation error: k
// roundings of sums bounded by sum|a·b| ≤ k (operands in [-1, 1)).
func checkBF16(t *testing.T, name string, got, want []float32, k int) {
	t.Helper()
	tol := float64(k+4) * 0x1p-23 * float64(k+2)
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > tol || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: C[%d] = %g, want %g (±%g)", name, i, got[i], want[i], tol)
		}
	}
}

func TestSgemmBF16(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for _, s := range [][3]int{{1, 1, 1}, {8, 32, 2}, {9, 33, 3}, {17, 70, 129}, {70, 45, 300}, {64, 96, 1700}} {
		m, n, k := s[0], s[1], s[2]
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {2, -0.25}} {
				alpha, beta := ab[0], ab[1]
				lda, ldb := k+3, n+2
				if tr[0] {
					lda = m + 3
				}
				if tr[1] {
					ldb = k + 2
				}
				rowsA, rowsB := m, k
				if tr[0] {
					rowsA = k
				}
				if tr[1] {
					rowsB = n
				}
				a, b := randSlice(r, rowsA*lda), randSlice(r, rowsB*ldb)
				ldc := n + 1
				c0 := randSlice(r, m*ldc)
				want := bf16Ref(tr[0], tr[1], m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc)
				for _, th := range []int{1, 2} {
					for _, portable := range []bool{false, true} {
						c := append([]float32(nil), c0...)
						gemmGo(bf16Tiles{portable: portable}, tr[0], tr[1], m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc, th, nil, 0, nil)
						checkBF16(t, fmt.Sprintf("%dx%dx%d trans=%v alpha=%g beta=%g threads=%d portable=%v", m, n, k, tr, alpha, beta, th, portable), c, want, k)
					}
				}
				c := append([]float32(nil), c0...)
				SgemmBF16(2, tr[0], tr[1], m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
				checkBF16(t, "SgemmBF16", c, want, k)
			}
		}
	}
}

// TestSgemmPackedBF16 checks weights packed once in bf16 against packing
// them per call, with a bias, and that the bias-only entry agrees: bit for
// bit where both take k in one block, within bf16's tolerance otherwise.
func TestSgemmPackedBF16(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	for _, s := range [][3]int{{5, 40, 7}, {100, 70, 800}, {512, 96, 768}} {
		m, n, k := s[0], s[1], s[2]
		a, b, bias := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, n)
		want := make([]float32, m*n)
		for i := 0; i < m; i++ {
			copy(want[i*n:], bias)
		}
		want = bf16Ref(false, false, m, n, k, 1, a, k, b, n, 1, want, n)
		for _, trans := range []bool{false, true} {
			bt := b
			ldb := n
			if trans {
				bt = make([]float32, n*k)
				for p := 0; p < k; p++ {
					for j := 0; j < n; j++ {
						bt[j*k+p] = b[p*n+j]
					}
				}
				ldb = k
			}
			pb := PackBBF16(trans, k, n, bt, ldb)
			if !pb.BF16() {
				t.Fatal("PackBBF16 operand does not report bf16")
			}
			c := make([]float32, m*n)
			SgemmPacked(2, false, m, a, k, pb, bias, c, n, nil)
			checkBF16(t, fmt.Sprintf("SgemmPacked bf16 %dx%dx%d transB=%v", m, n, k, trans), c, want, k)
			c2 := make([]float32, m*n)
			SgemmBiasBF16(2, false, trans, m, n, k, a, k, bt, ldb, bias, c2, n, nil)
			checkBF16(t, fmt.Sprintf("SgemmBiasBF16 %dx%dx%d transB=%v", m, n, k, trans), c2, want, k)
			if k > kcBlock {
				continue // packed once, k is one block (packedKC); per call, blocks of kcBlock: sums differ in rounding
			}
			for i := range c {
				if c[i] != c2[i] {
					t.Fatalf("SgemmBiasBF16 C[%d] = %g, packed once %g", i, c2[i], c[i])
				}
			}
		}
	}
}

// TestBF16ErrorVsFP32 states the precision given up: on a 512×768·768×768
// product of uniform [-1, 1) data the bf16 result stays within 1% of the
// fp32 one relative to the output's largest magnitude.
func TestBF16ErrorVsFP32(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	const m, n, k = 512, 768, 768
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	c32, c16 := make([]float32, m*n), make([]float32, m*n)
	SgemmThreads(2, false, false, m, n, k, 1, a, k, b, n, 0, c32, n)
	SgemmBF16(2, false, false, m, n, k, 1, a, k, b, n, 0, c16, n)
	var maxAbs, maxErr float64
	for i := range c32 {
		maxAbs = max(maxAbs, math.Abs(float64(c32[i])))
		maxErr = max(maxErr, math.Abs(float64(c16[i]-c32[i])))
	}
	t.Logf("bf16 vs fp32: max |error| %.3g, relative to max |C| %.3g", maxErr, maxErr/maxAbs)
	if maxErr/maxAbs > 1e-2 {
		t.Errorf("bf16 error %.3g of max |C|, want ≤ 1e-2", maxErr/maxAbs)
	}
}
