package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
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
