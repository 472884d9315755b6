package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestAddPanel checks the transposed add of an additive mask or bias into
// a scores panel against the element-by-element sum, for full masks (a
// row per query), masks broadcast over the queries (one row: ALiBi, a
// padding mask) or over the keys (one value per query), and lane and key
// counts that are and are not multiples of the 16×16 blocks.
func TestAddPanel(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	cases := []struct {
		rowStep, colStep int
		lanes, cols      int
	}{
		{70, 1, 32, 64}, {70, 1, 32, 37}, {70, 1, 20, 48}, {70, 1, 7, 16}, {70, 1, 16, 5},
		{0, 1, 32, 64}, {0, 1, 32, 21},
		{1, 0, 32, 64}, {3, 0, 13, 9},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("rowStep=%d,colStep=%d,lanes=%d,cols=%d", c.rowStep, c.colStep, c.lanes, c.cols), func(t *testing.T) {
			const off, sc = 5, float32(-0.37)
			src := make([]float32, off+c.lanes*c.rowStep+c.cols*c.colStep+1)
			for i := range src {
				src[i] = float32(r.NormFloat64())
			}
			st := make([]float32, c.cols*attnNR)
			for i := range st {
				st[i] = float32(r.NormFloat64())
			}
			want := append([]float32(nil), st...)
			for ch := 0; ch < c.lanes; ch++ {
				for key := 0; key < c.cols; key++ {
					want[key*attnNR+ch] = float32(float64(want[key*attnNR+ch]) + float64(sc)*float64(src[off+ch*c.rowStep+key*c.colStep]))
				}
			}
			addPanel(st, src, off, c.rowStep, c.colStep, c.cols, c.lanes, sc)
			for i, g := range st {
				if math.Abs(float64(g-want[i])) > 1e-6*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("st[%d] (key %d, lane %d) = %g, want %g", i, i/attnNR, i%attnNR, g, want[i])
				}
			}
		})
	}
}

// TestBoolRowSpans checks the keys each bool mask row shows against the
// row itself, for both values that hide (the bool_true_masks and
// bool_false_masks kinds), and the class of key blocks that spanClass
// derives from a span against boolRunClass's scan of the same keys.
func TestBoolRowSpans(t *testing.T) {
	rows := []struct {
		name  string
		shown string // one character a key: 1 shown, 0 hidden
		want  keySpan
	}{
		{"all shown", "11111111", keySpan{0, 8}},
		{"none shown", "00000000", keySpan{0, 0}},
		{"causal row", "11100000", keySpan{0, 3}},
		{"window row", "00011100", keySpan{3, 6}},
		{"window's lower edge to the end", "00000111", keySpan{5, 8}},
		{"two runs", "01100110", keySpan{-1, -1}},
		{"one key", "00010000", keySpan{3, 4}},
		{"a gap at the end", "11111110", keySpan{0, 7}},
		{"a key after a gap", "10000001", keySpan{-1, -1}},
	}
	for _, masked := range []bool{true, false} {
		mask := make([]bool, 0, 8*len(rows))
		for _, r := range rows {
			for _, c := range r.shown {
				mask = append(mask, (c == '0') == masked)
			}
		}
		spans := boolRowSpans(mask, 8, masked)
		for i, r := range rows {
			if spans[i] != r.want {
				t.Errorf("masked %v, %s: span %v, want %v", masked, r.name, spans[i], r.want)
				continue
			}
			if r.want.first < 0 {
				continue
			}
			row := mask[i*8 : (i+1)*8]
			for j0 := 0; j0 < 8; j0++ {
				for cols := 1; j0+cols <= 8; cols++ {
					if got, want := spanClass(spans[i], j0, cols), boolRunClass(row[j0:j0+cols], masked); got != want {
						t.Errorf("masked %v, %s, keys [%d, %d): class %d, scan %d", masked, r.name, j0, j0+cols, got, want)
					}
				}
			}
		}
	}
}

// TestPerKeyFillsHidden: a per-key additive mask of 0 and finfo.min
// (BERT's) gives the output of the bool mask hiding the same keys with
// -inf, bit for bit, where every row keeps a key (hidePerKeyFills); where
// a batch hides every key, or the causal cut leaves the first rows only
// hidden keys, those rows are uniform over the keys they see, as float32
// gives them in the export (s + finfo.min rounds to finfo.min), and not
// NaN.
func TestPerKeyFillsHidden(t *testing.T) {
	const b, h, s, d = 2, 3, 70, 8
	fmin := float32(-math.MaxFloat32)
	r := rand.New(rand.NewSource(5))
	q, k, v := randTensor(r, b, h, s, d), randTensor(r, b, h, s, d), randTensor(r, b, h, s, d)
	run := func(mask *ir.Tensor, kind string, attrs ...*ir.Attribute) []float32 {
		t.Helper()
		attrs = append(attrs, fAttr("scale", 0.35), sAttr("mask_kind", kind))
		out, err := runFusedAttention(&Context{Threads: 2}, attnNode(attrs...), []*ir.Tensor{q, k, v, mask})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Float32s()
	}
	// masks returns the additive mask and its bool form, hiding keys j of
	// batch n where hide(n, j).
	masks := func(hide func(n, j int) bool) (*ir.Tensor, *ir.Tensor) {
		add, bl := ir.NewTensor(ir.Float, []int{b, 1, 1, s}), ir.NewTensor(ir.Bool, []int{b, 1, 1, s})
		for n := range b {
			for j := range s {
				if hide(n, j) {
					add.Float32s()[n*s+j], bl.Bools()[n*s+j] = fmin, true
				}
			}
		}
		return add, bl
	}
	// row returns output row i of head hh in batch n.
	row := func(y []float32, n, hh, i int) []float32 { return y[((n*h+hh)*s+i)*d:][:d] }
	// meanV is the mean of V's rows [0, upto) of head hh in batch n.
	meanV := func(n, hh, upto int) []float64 {
		m := make([]float64, d)
		for j := range upto {
			for c := range d {
				m[c] += float64(v.Float32s()[((n*h+hh)*s+j)*d+c]) / float64(upto)
			}
		}
		return m
	}
	near := func(got []float32, want []float64) bool {
		for c := range got {
			if !(math.Abs(float64(got[c])-want[c]) <= 1e-5) { // NaN fails
				return false
			}
		}
		return true
	}

	t.Run("every row keeps a key: as the bool mask", func(t *testing.T) {
		add, bl := masks(func(n, j int) bool { return j < 5+n*3 || j%7 == 3 })
		for _, attrs := range [][]*ir.Attribute{nil, {iAttr("causal", 1), iAttr("causal_offset", 10)}} {
			got, want := run(add, MaskAdditive, attrs...), run(bl, MaskBoolTrueMasks, append(attrs, fAttr("mask_fill", float32(math.Inf(-1))))...)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("attrs %v: element %d = %g, the bool mask gives %g", attrs, i, got[i], want[i])
				}
			}
		}
	})
	t.Run("a batch hides every key: uniform", func(t *testing.T) {
		add, _ := masks(func(n, j int) bool { return n == 1 || j < 4 })
		y := run(add, MaskAdditive)
		for hh := range h {
			for i := range s {
				if !near(row(y, 1, hh, i), meanV(1, hh, s)) {
					t.Fatalf("batch 1, head %d, row %d: %v, want the mean of V", hh, i, row(y, 1, hh, i))
				}
			}
		}
	})
	t.Run("the cut leaves the first rows hidden keys only: uniform over them", func(t *testing.T) {
		add, _ := masks(func(n, j int) bool { return j < 3 })
		y := run(add, MaskAdditive, iAttr("causal", 1))
		for n := range b {
			for hh := range h {
				for i := range 3 {
					if !near(row(y, n, hh, i), meanV(n, hh, i+1)) {
						t.Fatalf("batch %d, head %d, row %d: %v, want the mean of V's first %d rows", n, hh, i, row(y, n, hh, i), i+1)
					}
				}
			}
		}
	})
}
