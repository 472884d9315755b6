package kernel

import (
	"bytes"
	"math"
	"math/rand"
	"testing"
	"unsafe"
)

// TestBF16Encodings checks the bytes bf16_amd64.h's macros produce against
// GNU as 2.40 (Debian binutils)'s encodings of the same instructions (Intel syntax:
// destination first), so a wrong bit in a macro cannot hide behind
// registers that happen to work.
func TestBF16Encodings(t *testing.T) {
	want := []struct {
		asm string
		enc []byte
	}{
		{"vdpbf16ps zmm4, zmm2, zmm0", []byte{0x62, 0xf2, 0x6e, 0x48, 0x52, 0xe0}},
		{"vdpbf16ps zmm19, zmm3, zmm1", []byte{0x62, 0xe2, 0x66, 0x48, 0x52, 0xd9}},
		{"vdpbf16ps zmm9, zmm30, zmm17", []byte{0x62, 0x32, 0x0e, 0x40, 0x52, 0xc9}},
		{"vdpbf16ps zmm0, zmm31, zmm30", []byte{0x62, 0x92, 0x06, 0x40, 0x52, 0xc6}},
		{"vcvtne2ps2bf16 zmm2, zmm1, zmm0", []byte{0x62, 0xf2, 0x77, 0x48, 0x72, 0xd0}},
		{"vcvtne2ps2bf16 zmm21, zmm9, zmm28", []byte{0x62, 0x82, 0x37, 0x48, 0x72, 0xec}},
		{"vcvtneps2bf16 ymm3, zmm1", []byte{0x62, 0xf2, 0x7e, 0x48, 0x72, 0xd9}},
		{"vcvtneps2bf16 ymm18, zmm25", []byte{0x62, 0x82, 0x7e, 0x48, 0x72, 0xd1}},
		// The broadcast memory forms (GNU as 2.40, objdump -d).
		{"vdpbf16ps zmm4, zmm0, dword ptr [rsi]{1to16}", []byte{0x62, 0xf2, 0x7e, 0x58, 0x52, 0x26}},
		{"vdpbf16ps zmm12, zmm0, dword ptr [r11]{1to16}", []byte{0x62, 0x52, 0x7e, 0x58, 0x52, 0x23}},
		{"vdpbf16ps zmm6, zmm0, dword ptr [rsi+r8*1]{1to16}", []byte{0x62, 0xb2, 0x7e, 0x58, 0x52, 0x34, 0x06}},
		{"vdpbf16ps zmm8, zmm0, dword ptr [rsi+r8*2]{1to16}", []byte{0x62, 0x32, 0x7e, 0x58, 0x52, 0x04, 0x46}},
		{"vdpbf16ps zmm10, zmm0, dword ptr [rsi+r10*1]{1to16}", []byte{0x62, 0x32, 0x7e, 0x58, 0x52, 0x14, 0x16}},
		{"vdpbf16ps zmm14, zmm0, dword ptr [r11+r8*1]{1to16}", []byte{0x62, 0x12, 0x7e, 0x58, 0x52, 0x34, 0x03}},
		{"vdpbf16ps zmm16, zmm0, dword ptr [r11+r8*2]{1to16}", []byte{0x62, 0x82, 0x7e, 0x58, 0x52, 0x04, 0x43}},
		{"vdpbf16ps zmm19, zmm1, dword ptr [r11+r10*1]{1to16}", []byte{0x62, 0x82, 0x76, 0x58, 0x52, 0x1c, 0x13}},
	}
	n := 0
	for _, w := range want {
		n += len(w.enc)
	}
	code := unsafe.Slice(bf16SamplesAddr(), n)
	for _, w := range want {
		if got := code[:len(w.enc)]; !bytes.Equal(got, w.enc) {
			t.Errorf("%s: macro gives % x, want % x", w.asm, got, w.enc)
		}
		code = code[len(w.enc):]
	}
}

// bf16Of rounds f to bf16, nearest even, as the hardware does for
// normal numbers.
func bf16Of(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// f32Of widens a bf16.
func f32Of(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// packPairs returns words w[p] = (x[2p], x[2p+1]) of a k-vector, padded.
func packPairs(x []float32) []uint32 {
	w := make([]uint32, (len(x)+1)/2)
	for i, v := range x {
		w[i/2] |= uint32(bf16Of(v)) << (16 * (i % 2))
	}
	return w
}

// bf16Tile runs BF16Gemm8x32 on row-major A (8×k) and B (k×32) and returns
// the tile and the exact (float64) products of the bf16-rounded operands.
func bf16Tile(t *testing.T, a, b []float32, k, ldc int, bias []float32, add bool, c []float32) []float64 {
	t.Helper()
	kp := (k + 1) / 2
	lda := kp + 3 // a row stride other than the row length
	aw := make([]uint32, 8*lda)
	for r := 0; r < 8; r++ {
		copy(aw[r*lda:], packPairs(a[r*k:(r+1)*k]))
	}
	bw := make([]uint32, max(kp, 1)*32)
	for j := 0; j < 32; j++ {
		col := make([]float32, k)
		for p := range col {
			col[p] = b[p*32+j]
		}
		for p, w := range packPairs(col) {
			bw[p*32+j] = w
		}
	}
	want := make([]float64, 8*32)
	for r := 0; r < 8; r++ {
		for j := 0; j < 32; j++ {
			for p := 0; p < k; p++ {
				want[r*32+j] += float64(f32Of(bf16Of(a[r*k+p]))) * float64(f32Of(bf16Of(b[p*32+j])))
			}
		}
	}
	var bp *float32
	if bias != nil {
		bp = &bias[0]
	}
	// Lines to prefetch as it goes (more than kp/8 for small k): they
	// must not change the tile.
	pf := make([]float32, 16*8)
	BF16Gemm8x32(kp, &aw[0], lda, &bw[0], &c[0], ldc, bp, add, &pf[0], 8)
	return want
}

// TestBF16Gemm8x32 checks the bf16 micro-kernel, and so the VDPBF16PS
// encodings of every register pair it uses, against a Go reference: with
// small integers every product and sum is exact, so the tile must match
// exactly; with random data, within fp32 rounding of the sums.
func TestBF16Gemm8x32(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	r := rand.New(rand.NewSource(1))
	for _, k := range []int{0, 1, 2, 7, 64, 301} {
		for _, exact := range []bool{true, false} {
			for _, mode := range []string{"store", "add", "bias", "add+bias"} {
				a, b := make([]float32, 8*k), make([]float32, k*32)
				for i := range a {
					a[i] = float32(i%7) - 3
					if !exact {
						a[i] = r.Float32()*2 - 1
					}
				}
				for i := range b {
					b[i] = float32(i%5) * 0.5
					if !exact {
						b[i] = r.Float32()*2 - 1
					}
				}
				const ldc = 37
				c := make([]float32, 7*ldc+32+5)
				for i := range c {
					c[i] = float32(i%3) + 0.25
				}
				old := append([]float32(nil), c...)
				add := mode == "add" || mode == "add+bias"
				var bias []float32
				if mode == "bias" || mode == "add+bias" {
					bias = make([]float32, 32)
					for j := range bias {
						bias[j] = float32(j) - 16.5
					}
				}
				want := bf16Tile(t, a, b, k, ldc, bias, add, c)
				for i, got := range c {
					row, j := i/ldc, i%ldc
					if row >= 8 || j >= 32 {
						if got != old[i] {
							t.Fatalf("k=%d %s: C[%d][%d] outside the tile changed to %g", k, mode, row, j, got)
						}
						continue
					}
					w := want[row*32+j]
					if add {
						w += float64(old[i])
					}
					if bias != nil {
						w += float64(bias[j])
					}
					tol := 0.0
					if !exact {
						tol = float64(k+2) * 0x1p-23 * (float64(k) + math.Abs(w))
					}
					if math.Abs(float64(got)-w) > tol {
						t.Fatalf("k=%d exact=%v %s: C[%d][%d] = %g, want %g (±%g)", k, exact, mode, row, j, got, w, tol)
					}
				}
			}
		}
	}
}

// TestCvtBF16 checks the vector conversion against bf16Of: nearest even
// (ties included), infinities, NaN quieted, subnormals to zero.
func TestCvtBF16(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	inf := float32(math.Inf(1))
	src := []float32{0, 1, -1, 1.00390625, 1.01171875, 1.0078125, 3.14159265, -2.71828, 65504, 1e30, -1e-30, inf, -inf,
		float32(math.NaN()), math.Float32frombits(0x7f800001), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000),
		math.Float32frombits(0x7f7fffff), math.MaxFloat32, 0x1p-126}
	r := rand.New(rand.NewSource(2))
	for len(src) < 32*5 {
		src = append(src, float32(r.NormFloat64()*math.Pow(10, float64(r.Intn(20)-10))))
	}
	sub := []float32{0x1p-130, -0x1p-140}
	src = append(src[:len(src)-len(sub)], sub...)
	dst := make([]uint32, len(src)/2)
	CvtBF16(&dst[0], &src[0], len(src))
	for i, x := range src {
		got := uint16(dst[i/2] >> (16 * (i % 2)))
		want := bf16Of(x)
		switch {
		case x != x:
			if g := f32Of(got); g == g {
				t.Errorf("bf16(NaN) = %#04x, not a NaN", got)
			}
		case x != 0 && math.Abs(float64(x)) < 0x1p-126:
			if got&0x7fff != 0 {
				t.Errorf("bf16(subnormal %g) = %#04x, want ±0", x, got)
			}
		case got != want:
			t.Errorf("bf16(%g = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
		}
	}
}

// TestBF16Gemm8x32Loop checks the tile loop against one BF16Gemm8x32 call
// per tile: the same arithmetic, so the same bits.
func TestBF16Gemm8x32Loop(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	r := rand.New(rand.NewSource(3))
	const k, lda, n, ldc = 13, 17, 3, 40
	as, bs, cs := 8*lda+2, 32*k+5, 8*ldc+7 // tile strides: A, B in words, C in floats
	a := make([]uint32, n*as)
	b := make([]uint32, n*bs)
	for i := range a {
		a[i] = uint32(bf16Of(r.Float32()-0.5)) | uint32(bf16Of(r.Float32()-0.5))<<16
	}
	for i := range b {
		b[i] = uint32(bf16Of(r.Float32()-0.5)) | uint32(bf16Of(r.Float32()-0.5))<<16
	}
	for _, add := range []bool{false, true} {
		got := make([]float32, n*cs)
		for i := range got {
			got[i] = r.Float32()
		}
		want := append([]float32(nil), got...)
		BF16Gemm8x32Loop(k, &a[0], lda, &b[0], &got[0], ldc, n, as, bs, cs, add)
		for tile := 0; tile < n; tile++ {
			BF16Gemm8x32(k, &a[tile*as], lda, &b[tile*bs], &want[tile*cs], ldc, nil, add, nil, 0)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("add=%v: C[%d] = %g, one call per tile gives %g", add, i, got[i], want[i])
			}
		}
	}
}

func TestPairRowsBF16x32(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	r := rand.New(rand.NewSource(4))
	for _, rows := range []int{0, 1, 2, 7} {
		src := make([]float32, max(rows, 1)*32)
		for i := range src {
			src[i] = float32(r.NormFloat64())
		}
		pairs := (rows + 1) / 2
		dst := make([]uint32, pairs*32+3)
		for i := range dst {
			dst[i] = 0xdeadbeef
		}
		PairRowsBF16x32(&dst[0], &src[0], rows)
		for p := 0; p < pairs; p++ {
			for j := 0; j < 32; j++ {
				want := uint32(bf16Of(src[2*p*32+j]))
				if 2*p+1 < rows {
					want |= uint32(bf16Of(src[(2*p+1)*32+j])) << 16
				}
				if got := dst[p*32+j]; got != want {
					t.Fatalf("rows=%d: pair %d column %d = %#08x, want %#08x", rows, p, j, got, want)
				}
			}
		}
		for i := pairs * 32; i < len(dst); i++ {
			if dst[i] != 0xdeadbeef {
				t.Fatalf("rows=%d: word %d past the pairs written", rows, i)
			}
		}
	}
}

func TestGatherPairsBF16x32(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	r := rand.New(rand.NewSource(5))
	const lds, pairs = 75, 5
	src := make([]float32, 31*lds+2*pairs)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	dst := make([]uint32, pairs*32+2)
	dst[len(dst)-1] = 7
	GatherPairsBF16x32(&dst[0], &src[0], lds, pairs, 0.3)
	for p := 0; p < pairs; p++ {
		for c := 0; c < 32; c++ {
			want := uint32(bf16Of(0.3*src[c*lds+2*p])) | uint32(bf16Of(0.3*src[c*lds+2*p+1]))<<16
			if got := dst[p*32+c]; got != want {
				t.Fatalf("pair %d row %d = %#08x, want %#08x", p, c, got, want)
			}
		}
	}
	if dst[len(dst)-1] != 7 {
		t.Fatal("wrote past the pairs")
	}
}

// TestBF16Gemm8x32LoopA8 checks the sliver form against the row form on
// the same operand laid out both ways.
func TestBF16Gemm8x32LoopA8(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	r := rand.New(rand.NewSource(7))
	const k, n, ldc = 11, 3, 36
	word := func() uint32 { return uint32(bf16Of(r.Float32()-0.5)) | uint32(bf16Of(r.Float32()-0.5))<<16 }
	rows := make([]uint32, n*8*k) // tile t's row i at (t·8 + i)·k
	slv := make([]uint32, n*8*k)  // tile t's pair p at t·8·k + p·8
	for tile := 0; tile < n; tile++ {
		for i := 0; i < 8; i++ {
			for p := 0; p < k; p++ {
				w := word()
				rows[(tile*8+i)*k+p] = w
				slv[tile*8*k+p*8+i] = w
			}
		}
	}
	b := make([]uint32, 32*k)
	for i := range b {
		b[i] = word()
	}
	for _, add := range []bool{false, true} {
		got := make([]float32, n*8*ldc)
		for i := range got {
			got[i] = float32(i%7) - 3
		}
		want := append([]float32(nil), got...)
		BF16Gemm8x32LoopA8(k, &slv[0], 8, &b[0], &got[0], ldc, n, 8*k, 0, 8*ldc, add)
		BF16Gemm8x32Loop(k, &rows[0], k, &b[0], &want[0], ldc, n, 8*k, 0, 8*ldc, add)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("add=%v: C[%d] = %g, the row form gives %g", add, i, got[i], want[i])
			}
		}
	}
}

func TestPairSliversBF16(t *testing.T) {
	if !BF16 {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	r := rand.New(rand.NewSource(8))
	const lds, pairs, slivers, ldsliver = 40, 3, 4, 30
	src := make([]float32, 2*pairs*lds)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	dst := make([]uint32, slivers*ldsliver)
	for i := range dst {
		dst[i] = 0xdeadbeef
	}
	PairSliversBF16(&dst[0], &src[0], lds, pairs, slivers, ldsliver)
	for i, got := range dst {
		s, rest := i/ldsliver, i%ldsliver
		p, c := rest/8, rest%8
		want := uint32(0xdeadbeef)
		if p < pairs {
			j := 8*s + c
			want = uint32(bf16Of(src[2*p*lds+j])) | uint32(bf16Of(src[(2*p+1)*lds+j]))<<16
		}
		if got != want {
			t.Fatalf("dst[%d] (sliver %d pair %d column %d) = %#08x, want %#08x", i, s, p, c, got, want)
		}
	}
}
