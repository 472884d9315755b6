package kernel

import (
	"math"
	"strconv"
	"strings"
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

func TestCols16(t *testing.T) {
	if !Available {
		t.Skip("no AVX2+FMA on this CPU")
	}
	const rows = 7
	p := make([]float32, rows*16)
	for i := range p {
		p[i] = float32((i*37)%23)*0.5 - 6
	}
	p[3*16+5] = float32(math.Inf(-1))
	mx := make([]float32, 16)
	for c := range mx {
		mx[c] = float32(c) - 2 // a running max some columns exceed
	}
	want := append([]float32(nil), mx...)
	for r := 0; r < rows; r++ {
		for c := 0; c < 16; c++ {
			want[c] = max(want[c], p[r*16+c])
		}
	}
	MaxCols16(&p[0], rows, &mx[0])
	for c := range mx {
		if mx[c] != want[c] {
			t.Fatalf("MaxCols16 column %d = %g, want %g", c, mx[c], want[c])
		}
	}
	MaxCols16(&p[0], 0, &mx[0]) // no rows: unchanged
	for c := range mx {
		if mx[c] != want[c] {
			t.Fatalf("MaxCols16 over 0 rows changed column %d", c)
		}
	}
	orig := append([]float32(nil), p...)
	sum := make([]float32, 16)
	sum[2] = 1
	ExpShiftSumCols16(&p[0], rows, &mx[0], &sum[0])
	for c := 0; c < 16; c++ {
		var s float64
		if c == 2 {
			s = 1
		}
		for r := 0; r < rows; r++ {
			e := math.Exp(float64(orig[r*16+c] - mx[c]))
			got := float64(p[r*16+c])
			if math.Abs(got-e) > 1e-6*e+1e-30 {
				t.Fatalf("exp at [%d][%d] = %g, want %g", r, c, got, e)
			}
			s += e
		}
		if math.Abs(float64(sum[c])-s) > 1e-5*s {
			t.Fatalf("column %d sum = %g, want %g", c, sum[c], s)
		}
	}
}

type tileKernel struct {
	name   string
	mr, nr int
	f      func(k int, a, b, c *float32, ldc int, add bool)
	ok     bool
}

func tileKernels() []tileKernel {
	return []tileKernel{
		{"6x16", MR, NR, Sgemm6x16, Available},
		{"8x32", 8, 32, Sgemm8x32, AVX512},
		{"12x32", 12, 32, Sgemm12x32, AVX512},
	}
}

func TestTileKernels(t *testing.T) {
	for _, tk := range tileKernels() {
		if !tk.ok {
			continue
		}
		for _, k := range []int{0, 1, 7} {
			ldc := tk.nr + 3
			a := make([]float32, max(k, 1)*tk.mr)
			b := make([]float32, max(k, 1)*tk.nr)
			for i := range a {
				a[i] = float32(i%7) - 3
			}
			for i := range b {
				b[i] = float32(i%5) * 0.5
			}
			for _, add := range []bool{true, false} {
				c := make([]float32, tk.mr*ldc)
				for i := range c {
					c[i] = 1
				}
				tk.f(k, &a[0], &b[0], &c[0], ldc, add)
				for r := 0; r < tk.mr; r++ {
					for j := 0; j < ldc; j++ {
						want := float32(1)
						if j < tk.nr && !add {
							want = 0
						}
						if j < tk.nr {
							for p := 0; p < k; p++ {
								want += a[p*tk.mr+r] * b[p*tk.nr+j]
							}
						}
						if got := c[r*ldc+j]; got != want {
							t.Fatalf("%s k=%d add=%v: C[%d][%d] = %g, want %g", tk.name, k, add, r, j, got, want)
						}
					}
				}
			}
		}
	}
}

func TestSgemm8x32Loop(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const k, n, ldc = 7, 3, 40
	a, b := make([]float32, n*k*8+5), make([]float32, n*k*32+3)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	for i := range b {
		b[i] = float32(i%5) * 0.5
	}
	as, bs, cs := k*8+1, k*32+1, 8*ldc+2 // odd strides: each tile elsewhere
	for _, add := range []bool{false, true} {
		c := make([]float32, n*cs+8*ldc)
		for i := range c {
			c[i] = 2
		}
		Sgemm8x32Loop(k, &a[0], &b[0], &c[0], 8, ldc, n, as, bs, cs, add)
		for tl := 0; tl < n; tl++ {
			for r := 0; r < 8; r++ {
				for j := 0; j < 32; j++ {
					want := float32(0)
					if add {
						want = 2
					}
					for p := 0; p < k; p++ {
						want += a[tl*as+p*8+r] * b[tl*bs+p*32+j]
					}
					if got := c[tl*cs+r*ldc+j]; got != want {
						t.Fatalf("add %v tile %d: C[%d][%d] = %g, want %g", add, tl, r, j, got, want)
					}
				}
			}
		}
	}
}

// TestSgemm8x32LoopLda reads A in place from a row-major k×20 matrix
// (8 of its columns per tile) instead of a packed sliver.
func TestSgemm8x32LoopLda(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const k, lda, n = 9, 20, 2
	a, b := make([]float32, k*lda), make([]float32, k*32)
	for i := range a {
		a[i] = float32(i%11) - 5
	}
	for i := range b {
		b[i] = float32(i%3) - 1
	}
	c := make([]float32, n*8*32)
	Sgemm8x32Loop(k, &a[0], &b[0], &c[0], lda, 32, n, 8, 0, 8*32, false)
	for tl := 0; tl < n; tl++ {
		for r := 0; r < 8; r++ {
			for j := 0; j < 32; j++ {
				var want float32
				for p := 0; p < k; p++ {
					want += a[p*lda+tl*8+r] * b[p*32+j]
				}
				if got := c[tl*256+r*32+j]; got != want {
					t.Fatalf("tile %d C[%d][%d] = %g, want %g", tl, r, j, got, want)
				}
			}
		}
	}
}

func TestCols32(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const rows = 5
	p := make([]float32, rows*32)
	for i := range p {
		p[i] = float32((i*37)%23)*0.5 - 6
	}
	p[2*32+20] = float32(math.Inf(-1))
	mx := make([]float32, 32)
	for c := range mx {
		mx[c] = float32(c%9) - 3
	}
	want := append([]float32(nil), mx...)
	for r := 0; r < rows; r++ {
		for c := 0; c < 32; c++ {
			want[c] = max(want[c], p[r*32+c])
		}
	}
	MaxCols32(&p[0], rows, &mx[0])
	for c := range mx {
		if mx[c] != want[c] {
			t.Fatalf("MaxCols32 column %d = %g, want %g", c, mx[c], want[c])
		}
	}
	orig := append([]float32(nil), p...)
	sum := make([]float32, 32)
	ExpShiftSumCols32(&p[0], rows, &mx[0], &sum[0])
	for c := 0; c < 32; c++ {
		var s float64
		for r := 0; r < rows; r++ {
			e := math.Exp(float64(orig[r*32+c] - mx[c]))
			if got := float64(p[r*32+c]); math.Abs(got-e) > 1e-6*e+1e-30 {
				t.Fatalf("exp at [%d][%d] = %g, want %g", r, c, got, e)
			}
			s += e
		}
		if math.Abs(float64(sum[c])-s) > 1e-5*s {
			t.Fatalf("column %d sum = %g, want %g", c, sum[c], s)
		}
	}
}

// TestMulCols32 checks MulCols32 bit for bit against Go's float32
// multiplication, infinities, NaN and zero rows included, and that it
// writes no row past n.
func TestMulCols32(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		rows int
	}{{"none", 0}, {"one", 1}, {"seven", 7}, {"64", 64}} {
		t.Run(tc.name, func(t *testing.T) {
			p := make([]float32, (tc.rows+1)*32)
			for i := range p {
				p[i] = float32((i*37)%23)*0.25 - 3
			}
			if tc.rows > 0 {
				p[5], p[6] = inf, float32(math.NaN())
			}
			v := make([]float32, 32)
			for c := range v {
				v[c] = float32(c%7) * 0.3
			}
			v[3], v[4] = 0, inf
			want := append([]float32(nil), p...)
			for r := 0; r < tc.rows; r++ {
				for c := range v {
					want[r*32+c] *= v[c]
				}
			}
			MulCols32(&p[0], tc.rows, &v[0])
			for i := range p {
				if math.Float32bits(p[i]) != math.Float32bits(want[i]) && !(p[i] != p[i] && want[i] != want[i]) {
					t.Fatalf("element %d (row %d, column %d) = %g, want %g", i, i/32, i%32, p[i], want[i])
				}
			}
		})
	}
}

// BenchmarkTileKernels measures each micro-kernel on L1-resident operands
// (k = 256), single-threaded.
func BenchmarkTileKernels(b *testing.B) {
	for _, tk := range tileKernels() {
		if !tk.ok {
			continue
		}
		const k = 256
		a := make([]float32, k*tk.mr)
		bb := make([]float32, k*tk.nr)
		c := make([]float32, tk.mr*tk.nr)
		b.Run(tk.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				tk.f(k, &a[0], &bb[0], &c[0], tk.nr, true)
			}
			b.ReportMetric(2*float64(k*tk.mr*tk.nr)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func TestSgemm8x32Rows(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const ldc = 37
	for _, k := range []int{0, 1, 7, 8, 16, 300} {
		lda := k + 3
		a := make([]float32, 7*lda+max(k, 1))
		b := make([]float32, max(k, 1)*32)
		for i := range a {
			a[i] = float32(i%7) - 3
		}
		for i := range b {
			b[i] = float32(i%5) * 0.5
		}
		bias := make([]float32, 32)
		for j := range bias {
			bias[j] = float32(j) - 16.5
		}
		// Lines to prefetch: none, fewer than k/8, more than k/8 (the
		// kernel stops at k/8); they must not change the result.
		pf := make([]float32, 64*16)
		for _, mode := range []string{"store", "add", "bias", "add+bias", "add+bias+prefetch 3", "store+prefetch 64"} {
			add := strings.HasPrefix(mode, "add")
			var bp, pfp *float32
			if strings.Contains(mode, "bias") {
				bp = &bias[0]
			}
			lines := 0
			if i := strings.Index(mode, "prefetch "); i >= 0 {
				lines, _ = strconv.Atoi(mode[i+len("prefetch "):])
				pfp = &pf[0]
			}
			c := make([]float32, 7*ldc+32+5)
			for i := range c {
				c[i] = float32(i%3) + 0.25
			}
			old := append([]float32(nil), c...)
			Sgemm8x32Rows(k, &a[0], lda, &b[0], &c[0], ldc, bp, add, pfp, lines)
			for i, got := range c {
				r, j := i/ldc, i%ldc
				want := old[i]
				if r < 8 && j < 32 {
					if !add {
						want = 0
					}
					for p := 0; p < k; p++ {
						want += a[r*lda+p] * b[p*32+j]
					}
					if bp != nil {
						want += bias[j]
					}
				}
				if got != want {
					t.Fatalf("k=%d %s: C[%d][%d] = %g, want %g", k, mode, r, j, got, want)
				}
			}
		}
	}
}

// TestSgemm8x32RowsLoop checks the tile loop against one Sgemm8x32Rows
// call per tile.
func TestSgemm8x32RowsLoop(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const k, lda, n, ldc = 13, 17, 3, 40
	as, bs, cs := 8*lda+2, 32*k+5, 8*ldc+7
	a := make([]float32, n*as)
	b := make([]float32, n*bs)
	for i := range a {
		a[i] = float32(i%11) - 5
	}
	for i := range b {
		b[i] = float32(i%7) * 0.25
	}
	for _, add := range []bool{false, true} {
		got := make([]float32, n*cs)
		for i := range got {
			got[i] = float32(i%5) - 2
		}
		want := append([]float32(nil), got...)
		Sgemm8x32RowsLoop(k, &a[0], lda, &b[0], &got[0], ldc, n, as, bs, cs, add)
		for tile := 0; tile < n; tile++ {
			Sgemm8x32Rows(k, &a[tile*as], lda, &b[tile*bs], &want[tile*cs], ldc, nil, add, nil, 0)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("add=%v: C[%d] = %g, one call per tile gives %g", add, i, got[i], want[i])
			}
		}
	}
}

func TestGatherScale32(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	const lds, n = 70, 9
	src := make([]float32, 31*lds+n)
	for i := range src {
		src[i] = float32(i%13) - 6
	}
	dst := make([]float32, n*32+4)
	for i := range dst {
		dst[i] = -99
	}
	GatherScale32(&dst[0], &src[0], lds, n, 0.5)
	for i, got := range dst {
		want := float32(-99)
		if j, c := i/32, i%32; i < n*32 {
			want = 0.5 * src[c*lds+j]
		}
		if got != want {
			t.Fatalf("dst[%d] = %g, want %g", i, got, want)
		}
	}
}
