package kernel

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// randScoreTiles returns random A rows (n tiles at a stride of as) and a
// k×32 B panel, and their tiles as Sgemm8x32RowsLoop computes them (C at
// a stride of cs, rows ldc apart): what ScoresExp8x32 should start from.
func randScoreTiles(seed int64, k, lda, n, as, ldc, cs int) (a, b, raw []float32) {
	r := rand.New(rand.NewSource(seed))
	a = make([]float32, n*as)
	b = make([]float32, 32*k)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range b {
		b[i] = float32(r.NormFloat64())
	}
	raw = make([]float32, n*cs)
	Sgemm8x32RowsLoop(k, &a[0], lda, &b[0], &raw[0], ldc, n, as, 0, cs, false)
	return a, b, raw
}

// scoresFunc is the fp32 scores kernels' signature (ScoresExp8x32's).
type scoresFunc = func(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

// scoresKernel is one of the fp32 scores kernels with what its tests
// expect of it: exp (float64) of its arguments, the slack its tests put
// the limits at above the shifts (8 in natural units, as the fused
// attention's least), its clamp, and its exponential's error bound in ulp
// plus rel·|x| relative.
type scoresKernel struct {
	name  string
	run   scoresFunc
	exp   func(float64) float64
	slack float32
	clamp float64 // arguments below it give 0
	ulp   float64
	rel   float64
}

// limitsAbove returns the 32 limits shift[c] + slack (in float32, as a
// caller computes them) for the scores kernels.
func limitsAbove(shift [32]float32, slack float32) []float32 {
	lim := make([]float32, 32)
	for c, s := range shift {
		lim[c] = s + slack
	}
	return lim
}

// scoresArgMax is the largest argument x - shift the accuracy tests
// sweep: the fused attention's limits allow at most 24 above a shift in
// natural units (34.6 in base 2).
const scoresArgMax = 40

// expLn2Err bounds the relative error that ln 2 rounded to float32 puts
// into ScoresExp8x32's exp(x) per unit of |x|: the reduction x - n·ln2 is
// off by n·(ln2 - float32(ln2)), n ≈ x·log2 e.
const expLn2Err = 2.8e-9

var scoresKernels = []scoresKernel{
	{"natural", ScoresExp8x32, math.Exp, 8, -104, 1.5, expLn2Err},
	{"base2", ScoresExp8x32Base2, math.Exp2, float32(8 * math.Log2E), -150, 1.75, 0},
}

// TestScoresExp8x32 checks each fused kernel against Sgemm8x32RowsLoop's
// scores and float64 exponentials (powers of 2 in base 2): the stored
// tiles, the column sums, the stop at the first tile a column of which
// rises above its limit (the slack above its shift; with its column
// maxima), and -Inf, huge negative and NaN shifts; with k = 19 (tile t's exponentials
// partly during tile t + 1's products, partly after them) and k = 64 (all
// during them).
func TestScoresExp8x32(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	for _, kern := range scoresKernels {
		for _, k := range []int{19, 64} {
			t.Run(fmt.Sprintf("%s/k=%d", kern.name, k), func(t *testing.T) { testScoresExp8x32(t, kern, k, k+4) })
		}
	}
}

func testScoresExp8x32(t *testing.T, kern scoresKernel, k, lda int) {
	const n, ldc = 5, 36
	as, cs := 8*lda+3, 8*ldc+5
	a, b, raw := randScoreTiles(1, k, lda, n, as, ldc, cs)
	colMax := func(tile int) [32]float32 {
		var m [32]float32
		for c := range m {
			m[c] = float32(math.Inf(-1))
			for row := 0; row < 8; row++ {
				m[c] = max(m[c], raw[tile*cs+row*ldc+c])
			}
		}
		return m
	}
	// A shift that every tile stays under (the overall column max).
	var shift [32]float32
	for c := range shift {
		shift[c] = float32(math.Inf(-1))
		for tile := 0; tile < n; tile++ {
			shift[c] = max(shift[c], colMax(tile)[c])
		}
	}
	run := func(shift [32]float32) (got []float32, sum, mx [32]float32, done int) {
		got = make([]float32, n*cs)
		for i := range got {
			got[i] = -7
		}
		for c := range sum {
			sum[c] = float32(c) // the kernel adds to it
		}
		done = kern.run(k, &a[0], lda, &b[0], &got[0], ldc, n, as, cs, &shift[0], &limitsAbove(shift, kern.slack)[0], &sum[0], &mx[0], nil, nil, 0)
		return got, sum, mx, done
	}
	got, sum, _, done := run(shift)
	if done != n {
		t.Fatalf("returned %d, want %d", done, n)
	}
	var want [32]float64
	for i := range got {
		tile, in := i/cs, i%cs
		row, c := in/ldc, in%ldc
		if tile >= n || row >= 8 || c >= 32 {
			if got[i] != -7 {
				t.Fatalf("C[%d] (outside the tiles) = %g", i, got[i])
			}
			continue
		}
		e := kern.exp(float64(raw[i] - shift[c])) // the difference rounded to float32, as the kernel has it
		want[c] += e
		if rel := math.Abs(float64(got[i])-e) / e; rel > 2.5e-7 {
			t.Fatalf("tile %d row %d col %d: %g, want exp(%g - %g) = %g (rel %.2g)", tile, row, c, got[i], raw[i], shift[c], e, rel)
		}
	}
	for c := range sum {
		if w := want[c] + float64(c); math.Abs(float64(sum[c])-w) > 1e-5*w {
			t.Errorf("sum[%d] = %g, want %g", c, sum[c], w)
		}
	}

	// Shifts more than the slack below tile 2's maximum in a column where
	// it rises above tiles 0 and 1 (and above every other), and the slack
	// (plus a margin for the rounding of shift + slack) below theirs: the
	// kernel stops at tile 2 with its maxima.
	low := shift
	m2 := colMax(2)
	col := -1
	const margin = 1e-3
	for c := range m2 {
		low[c] = max(m2[c]-kern.slack-0.5, colMax(0)[c]-kern.slack+margin, colMax(1)[c]-kern.slack+margin)
		if low[c] < m2[c]-kern.slack-margin {
			col = c
			break
		}
		low[c] = shift[c]
	}
	if col < 0 {
		t.Skip("random data: tile 2 rises above tiles 0 and 1 in no column")
	}
	got, _, mx, done := run(low)
	if done != 2 || mx != m2 {
		t.Fatalf("returned %d with maxima %v, want 2 with %v", done, mx, m2)
	}
	for i := 2 * cs; i < len(got); i++ {
		if got[i] != -7 {
			t.Fatalf("C[%d] written past the stop", i)
		}
	}

	// -Inf shifts stop at tile 0 (every finite max is above them).
	var inf [32]float32
	for c := range inf {
		inf[c] = float32(math.Inf(-1))
	}
	if _, _, mx, done = run(inf); done != 0 || mx != colMax(0) {
		t.Fatalf("-Inf shift: returned %d, want 0", done)
	}
	// Shifts far above every score give exact zeros (clamped), NaN shifts
	// NaN.
	huge := shift
	for c := range huge {
		huge[c] = 1e30
	}
	huge[3] = float32(math.NaN())
	got, sum, _, done = run(huge)
	if done != n {
		t.Fatalf("huge shift: returned %d", done)
	}
	for tile := 0; tile < n; tile++ {
		for row := 0; row < 8; row++ {
			for c := 0; c < 32; c++ {
				v := got[tile*cs+row*ldc+c]
				if (c == 3) != math.IsNaN(float64(v)) || (c != 3 && v != 0) {
					t.Fatalf("huge shift, column %d: %g", c, v)
				}
			}
		}
	}
	if !math.IsNaN(float64(sum[3])) || sum[4] != 4 {
		t.Fatalf("huge shift: sums %v", sum)
	}
}

// TestScoresExp8x32Accuracy sweeps each kernel's exponential over its
// whole argument range: with k = 1 and a panel of ones the scores are A's
// values, so that row r of tile t gives exp(a[8t+r] - shift[c]) in every
// column c (2^ in base 2). Arguments from 9 below the clamp to just under
// scoresArgMax, under limits of +Inf and shifts of several sizes (each column's a little
// different, so that x - shift rounds differently): within the kernel's
// ulp bound of the float64 exponential of the difference rounded to
// float32 (as the kernel has it) plus rel·|x| relative (natural: ln 2 in
// float32, 0.05 ulp per unit of |x|: 0.8 ulp at -16, where terms are 1e-7
// of the largest), subnormal results within that plus half a step, 0
// below the clamp. Then k = 0 (a tile of zeros: exp(-shift)).
func TestScoresExp8x32Accuracy(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	for _, kern := range scoresKernels {
		t.Run(kern.name, func(t *testing.T) { testScoresExpAccuracy(t, kern) })
	}
}

func testScoresExpAccuracy(t *testing.T, kern scoresKernel) {
	const n = 4096
	lo, hi := kern.clamp-9, float64(scoresArgMax)
	inf := float32(math.Inf(1))
	r := rand.New(rand.NewSource(4))
	a := make([]float32, 8*n)
	b := make([]float32, 32)
	for i := range b {
		b[i] = 1
	}
	got := make([]float32, 8*n*32)
	var worst float64
	for _, s0 := range []float64{0, 3.3, -20.7, 61.9} {
		var shift, sum, mx [32]float32
		for c := range shift {
			shift[c] = float32(s0 + r.Float64())
		}
		for i := range a {
			a[i] = float32(s0 + lo + (hi-lo)*float64(i)/float64(len(a)-1))
		}
		if done := kern.run(1, &a[0], 1, &b[0], &got[0], 32, n, 8, 8*32, &shift[0], &limitsAbove(shift, inf)[0], &sum[0], &mx[0], nil, nil, 0); done != n {
			t.Fatalf("shift %g: returned %d, want %d", s0, done, n)
		}
		for i, g := range got {
			x := a[i/32] - shift[i%32]
			e := kern.exp(float64(x))
			if float64(x) < kern.clamp {
				if g != 0 {
					t.Fatalf("exp(%g) = %g, want 0", x, g)
				}
				continue
			}
			ulp := math.Ldexp(1, math.Ilogb(e)-23)
			u := math.Abs(float64(g)-e) / ulp
			if e >= 0x1p-126 {
				worst = max(worst, u)
			}
			if d := math.Abs(float64(g) - e); d > kern.ulp*ulp+kern.rel*math.Abs(float64(x))*e+0x1p-150 || d != d {
				t.Fatalf("exp(%g) = %g, want %g (%.2f ulp)", x, g, e, u)
			}
		}
	}
	t.Logf("worst %.3f ulp", worst)

	var shift, sum, mx [32]float32
	for c := range shift {
		shift[c] = float32(c) / 4
	}
	if done := kern.run(0, &a[0], 1, &b[0], &got[0], 32, 3, 8, 8*32, &shift[0], &limitsAbove(shift, inf)[0], &sum[0], &mx[0], nil, nil, 0); done != 3 {
		t.Fatalf("k = 0: returned %d, want 3", done)
	}
	for i, g := range got[:3*8*32] {
		if e := kern.exp(-float64(shift[i%32])); math.Abs(float64(g)-e) > kern.ulp*0x1p-24*e*2 {
			t.Fatalf("k = 0: C[%d] = %g, want %g", i, g, e)
		}
	}
}

// TestScoresExpLimits checks that each kernel stops exactly above a
// column's own limit: with a panel of one 1 (column c) and zeros, a score
// at column c's limit (each column's different, under shifts of several
// sizes) does not stop the kernel, the next float above it does, with
// that maximum in mx[c].
func TestScoresExpLimits(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	got := make([]float32, 8*32)
	for _, kern := range scoresKernels {
		for _, s := range []float32{0, -3.7, 12.3, 1e4} {
			var shift, sum, mx [32]float32
			lim := make([]float32, 32)
			for c := range shift {
				shift[c] = s
				lim[c] = s + 8 + float32(c)*0.7
			}
			for _, c := range []int{0, 17, 31} {
				b := make([]float32, 32)
				b[c] = 1
				a := []float32{s, s, s, s, s, lim[c], s, s}
				if done := kern.run(1, &a[0], 1, &b[0], &got[0], 32, 1, 8, 8*32, &shift[0], &lim[0], &sum[0], &mx[0], nil, nil, 0); done != 1 {
					t.Fatalf("%s, shift %g: a score at column %d's limit stopped the kernel", kern.name, s, c)
				}
				a[5] = math.Nextafter32(lim[c], float32(math.Inf(1)))
				if done := kern.run(1, &a[0], 1, &b[0], &got[0], 32, 1, 8, 8*32, &shift[0], &lim[0], &sum[0], &mx[0], nil, nil, 0); done != 0 || mx[c] != a[5] {
					t.Fatalf("%s, shift %g: a score one float above column %d's limit returned %d (max %g), want 0 (%g)", kern.name, s, c, done, mx[c], a[5])
				}
			}
		}
	}
}

// TestScoresExp8x32Bias checks each kernel's per-row bias against
// Sgemm8x32RowsLoop's scores plus the bias in float32 and float64
// exponentials: -Inf rows give exact zeros, a tile of -Inf rows under a
// -Inf shift (no finite score yet) stores zeros and does not stop the
// kernel, the next finite tile does. Then with a row bias added after it:
// by diagonals (each row's 32 terms a float before the previous row's)
// and at a stride of 37 floats.
func TestScoresExp8x32Bias(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	for _, kern := range scoresKernels {
		for _, rbs := range []int{0, -1, 37} {
			t.Run(fmt.Sprintf("%s/rbs=%d", kern.name, rbs), func(t *testing.T) { testScoresExpBias(t, kern, rbs) })
		}
	}
}

func testScoresExpBias(t *testing.T, kern scoresKernel, rbs int) {
	const k, lda, n, ldc = 13, 17, 4, 40
	as, cs := 8*lda, 8*ldc+3
	a, b, raw := randScoreTiles(2, k, lda, n, as, ldc, cs)
	negInf := float32(math.Inf(-1))
	r := rand.New(rand.NewSource(3))
	bias := keyBiasTiles(r, n, 3)
	// The row bias: row 8t + r of the tiles reads rb[rb0 + (8t+r)·rbs + c].
	var rb []float32
	var rbp *float32
	rb0 := 0
	if rbs != 0 {
		rb = make([]float32, (8*n-1)*max(rbs, -rbs)+32)
		for i := range rb {
			rb[i] = float32(2 * r.NormFloat64())
		}
		if rbs < 0 {
			rb0 = (8*n - 1) * -rbs
		}
		rbp = &rb[rb0]
	}
	biased := func(tile, row, c int) float32 {
		s := raw[tile*cs+row*ldc+c] + bias[8*tile+row]
		if rb != nil {
			s += rb[rb0+(8*tile+row)*rbs+c]
		}
		return s
	}
	var shift, mx1 [32]float32
	for c := range shift {
		shift[c], mx1[c] = negInf, negInf
		for tile := 0; tile < n; tile++ {
			for row := 0; row < 8; row++ {
				shift[c] = max(shift[c], biased(tile, row, c))
				if tile == 1 {
					mx1[c] = max(mx1[c], biased(tile, row, c))
				}
			}
		}
	}
	run := func(shift [32]float32) (got []float32, sum, mx [32]float32, done int) {
		got = make([]float32, n*cs)
		for i := range got {
			got[i] = -7
		}
		done = kern.run(k, &a[0], lda, &b[0], &got[0], ldc, n, as, cs, &shift[0], &limitsAbove(shift, kern.slack)[0], &sum[0], &mx[0], &bias[0], rbp, rbs)
		return got, sum, mx, done
	}
	got, sum, _, done := run(shift)
	if done != n {
		t.Fatalf("returned %d, want %d", done, n)
	}
	var want [32]float64
	for tile := 0; tile < n; tile++ {
		for row := 0; row < 8; row++ {
			for c := 0; c < 32; c++ {
				g := got[tile*cs+row*ldc+c]
				s := biased(tile, row, c)
				if math.IsInf(float64(s), -1) {
					if g != 0 {
						t.Fatalf("tile %d row %d col %d: masked, got %g", tile, row, c, g)
					}
					continue
				}
				e := kern.exp(float64(s - shift[c]))
				want[c] += e
				if rel := math.Abs(float64(g)-e) / e; rel > 2.5e-7 {
					t.Fatalf("tile %d row %d col %d: %g, want %g (rel %.2g)", tile, row, c, g, e, rel)
				}
			}
		}
	}
	for c := range sum {
		if math.Abs(float64(sum[c])-want[c]) > 1e-5*want[c] {
			t.Errorf("sum[%d] = %g, want %g", c, sum[c], want[c])
		}
	}
	// -Inf shifts: tile 0 (all masked) gives zeros, tile 1 stops the
	// kernel with its biased maxima.
	var inf [32]float32
	for c := range inf {
		inf[c] = negInf
	}
	got, sum, mx, done := run(inf)
	if done != 1 || mx != mx1 {
		t.Fatalf("-Inf shift: returned %d with maxima %v, want 1 with %v", done, mx, mx1)
	}
	for row := 0; row < 8; row++ {
		for c := 0; c < 32; c++ {
			if g := got[row*ldc+c]; g != 0 {
				t.Fatalf("-Inf shift, masked tile 0: row %d col %d = %g", row, c, g)
			}
		}
	}
	if sum != [32]float32{} {
		t.Fatalf("-Inf shift: sums %v, want zeros", sum)
	}
}

func TestTransposeScale16(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const ldd, lds = 21, 19
	src := make([]float32, 15*lds+16)
	for i := range src {
		src[i] = float32(i) + 0.5
	}
	var scale [16]float32
	for i := range scale {
		scale[i] = float32(i%5) - 1.5
	}
	dst := make([]float32, 15*ldd+16+3)
	for i := range dst {
		dst[i] = -99
	}
	TransposeScale16(&dst[0], ldd, &src[0], lds, &scale[0])
	for k, got := range dst {
		want := float32(-99)
		if i, j := k/ldd, k%ldd; i < 16 && j < 16 {
			want = scale[i] * src[j*lds+i]
		}
		if got != want {
			t.Fatalf("dst[%d] = %g, want %g", k, got, want)
		}
	}
}

// TestTransposeAdd16 checks the transposed, scaled add on strided blocks,
// and with lds 0 (one row of src added to every column).
func TestTransposeAdd16(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const ldd = 21
	for _, lds := range []int{19, 0} {
		src := make([]float32, 15*lds+16)
		for i := range src {
			src[i] = float32(i%23) - 7.25
		}
		dst := make([]float32, 15*ldd+16+3)
		for i := range dst {
			dst[i] = float32(i) * 0.5
		}
		const scale = -0.75
		TransposeAdd16(&dst[0], ldd, &src[0], lds, scale)
		for k, got := range dst {
			want := float32(k) * 0.5
			if i, j := k/ldd, k%ldd; i < 16 && j < 16 {
				want += scale * src[j*lds+i]
			}
			if got != want {
				t.Fatalf("lds %d: dst[%d] = %g, want %g", lds, k, got, want)
			}
		}
	}
}

// keyBiasTiles is a per-key bias for n tiles of 8 keys: -inf on every key
// of tile 0 and on every key whose index is a multiple of every, normal
// values elsewhere.
func keyBiasTiles(r *rand.Rand, n, every int) []float32 {
	bias := make([]float32, 8*n)
	for i := range bias {
		if i < 8 || i%every == 0 {
			bias[i] = float32(math.Inf(-1))
		} else {
			bias[i] = float32(r.NormFloat64())
		}
	}
	return bias
}

// TestPackSlivers8 checks the Vᵀ pack against its definition, with an odd
// number of slivers (the last one alone) and an even one, and that it
// writes nothing outside the slivers' rows.
func TestPackSlivers8(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewSource(9))
	for _, slivers := range []int{1, 3, 8} {
		const lds, rows, pad = 100, 5, 3
		ldsliver := rows*8 + pad
		src := make([]float32, rows*lds)
		for i := range src {
			src[i] = float32(r.NormFloat64())
		}
		dst := make([]float32, slivers*ldsliver)
		for i := range dst {
			dst[i] = -7
		}
		PackSlivers8(&dst[0], &src[0], lds, rows, slivers, ldsliver)
		for i, got := range dst {
			s, rest := i/ldsliver, i%ldsliver
			row, c := rest/8, rest%8
			want := float32(-7)
			if row < rows {
				want = src[row*lds+8*s+c]
			}
			if got != want {
				t.Fatalf("slivers=%d: dst[%d] (sliver %d row %d column %d) = %g, want %g", slivers, i, s, row, c, got, want)
			}
		}
	}
}
