package ops

// FusedAttention's bias by a key grid's rows and columns (bias_grid) on
// the CPU. SAM's and ViTDet's image encoders add to the scores of query i
// and key j = (row a, column t) of a kh × kw grid of keys the sum
// rel_h[i, a] + rel_w[i, t]: kh + kw values a query instead of Sk. Each
// item lays its queries' kh + kw terms out transposed, one row of attnNR
// lanes per grid row and per grid column (gridItem), and a key block's
// terms are then a row added to a block of rows (gridTerms): every key of
// grid row a takes row a's terms plus its column's, a whole grid row at a
// time (kernel.AddRow32). The fast path's kernel adds that panel as a row
// bias (scoresExpPanel), the masked path as it adds a dense bias
// (biasPanel): the bias never takes Sq×Sk floats.

import "github.com/attnrun/attnrun/ops/internal/kernel"

// gridFloats is the worker scratch of a bias by a key grid: its queries'
// terms (gridItem) and one key block's panel of them (gridTerms); 0
// without one.
func (p *attnPlan) gridFloats() int {
	if p.biasGrid == 0 {
		return 0
	}
	return attnQBlock*(p.gridKH+p.biasGrid) + attnKBlock*attnNR
}

// gridItem lays out the grid terms of item (b, i0)'s rows queries in
// w.gridRC, panel by panel: kh rows (by grid row), then kw (by grid
// column), of attnNR lanes, lane c query q0 + c, times bias_scale; lanes
// past the item's rows are 0. With the AVX-512 tile, 16 queries' 16 terms
// at a time are one transposed block (kernel.TransposeScale16; the last
// block of terms overlaps the one before when 16 do not divide them): the
// element-by-element copy took 5-7% of SAM's windowed attention (25
// windows of 14×14, 12 heads, 2026-11-29 12:27 UTC).
func (p *attnPlan) gridItem(w *attnWork, b, i0, rows int) {
	terms, step := p.gridKH+p.biasGrid, p.bRowStep
	if rows%attnNR != 0 {
		clear(w.gridRC)
	}
	src := p.biasFloats[p.bOff[b]+i0*step:]
	r := 0
	if tileLoop {
		var scale [16]float32
		for i := range scale {
			scale[i] = p.biasScale
		}
		for ; r+16 <= rows; r += 16 {
			dst := w.gridRC[r/attnNR*terms*attnNR+r%attnNR:]
			a := 0
			for ; a+16 <= terms; a += 16 {
				_ = src[(r+15)*step+a+15]
				_ = dst[(a+15)*attnNR+15]
				kernel.TransposeScale16(&dst[a*attnNR], attnNR, &src[r*step+a], step, &scale[0])
			}
			if a < terms && terms >= 16 {
				// The last terms as a block that overlaps the one before.
				a = terms - 16
				kernel.TransposeScale16(&dst[a*attnNR], attnNR, &src[r*step+a], step, &scale[0])
				a = terms
			}
			for ; a < terms; a++ {
				for q := 0; q < 16; q++ {
					dst[a*attnNR+q] = src[(r+q)*step+a] * p.biasScale
				}
			}
		}
	}
	for ; r < rows; r++ {
		pn, c := r/attnNR, r%attnNR
		dst := w.gridRC[pn*terms*attnNR:]
		for a, x := range src[r*step:][:terms] {
			dst[a*attnNR+c] = x * p.biasScale
		}
	}
}

// gridTerms returns the bias terms of keys [j0, j0+cols) for panel pn of
// the current item (gridItem): a transposed panel in w.gridPanel, row key
// for key j0 + key, attnNR lanes a row. The fast path's kernel adds them
// in natural units: in base 2 (scoresBase2, which a grid bias does not
// take) the kernel saves less than a second copy of the terms costs
// (SAM's global attention at S=4096, 2026-11-29).
func (p *attnPlan) gridTerms(w *attnWork, pn, j0, cols int) []float32 {
	kh, kw := p.gridKH, p.biasGrid
	rc := w.gridRC[pn*(kh+kw)*attnNR:]
	out := w.gridPanel[:cols*attnNR]
	for j := j0; j < j0+cols; {
		a, t0 := j/kw, j%kw
		n := min(kw-t0, j0+cols-j) // keys left in grid row a
		addRow(out[(j-j0)*attnNR:(j-j0+n)*attnNR], rc[(kh+t0)*attnNR:], rc[a*attnNR:(a+1)*attnNR])
		j += n
	}
	return out
}

// addRow writes dst's rows of attnNR floats as src's plus row.
func addRow(dst, src, row []float32) {
	rows := len(dst) / attnNR
	if rows == 0 {
		return
	}
	if tileLoop && attnNR == 32 {
		_ = src[rows*attnNR-1]
		kernel.AddRow32(&dst[0], &src[0], &row[0], rows)
		return
	}
	for r := 0; r < rows; r++ {
		d, s := dst[r*attnNR:(r+1)*attnNR], src[r*attnNR:(r+1)*attnNR]
		for c, x := range row[:attnNR] {
			d[c] = s[c] + x
		}
	}
}

// largestGridTerm bounds bias_scale·(row term + column term) over the
// queries of a bias by a key grid at off (cutBounds): the largest row term
// plus the largest column term. NaN when a term is NaN.
func (p *attnPlan) largestGridTerm(off int) float64 {
	return p.largestTerm(p.biasFloats, off, p.bRowStep, 1, p.gridKH, p.biasScale) +
		p.largestTerm(p.biasFloats, off+p.gridKH, p.bRowStep, 1, p.biasGrid, p.biasScale)
}
