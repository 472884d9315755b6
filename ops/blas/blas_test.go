package blas

import (
	"fmt"
	"maps"
	"math"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/attnrun/attnrun/ops/internal/kernel"
	"gonum.org/v1/gonum/blas/gonum"
)

// naiveGemm is the reference: a plain triple loop in float64.
func naiveGemm(transA, transB bool, m, n, k int, alpha float64, a []float32, lda int, b []float32, ldb int, beta float64, c []float32, ldc int) []float32 {
	out := append([]float32(nil), c...)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			old := float64(c[i*ldc+j])
			if beta == 0 {
				old = 0
			}
			out[i*ldc+j] = float32(alpha*s + beta*old)
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

func TestSgemmSmallByHand(t *testing.T) {
	// A = [[1 2 3] [4 5 6]], B = [[7 8] [9 10] [11 12]].
	a := []float32{1, 2, 3, 4, 5, 6}
	b := []float32{7, 8, 9, 10, 11, 12}
	aT := []float32{1, 4, 2, 5, 3, 6}    // Aᵀ stored 3×2
	bT := []float32{7, 9, 11, 8, 10, 12} // Bᵀ stored 2×3
	tests := []struct {
		name           string
		transA, transB bool
		a, b           []float32
		lda, ldb       int
		alpha, beta    float32
		c, want        []float32
	}{
		{"plain", false, false, a, b, 3, 2, 1, 0, []float32{9, 9, 9, 9}, []float32{58, 64, 139, 154}},
		{"alpha beta", false, false, a, b, 3, 2, 2, 1, []float32{1, 2, 3, 4}, []float32{117, 130, 281, 312}},
		{"transA", true, false, aT, b, 2, 2, 1, 0, []float32{0, 0, 0, 0}, []float32{58, 64, 139, 154}},
		{"transB", false, true, a, bT, 3, 3, 1, 0, []float32{0, 0, 0, 0}, []float32{58, 64, 139, 154}},
		{"both", true, true, aT, bT, 2, 3, 1, -1, []float32{1, 1, 1, 1}, []float32{57, 63, 138, 153}},
		{"beta zero clears NaN", false, false, a, b, 3, 2, 1, 0, []float32{float32(math.NaN()), 0, 0, 0}, []float32{58, 64, 139, 154}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, impl := range impls() {
				c := append([]float32(nil), tc.c...)
				impl.f(tc.transA, tc.transB, 2, 2, 3, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, c, 2)
				for i := range c {
					if c[i] != tc.want[i] {
						t.Fatalf("%s: C = %v, want %v", impl.name, c, tc.want)
					}
				}
			}
		})
	}
}

type sgemmFunc func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// impls lists Sgemm (whichever build is live) and each pure-Go variant.
func impls() []struct {
	name string
	f    sgemmFunc
} {
	list := []struct {
		name string
		f    sgemmFunc
	}{
		{"Sgemm(" + Name() + ")", Sgemm},
		{"go-kernel-1thread", func(ta, tb bool, m, n, k int, al float32, a []float32, lda int, b []float32, ldb int, be float32, c []float32, ldc int) {
			sgemmGo(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc, 1, false)
		}},
		{"go-kernel-3threads", func(ta, tb bool, m, n, k int, al float32, a []float32, lda int, b []float32, ldb int, be float32, c []float32, ldc int) {
			sgemmGo(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc, 3, false)
		}},
	}
	if kernel.Available {
		list = append(list, struct {
			name string
			f    sgemmFunc
		}{"asm-kernel-4threads", func(ta, tb bool, m, n, k int, al float32, a []float32, lda int, b []float32, ldb int, be float32, c []float32, ldc int) {
			sgemmGo(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc, 4, true)
		}})
	}
	return list
}

func TestSgemmRandomVsNaive(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	sizes := [][3]int{{1, 1, 1}, {7, 5, 3}, {6, 16, 9}, {13, 17, 300}, {50, 70, 40}, {97, 33, 129}, {1, 300, 64}, {200, 3, 260}, {64, 2100, 5}, {130, 40, 520}}
	for _, sz := range sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				// Odd leading dimensions: pad every row by a few elements.
				ar, ac := m, k
				if ta {
					ar, ac = k, m
				}
				br, bc := k, n
				if tb {
					br, bc = n, k
				}
				lda, ldb, ldc := ac+3, bc+1, n+5
				a := randSlice(r, ar*lda)
				b := randSlice(r, br*ldb)
				for _, beta := range []float32{-0.5, 0, 1} {
					c0 := randSlice(r, m*ldc)
					if beta == 0 {
						// beta 0 must ignore C, NaNs included.
						for i := range c0 {
							c0[i] = float32(math.NaN())
						}
					}
					alpha := float32(0.75)
					want := naiveGemm(ta, tb, m, n, k, float64(alpha), a, lda, b, ldb, float64(beta), c0, ldc)
					for _, impl := range impls() {
						c := append([]float32(nil), c0...)
						impl.f(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
						tol := 1e-5 * float64(k+1)
						for i := range c {
							if i%ldc >= n {
								// Padding between rows must be left alone.
								if math.Float32bits(c[i]) != math.Float32bits(c0[i]) {
									t.Fatalf("%s: padding C[%d] changed", impl.name, i)
								}
								continue
							}
							if d := math.Abs(float64(c[i] - want[i])); !(d <= tol) {
								t.Fatalf("%s m=%d n=%d k=%d tA=%v tB=%v beta=%g: C[%d]=%g, want %g", impl.name, m, n, k, ta, tb, beta, i, c[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

func TestSgemmZeroSizes(t *testing.T) {
	tests := []struct {
		name    string
		m, n, k int
		beta    float32
		want    []float32
	}{
		{"k=0 scales C", 2, 2, 0, 3, []float32{3, 6, 9, 12}},
		{"k=0 beta 0", 2, 2, 0, 0, []float32{0, 0, 0, 0}},
		{"m=0 leaves C", 0, 2, 3, 0, []float32{1, 2, 3, 4}},
	}
	for _, tc := range tests {
		for _, impl := range impls() {
			c := []float32{1, 2, 3, 4}
			impl.f(false, false, tc.m, tc.n, tc.k, 1, nil, 1, nil, 2, tc.beta, c, 2)
			for i := range c {
				if c[i] != tc.want[i] {
					t.Errorf("%s %s: C = %v, want %v", tc.name, impl.name, c, tc.want)
					break
				}
			}
		}
	}
}

func TestSgemmPanicsOnShortSlices(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("Sgemm accepted a too-short A")
		}
	}()
	Sgemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
}

func TestDgemm(t *testing.T) {
	a := []float64{1, 2, 3, 4, 5, 6}
	b := []float64{7, 8, 9, 10, 11, 12}
	c := []float64{1, 1, 1, 1}
	Dgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 1, c, 2)
	want := []float64{59, 65, 140, 155}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("Dgemm C = %v, want %v", c, want)
		}
	}
	// Aᵀ·Bᵀ with Aᵀ stored 3×2 (it is A) and Bᵀ stored 2×3: (BA)ᵀ.
	c = make([]float64, 9)
	Dgemm(true, true, 3, 3, 2, 1, a, 3, b, 2, 0, c, 3)
	want = []float64{39, 49, 59, 54, 68, 82, 69, 87, 105}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("Dgemm tA tB C = %v, want %v", c, want)
		}
	}
}

func TestSetThreads(t *testing.T) {
	defer SetThreads(0)
	SetThreads(3)
	if Threads() != 3 {
		t.Fatalf("Threads() = %d after SetThreads(3)", Threads())
	}
	SetThreads(-1)
	if Threads() < 1 {
		t.Fatalf("Threads() = %d after reset", Threads())
	}
}

func benchGemm(b *testing.B, size int, f sgemmFunc) {
	r := rand.New(rand.NewSource(1))
	a, bb, c := randSlice(r, size*size), randSlice(r, size*size), make([]float32, size*size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f(false, false, size, size, size, 1, a, size, bb, size, 0, c, size)
	}
	b.ReportMetric(2*float64(size*size*size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func gonumSgemm(ta, tb bool, m, n, k int, al float32, a []float32, lda int, b []float32, ldb int, be float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(trans(ta), trans(tb), m, n, k, al, a, lda, b, ldb, be, c, ldc)
}

func BenchmarkSgemm(b *testing.B) {
	for _, size := range []int{64, 128, 256, 512, 1024} {
		b.Run(fmt.Sprintf("%s/%d", Name(), size), func(b *testing.B) { benchGemm(b, size, Sgemm) })
	}
}

// BenchmarkSgemm512 is the headline number: 512³ through the live Sgemm.
func BenchmarkSgemm512(b *testing.B) { benchGemm(b, 512, Sgemm) }

// BenchmarkSgemmImpls compares the pure-Go variants and gonum at 512³.
func BenchmarkSgemmImpls(b *testing.B) {
	th := Threads()
	b.Run("gonum", func(b *testing.B) { benchGemm(b, 512, gonumSgemm) })
	b.Run("go-kernel", func(b *testing.B) {
		benchGemm(b, 512, func(ta, tb bool, m, n, k int, al float32, a []float32, lda int, bb []float32, ldb int, be float32, c []float32, ldc int) {
			sgemmGo(ta, tb, m, n, k, al, a, lda, bb, ldb, be, c, ldc, th, false)
		})
	})
	if kernel.Available {
		b.Run("asm-kernel", func(b *testing.B) {
			benchGemm(b, 512, func(ta, tb bool, m, n, k int, al float32, a []float32, lda int, bb []float32, ldb int, be float32, c []float32, ldc int) {
				sgemmGo(ta, tb, m, n, k, al, a, lda, bb, ldb, be, c, ldc, th, true)
			})
		})
	}
}

// BenchmarkSgemmAttention covers the shapes of one attention head at S=512,
// D=64: scores Q·Kᵀ (512×512×64, B transposed) and context P·V (512×64×512).
func BenchmarkSgemmAttention(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	for _, c := range []struct {
		name    string
		m, n, k int
		transB  bool
	}{{"scores", 512, 512, 64, true}, {"context", 512, 64, 512, false}} {
		a := randSlice(r, c.m*c.k)
		bb := randSlice(r, c.k*c.n)
		out := make([]float32, c.m*c.n)
		ldb := c.n
		if c.transB {
			ldb = c.k
		}
		b.Run(Name()+"/"+c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				Sgemm(false, c.transB, c.m, c.n, c.k, 1, a, c.k, bb, ldb, 0, out, c.n)
			}
			b.ReportMetric(2*float64(c.m*c.n*c.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func TestSgemmThreadsAndSerial(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	const m, n, k = 70, 45, 300
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	want := naiveGemm(false, true, m, n, k, 1, a, k, b, k, 0, make([]float32, m*n), n)
	for _, f := range []struct {
		name string
		run  func(c []float32)
	}{
		{"serial", func(c []float32) { SgemmSerial(false, true, m, n, k, 1, a, k, b, k, 0, c, n) }},
		{"3 threads", func(c []float32) { SgemmThreads(3, false, true, m, n, k, 1, a, k, b, k, 0, c, n) }},
		{"default threads", func(c []float32) { SgemmThreads(0, false, true, m, n, k, 1, a, k, b, k, 0, c, n) }},
	} {
		c := make([]float32, m*n)
		f.run(c)
		for i := range c {
			if d := math.Abs(float64(c[i] - want[i])); d > 1e-5*float64(k) {
				t.Fatalf("%s: C[%d] = %g, want %g", f.name, i, c[i], want[i])
			}
		}
	}
}

func TestMicroKernel(t *testing.T) {
	MR, NR := Tile()
	const k = 9
	ldc := NR + 4
	a, b := make([]float32, k*MR), make([]float32, k*NR)
	for i := range a {
		a[i] = float32(i%5) - 2
	}
	for i := range b {
		b[i] = float32(i%7) * 0.25
	}
	for _, add := range []bool{false, true} {
		c := make([]float32, (MR-1)*ldc+NR)
		for i := range c {
			c[i] = 1
		}
		MicroKernel(k, a, b, c, ldc, add)
		for r := 0; r < MR; r++ {
			for j := 0; j < NR; j++ {
				want := float32(0)
				if add {
					want = 1
				}
				for p := 0; p < k; p++ {
					want += a[p*MR+r] * b[p*NR+j]
				}
				if got := c[r*ldc+j]; got != want {
					t.Fatalf("add %v: C[%d][%d] = %g, want %g", add, r, j, got, want)
				}
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MicroKernel accepted a short C")
		}
	}()
	MicroKernel(k, a, b, make([]float32, NR), ldc, false)
}

// TestSgemmBothTiles runs the random comparison with the AVX2 6×16 tile
// too when the CPU would pick the AVX-512 8×32 one.
func TestSgemmBothTiles(t *testing.T) {
	if !kernel.AVX512 {
		t.Skip("the CPU has only the 6x16 tile")
	}
	defer func() { mr, nr, asmKernel, rowKernel = 8, 32, kernel.Sgemm8x32, rowKernelFor(true) }()
	mr, nr, asmKernel = tileFor(false)
	rowKernel = rowKernelFor(false)
	TestSgemmRandomVsNaive(t)
	TestMicroKernel(t)
	TestSgemmBias(t)
	TestSgemmPacked(t)
}

func TestSgemmBias(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	for _, sz := range [][3]int{{70, 45, 300}, {8, 32, 5}, {3, 70, 0}, {100, 2100, 20}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, tb := range []bool{false, true} {
			ldb := n
			if tb {
				ldb = max(k, 1)
			}
			a, b, bias := randSlice(r, m*max(k, 1)), randSlice(r, max(k, 1)*max(n, 1)*2), randSlice(r, n)
			want := naiveGemm(false, tb, m, n, k, 1, a, max(k, 1), b, ldb, 0, make([]float32, m*n), n)
			for i := range want {
				want[i] += bias[i%n]
			}
			for _, threads := range []int{1, 2} {
				c := make([]float32, m*n)
				for i := range c {
					c[i] = float32(math.NaN()) // only written
				}
				SgemmBias(threads, false, tb, m, n, k, a, max(k, 1), b, ldb, bias, c, n, nil)
				for i := range c {
					if d := math.Abs(float64(c[i] - want[i])); !(d <= 1e-5*float64(k+1)) {
						t.Fatalf("m=%d n=%d k=%d tB=%v threads=%d: C[%d] = %g, want %g", m, n, k, tb, threads, i, c[i], want[i])
					}
				}
			}
		}
	}
}

// TestSgemmPacked: C = op(A)·B (+ bias) with B packed once by PackB equals
// the naive product, for k and n spanning several blocks (packedKC's k
// blocks, two and three of them; ncBlock), edge tiles, transposed A and B,
// with and without bias, and the packed B reused across calls with
// different A.
func TestSgemmPacked(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	for _, sz := range [][3]int{{70, 45, 300}, {8, 32, 5}, {3, 70, 0}, {37, ncBlock + 50, kcBlock + 13}, {130, 2304, 768}, {9, 40, packedKCMax + 37}, {11, 70, 2*packedKCMax + 5}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, tb := range []bool{false, true} {
			ldb := n
			if tb {
				ldb = max(k, 1)
			}
			b := randSlice(r, max(k, 1)*max(n, 1))
			pb := PackB(tb, k, n, b, ldb)
			if pk, pn := pb.Dims(); pk != k || pn != n {
				t.Fatalf("Dims %d×%d, want %d×%d", pk, pn, k, n)
			}
			for _, ta := range []bool{false, true} {
				for _, withBias := range []bool{false, true} {
					lda := max(k, 1)
					if ta {
						lda = max(m, 1)
					}
					a := randSlice(r, max(m, 1)*max(k, 1))
					var bias []float32
					want := naiveGemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, make([]float32, m*n), n)
					if withBias {
						bias = randSlice(r, n)
						for i := range want {
							want[i] += bias[i%n]
						}
					}
					c := make([]float32, m*n)
					for i := range c {
						c[i] = float32(math.NaN()) // only written
					}
					SgemmPacked(2, ta, m, a, lda, pb, bias, c, n, nil)
					for i := range c {
						if d := math.Abs(float64(c[i] - want[i])); !(d <= 1e-5*float64(k+1)) {
							t.Fatalf("m=%d n=%d k=%d tA=%v tB=%v bias=%v: C[%d] = %g, want %g", m, n, k, ta, tb, withBias, i, c[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestPackedKC: a packed operand's k blocks are all of k up to
// packedKCMax, else the fewest even blocks no deeper than it, in whole
// 16-row steps.
func TestPackedKC(t *testing.T) {
	for _, c := range []struct{ k, kc, blocks int }{
		{0, 1, 0}, {1, 1, 1}, {5, 5, 1}, {768, 768, 1}, {3072, 3072, 1},
		{3073, 1552, 2}, {4096, 2048, 2}, {6144, 3072, 2}, {6145, 2064, 3}, {16384, 2736, 6},
	} {
		kc := packedKC(c.k)
		if blocks := (c.k + kc - 1) / kc; kc != c.kc || blocks != c.blocks {
			t.Errorf("packedKC(%d) = %d (%d blocks), want %d (%d blocks)", c.k, kc, blocks, c.kc, c.blocks)
		}
	}
}

// TestNextPanelShare: the tiles of a panel share out the next panel's
// cache lines, each line to exactly one tile, in order, whole lines only;
// with no next panel they prefetch nothing.
func TestNextPanelShare(t *testing.T) {
	for _, c := range []struct{ floats, tiles int }{{768 * 32, 32}, {768 * 32, 16}, {768 * 32, 7}, {5 * 32, 32}, {3072 * 32, 1}, {0, 4}} {
		next := make([]float32, c.floats)
		covered := 0
		for ip := 0; ip < c.tiles; ip++ {
			share := nextPanelShare(next, ip, c.tiles)
			if len(share)%floatsPerLine != 0 {
				t.Fatalf("%d floats, %d tiles: tile %d gets %d floats, not whole lines", c.floats, c.tiles, ip, len(share))
			}
			if len(share) > 0 && &share[0] != &next[covered] {
				t.Fatalf("%d floats, %d tiles: tile %d starts at a gap or overlap", c.floats, c.tiles, ip)
			}
			covered += len(share)
		}
		if covered != c.floats {
			t.Errorf("%d floats, %d tiles: shares cover %d floats", c.floats, c.tiles, covered)
		}
	}
	if share := nextPanelShare(nil, 0, 8); share != nil {
		t.Errorf("no next panel: share of %d floats", len(share))
	}
}

// TestSgemmEpilogue: the epilogue of SgemmBias, SgemmBiasBF16 and
// SgemmPacked sees every element of C exactly once, after its value is
// final (equal, bit for bit, to the same call's C without an epilogue),
// over several k and n blocks, edge tiles, k = 0, one and two threads; and
// what it writes is what C holds after the call.
func TestSgemmEpilogue(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	// 677 columns: 22 panels, groups of 11 per thread, not a multiple of
	// epiPanels.
	for _, sz := range [][3]int{{70, 45, 300}, {8, 32, 5}, {3, 70, 0}, {37, ncBlock + 50, kcBlock + 13}, {300, 96, 64}, {64, 677, 40}, {9, 40, packedKCMax + 37}} {
		m, n, k := sz[0], sz[1], sz[2]
		a, b, bias := randSlice(r, m*max(k, 1)), randSlice(r, max(k, 1)*n), randSlice(r, n)
		pb, pb16 := PackB(false, k, n, b, n), PackBBF16(false, k, n, b, n)
		calls := map[string]func(threads int, c []float32, epi Epilogue){
			"SgemmBias": func(th int, c []float32, epi Epilogue) {
				SgemmBias(th, false, false, m, n, k, a, max(k, 1), b, n, bias, c, n, epi)
			},
			"SgemmBias/nil-bias": func(th int, c []float32, epi Epilogue) {
				SgemmBias(th, false, false, m, n, k, a, max(k, 1), b, n, nil, c, n, epi)
			},
			"SgemmPacked": func(th int, c []float32, epi Epilogue) { SgemmPacked(th, false, m, a, max(k, 1), pb, bias, c, n, epi) },
		}
		if BF16Fast() {
			calls["SgemmBiasBF16"] = func(th int, c []float32, epi Epilogue) {
				SgemmBiasBF16(th, false, false, m, n, k, a, max(k, 1), b, n, bias, c, n, epi)
			}
			calls["SgemmPacked/bf16"] = func(th int, c []float32, epi Epilogue) {
				SgemmPacked(th, false, m, a, max(k, 1), pb16, bias, c, n, epi)
			}
		}
		for name, call := range calls {
			for _, threads := range []int{1, 2} {
				want := make([]float32, m*n)
				call(threads, want, nil)
				c := make([]float32, m*n)
				seen := make([]int32, m*n)
				var stale atomic.Int32
				call(threads, c, func(i0, rows, j0, cols int) {
					for i := i0; i < i0+rows; i++ {
						for j := j0; j < j0+cols; j++ {
							atomic.AddInt32(&seen[i*n+j], 1)
							if math.Float32bits(c[i*n+j]) != math.Float32bits(want[i*n+j]) {
								stale.Add(1)
							}
							c[i*n+j] = -c[i*n+j] // the epilogue's own write
						}
					}
				})
				for i, v := range seen {
					if v != 1 {
						t.Fatalf("%s m=%d n=%d k=%d threads=%d: the epilogue saw C[%d] %d times, want once", name, m, n, k, threads, i, v)
					}
					if c[i] != -want[i] {
						t.Fatalf("%s m=%d n=%d k=%d threads=%d: C[%d] = %g after the epilogue, want %g", name, m, n, k, threads, i, c[i], -want[i])
					}
				}
				if s := stale.Load(); s != 0 {
					t.Fatalf("%s m=%d n=%d k=%d threads=%d: the epilogue saw %d elements before their final value", name, m, n, k, threads, s)
				}
			}
		}
	}
}

// TestSgemmPackedEpilogueChunks: a packed product on two threads, whose
// work units are one panel each, still finishes C in chunks of up to
// epiPanels panels of a column group's range (finishPanel), each chunk
// once per row block, not a panel at a time.
func TestSgemmPackedEpilogueChunks(t *testing.T) {
	if nr != 32 {
		t.Skip("the column ranges below are for 32-column panels (AVX-512)")
	}
	r := rand.New(rand.NewSource(14))
	// 677 columns: 22 panels, 11 a thread; 300 rows: two row blocks.
	const m, n, k = 300, 677, 40
	a, bias := randSlice(r, m*k), randSlice(r, n)
	pb := PackB(false, k, n, randSlice(r, k*n), n)
	for round := 0; round < 20; round++ {
		var mu sync.Mutex
		calls := map[[4]int]int{}
		SgemmPacked(2, false, m, a, k, pb, bias, make([]float32, m*n), n, func(i0, rows, j0, cols int) {
			mu.Lock()
			calls[[4]int{i0, rows, j0, cols}]++
			mu.Unlock()
		})
		want := map[[4]int]int{}
		for _, rb := range [][2]int{{0, 256}, {256, 44}} {
			// Thread 0's panels 0–10 and thread 1's 11–21, each in
			// chunks of 8 panels from its range's start.
			for _, cols := range [][2]int{{0, 256}, {256, 96}, {352, 256}, {608, 69}} {
				want[[4]int{rb[0], rb[1], cols[0], cols[1]}] = 1
			}
		}
		if !maps.Equal(calls, want) {
			t.Fatalf("round %d: epilogue calls (i0, rows, j0, cols: count) %v, want %v", round, calls, want)
		}
	}
}

// TestSgemmAInPlace covers the ways the AVX-512 kernel gets A: rows read
// in place (with a partial last sliver packed), also where they lie a
// multiple of 4 KiB apart (lda 1024), and packed because alpha ≠ 1 or A is
// transposed.
func TestSgemmAInPlace(t *testing.T) {
	if ab := newFP32Tiles(true).packA(false, 1, make([]float32, 16*1024), 1024, 0, 16, 0, 1000, make([]float32, 16*rowStride(1000))); rowKernel != nil && ab.inPlace != 2 {
		t.Fatalf("16 rows 4 KiB apart: %d slivers read in place, want 2", ab.inPlace)
	}
	r := rand.New(rand.NewSource(11))
	for _, c := range []struct {
		m, n, k, lda int
		alpha        float32
		transA       bool
	}{{19, 70, 300, 300, 1, false}, {5, 40, 300, 300, 1, false}, {19, 70, 300, 307, 1, false}, {16, 33, 1000, 1024, 1, false}, {19, 40, 64, 64, 0.5, false}, {19, 40, 64, 19, 1, true}} {
		rows := c.m
		if c.transA {
			rows = c.k
		}
		a, b := randSlice(r, rows*c.lda), randSlice(r, c.k*c.n)
		want := naiveGemm(c.transA, false, c.m, c.n, c.k, float64(c.alpha), a, c.lda, b, c.n, 0, make([]float32, c.m*c.n), c.n)
		for _, th := range []int{1, 2} {
			got := make([]float32, c.m*c.n)
			SgemmThreads(th, c.transA, false, c.m, c.n, c.k, c.alpha, a, c.lda, b, c.n, 0, got, c.n)
			for i := range got {
				if math.Abs(float64(got[i]-want[i])) > 1e-4*float64(c.k) {
					t.Fatalf("%+v threads %d: C[%d] = %g, want %g", c, th, i, got[i], want[i])
				}
			}
		}
	}
}

// TestSgemmPackedStriped: with column stripes, C is bit for bit
// SgemmPacked's, and each work unit computes part of one share of one
// stripe: every block the epilogue sees lies in one share. (Which worker
// computes a share is not fixed: its owner takes it first, and a worker
// that ends early helps; TestRunGroups in package parallel checks that
// order.) A stripe the split cannot follow (not dividing C, not a whole
// number of panels per thread, one thread, C one stripe wide) gives
// SgemmPacked's own epilogue blocks.
func TestSgemmPackedStriped(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	for _, c := range []struct {
		m, n, k, stripe, threads int
		striped                  bool
	}{
		{130, 2304, 200, 768, 2, true},
		{130, 2304, 200, 768, 3, true},
		{70, 2304, 50, 768, 4, true},
		{37, 2 * ncBlock, 40, ncBlock, 2, true},
		{50, 2304, 60, 700, 2, false},
		{50, 768, 60, 768, 2, false},
		{50, 2304, 60, 768, 1, false},
		{50, 240, 60, 80, 2, false},
	} {
		name := fmt.Sprintf("%dx%dx%d/stripe=%d/threads=%d", c.m, c.n, c.k, c.stripe, c.threads)
		a, bias := randSlice(r, c.m*c.k), randSlice(r, c.n)
		pb := PackB(false, c.k, c.n, randSlice(r, c.k*c.n), c.n)
		type block struct{ i0, rows, j0, cols int }
		run := func(stripe int) ([]float32, map[block]bool) {
			out := make([]float32, c.m*c.n)
			var mu sync.Mutex
			blocks := map[block]bool{}
			SgemmPackedStriped(c.threads, stripe, false, c.m, a, c.k, pb, bias, out, c.n, func(i0, rows, j0, cols int) {
				mu.Lock()
				blocks[block{i0, rows, j0, cols}] = true
				mu.Unlock()
			})
			return out, blocks
		}
		want, plain := run(0)
		got, blocks := run(c.stripe)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: C[%d] = %g, SgemmPacked gives %g", name, i, got[i], want[i])
			}
		}
		if !c.striped {
			if !maps.Equal(blocks, plain) {
				t.Errorf("%s: epilogue blocks differ from SgemmPacked's", name)
			}
			continue
		}
		share := c.stripe / c.threads
		for b := range blocks {
			s, g := b.j0/c.stripe, b.j0%c.stripe/share
			if last := b.j0 + b.cols - 1; last/c.stripe != s || last%c.stripe/share != g {
				t.Fatalf("%s: epilogue block %+v spans two shares (%d columns each)", name, b, share)
			}
		}
	}
}
