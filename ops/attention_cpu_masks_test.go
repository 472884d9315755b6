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
