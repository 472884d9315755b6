package ops

// FusedAttention on the CPU, masks: each query row's class over a key
// block (classify), applying bool, additive and per-key masks and bias to
// a block's scores, the causal cut, and the bounds that decide whether a
// cut finite causal fill gives the export's result (cutBounds).

import (
	"bytes"
	"math"
	"slices"
	"unsafe"

	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Mask classes of one query row over one key block.
const (
	maskNone uint8 = iota // no score masked
	maskAll               // every score masked
	maskSome              // some masked: check each
	maskAdd               // additive mask: add it
)

// keyBiasRow is one distinct row of keyBias: the element offsets of a
// per-key mask's row and a per-key bias's row (-1: none).
type keyBiasRow struct{ mask, bias int }

// keyBiasRows returns, for every batch matrix, the index of its keyBias
// row, and the distinct rows: of the per-key mask (perKey) and of the
// per-key bias (perKeyBias), each batch matrix's pair.
func (p *attnPlan) keyBiasRows(perKey, perKeyBias bool) ([]int, []keyBiasRow) {
	rows := make([]keyBiasRow, p.batches)
	for b := range rows {
		rows[b] = keyBiasRow{mask: -1, bias: -1}
		if perKey {
			rows[b].mask = p.mOff[b]
		}
		if perKeyBias {
			rows[b].bias = p.bOff[b]
		}
	}
	return distinct(rows)
}

// fillKeyBias writes keyBias for the distinct rows: the per-key mask's
// term (0 or -inf for a bool mask, mask_scale·mask for an additive one; 0
// past the keys it covers) plus bias_scale·bias.
func (p *attnPlan) fillKeyBias(rows []keyBiasRow) {
	negInf := float32(math.Inf(-1))
	for i, r := range rows {
		kb := p.keyBias[i*p.sk : (i+1)*p.sk]
		clear(kb)
		if r.mask >= 0 {
			for j := range kb[:p.maskKeys] {
				at := r.mask + j*p.mColStep
				switch {
				case p.maskFloats != nil:
					kb[j] = p.maskFloats[at] * p.maskScale
				case p.maskBools[at] == p.maskedVal:
					kb[j] = negInf
				}
			}
		}
		if r.bias >= 0 {
			for j := range kb {
				kb[j] += p.biasFloats[r.bias+j*p.bColStep] * p.biasScale
			}
		}
	}
}

// hiddenAddLimit is the largest per-key additive mask value (times
// mask_scale) hidePerKeyFills takes for a hidden key: -2^127, so that
// float32's minimum (transformers' finfo.min masks) is one.
const hiddenAddLimit = -0x1p127

// hidePerKeyFills turns a per-key additive mask whose every term is 0 or at
// most hiddenAddLimit into the bool mask hiding the keys of the second kind
// with -inf, when every query row keeps a key: BERT's (1 - m)·finfo.min,
// BART's _expand_mask. In such a row the largest score is a kept one, and a
// hidden score s + F lies so far below it that its exponential is exactly
// 0 in float32, as -inf's is; the fast path then runs the base-2 kernel
// (scoresBase2), whose exponential costs half the FMA work: 7% of the op
// at S=512 with 12 heads on one thread. A batch whose keys are all hidden
// (the export's row is then uniform over them) or whose first query sees
// none under the causal cut keeps the additive mask, and so do runs where
// the mask's exact terms matter (a bias, unless by its diagonals and
// bounded: compactBiasBounded; a scores output, a softcap, a checked causal
// fill, key limits, zeroed rows).
func (p *attnPlan) hidePerKeyFills() {
	if p.maskFloats == nil || p.mRowStep != 0 || p.mColStep != 1 || p.maskKeys != p.sk || p.biasFloats != nil && !p.compactBiasBounded() ||
		p.scores != nil || p.softcap != 0 || p.clamps() || p.zeroRows || p.keyLim != nil || !math.IsInf(float64(p.causalFill), -1) {
		return
	}
	seen := map[int]bool{}
	for _, off := range p.mOff {
		if seen[off] {
			continue
		}
		seen[off] = true
		first := -1 // the row's first kept key
		for j, v := range p.maskFloats[off : off+p.sk] {
			switch t := v * p.maskScale; {
			case t == 0:
				if first < 0 {
					first = j
				}
			case !(t <= hiddenAddLimit):
				return
			}
		}
		if first < 0 || p.causal && first > p.causalOff {
			return
		}
	}
	bools := make([]bool, len(p.maskFloats))
	for i, v := range p.maskFloats {
		bools[i] = v*p.maskScale <= hiddenAddLimit
	}
	p.maskFloats, p.maskBools = nil, bools
	p.maskKind, p.maskedVal, p.fill = MaskBoolTrueMasks, true, float32(math.Inf(-1))
}

// masksPlain reports whether no mask changes a score of the item's rows
// in the current key block (mask classes cls); the causal cut and the key
// limit the fast path handles itself (scoresExpPanel).
func (p *attnPlan) masksPlain(cls []uint8) bool {
	if p.maskKind != "" {
		for _, c := range cls {
			if c != maskNone {
				return false
			}
		}
	}
	return true
}

// maskKeysFrom sets the scores of keys [from, cols) of lanes [c0, c1) of a
// transposed panel to -inf.
func maskKeysFrom(st []float32, from, cols, c0, c1 int) {
	negInf := float32(math.Inf(-1))
	for key := from; key < cols; key++ {
		row := st[key*attnNR : (key+1)*attnNR]
		for c := c0; c < c1; c++ {
			row[c] = negInf
		}
	}
}

// fillCausal sets to v (-inf: the cut) the scores of a transposed panel
// whose key (row key) lies past its query's (lane c's) diagonal: c < key +
// shift, with shift = j0 - q0 - causal_offset. Each key row fills its
// first lanes.
func fillCausal(st []float32, cols, shift int, v float32) {
	for key := max(0, 1-shift); key < cols; key++ {
		row := st[key*attnNR : (key+1)*attnNR]
		for c := range row[:min(key+shift, attnNR)] {
			row[c] = v
		}
	}
}

// cutBounds returns, for each batch matrix, the largest value a score past
// the causal diagonal could take with a finite causalFill: the fill, raised
// to a bool mask's finite fill where the mask replaces it, plus the largest
// additive mask term and (unless the bias comes first and the fill replaces
// it) the largest bias term of that matrix. A NaN or +inf term makes the
// bound fail every row's check, so those items run exactly.
func (p *attnPlan) cutBounds() []float64 {
	type key struct{ m, b int }
	seen := map[key]float64{}
	out := make([]float64, p.batches)
	for b := range out {
		k := key{-1, -1}
		if p.maskKind != "" {
			k.m = p.mOff[b]
		}
		if p.biasFloats != nil && !p.biasFirst {
			k.b = p.bOff[b]
		}
		if u, ok := seen[k]; ok {
			out[b] = u
			continue
		}
		u := float64(p.causalFill)
		switch {
		case p.maskFloats != nil:
			u += p.largestTerm(p.maskFloats, k.m, p.mRowStep, p.mColStep, p.maskKeys, p.maskScale)
		case p.maskKind != "" && !math.IsInf(float64(p.fill), -1):
			u = max(u, float64(p.fill))
		}
		switch {
		case k.b >= 0 && p.biasGrid > 0:
			u += p.largestGridTerm(k.b)
		case k.b >= 0:
			u += p.largestTerm(p.biasFloats, k.b, p.bRowStep, p.bColStep, p.sk, p.biasScale)
		}
		seen[k], out[b] = u, u
	}
	return out
}

// largestTerm returns the largest scale·x over the [Sq, keys] matrix of
// data at off with the given row and column steps (0: broadcast; a column
// step of -1 reads a bias by its diagonals), NaN when an element is NaN.
func (p *attnPlan) largestTerm(data []float32, off, rowStep, colStep, keys int, scale float32) float64 {
	rows, cols := 1, 1
	if rowStep != 0 {
		rows = p.sq
	}
	if colStep != 0 {
		cols = keys
	}
	hi, lo := float32(math.Inf(-1)), float32(math.Inf(1))
	for i := 0; i < rows; i++ {
		start := off + i*rowStep
		if colStep < 0 {
			start -= cols - 1 // a bias by its diagonals: the row runs backwards from start
		}
		row := data[start:]
		if colStep == 0 {
			row = row[:1]
		} else {
			row = row[:cols]
		}
		h, l := maxMin32(row)
		hi, lo = max(hi, h), min(lo, l)
	}
	// scale·x is largest at the largest x for scale ≥ 0, at the smallest
	// otherwise; max and min keep a NaN, and so does the product.
	if scale >= 0 {
		return float64(scale * hi)
	}
	return float64(scale * lo)
}

// maxMin32 returns the largest and smallest of xs (NaN when one is NaN;
// -inf and +inf when xs is empty), four lanes at a time.
func maxMin32(xs []float32) (hi, lo float32) {
	inf := float32(math.Inf(1))
	h0, h1, h2, h3 := -inf, -inf, -inf, -inf
	l0, l1, l2, l3 := inf, inf, inf, inf
	n := len(xs) / 4 * 4
	for i := 0; i < n; i += 4 {
		x := xs[i : i+4 : i+4]
		h0, h1, h2, h3 = max(h0, x[0]), max(h1, x[1]), max(h2, x[2]), max(h3, x[3])
		l0, l1, l2, l3 = min(l0, x[0]), min(l1, x[1]), min(l2, x[2]), min(l3, x[3])
	}
	for _, x := range xs[n:] {
		h0, l0 = max(h0, x), min(l0, x)
	}
	return max(h0, h1, h2, h3), min(l0, l1, l2, l3)
}

// keySpan is the keys one row of a bool mask shows: exactly those in
// [first, end) when first ≥ 0 (first = end: none); first < 0 when they are
// not one run.
type keySpan struct{ first, end int32 }

// maskSpansKey keys a constant bool mask's row spans in Context.Memo.
type maskSpansKey struct {
	data   *bool
	n, row int
	masked bool
}

// boolMaskSpans returns the spans of the bool mask's rows (indexed by a
// row's first element offset over its row length), or nil where rows are
// not laid out one after another. Classifying a key block by a row's
// span costs nothing, where scanning its keys cost a pass over the mask
// per head: at S=4096 a sliding window's [S, S] mask was scanned by each
// of 16 heads, 12% of the op. A constant mask's spans are worked out once
// (Context.Memo), another's once a run.
func (p *attnPlan) boolMaskSpans(ctx *Context) []keySpan {
	row := p.mRowStep
	if p.maskBools == nil || p.mColStep != 1 || row == 0 || len(p.maskBools)%row != 0 || len(p.maskBools)/row > math.MaxInt32 {
		return nil
	}
	for _, off := range p.mOff {
		if off%row != 0 {
			return nil
		}
	}
	build := func() any { return boolRowSpans(p.maskBools, row, p.maskedVal) }
	key := maskSpansKey{data: unsafe.SliceData(p.maskBools), n: len(p.maskBools), row: row, masked: p.maskedVal}
	if v, ok := ctx.memoOf(3, key, build).([]keySpan); ok {
		return v
	}
	return build().([]keySpan)
}

// boolRowSpans returns the span of each row of rowLen elements of mask,
// whose elements equal to masked hide a key.
func boolRowSpans(mask []bool, rowLen int, masked bool) []keySpan {
	bs := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(mask))), len(mask))
	shown, hidden := boolByte(!masked), boolByte(masked)
	spans := make([]keySpan, len(mask)/rowLen)
	for r := range spans {
		row := bs[r*rowLen : (r+1)*rowLen]
		first := bytes.IndexByte(row, shown)
		if first < 0 {
			continue // {0, 0}: none shown
		}
		end := first + bytes.IndexByte(row[first:], hidden)
		if end < first {
			end = rowLen
		} else if bytes.IndexByte(row[end:], shown) >= 0 {
			spans[r] = keySpan{-1, -1}
			continue
		}
		spans[r] = keySpan{int32(first), int32(end)}
	}
	return spans
}

// boolByte is a bool's byte (0 or 1).
func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// spanClass is the mask class of keys [j0, j0+cols) of a row with span sp
// (sp.first ≥ 0).
func spanClass(sp keySpan, j0, cols int) uint8 {
	lo, hi := max(int(sp.first), j0), min(int(sp.end), j0+cols)
	switch {
	case lo >= hi:
		return maskAll
	case lo == j0 && hi == j0+cols:
		return maskNone
	}
	return maskSome
}

// classify sets the mask class of each query row for keys [j0, j0+cols)
// and reports whether the block has to be computed at all (false when a
// -inf fill hides every key of the block from every row).
func (p *attnPlan) classify(cls []uint8, b, i0, j0, cols int) bool {
	if p.maskFloats != nil {
		for r := range cls {
			cls[r] = maskAdd
		}
		return true
	}
	all := true
	for r := range cls {
		if r > 0 && p.mRowStep == 0 {
			cls[r] = cls[0] // the mask row is broadcast over queries
			continue
		}
		off := p.mOff[b] + (i0+r)*p.mRowStep + j0*p.mColStep
		switch {
		case p.mColStep == 0:
			cls[r] = maskNone
			if p.maskBools[off] == p.maskedVal {
				cls[r] = maskAll
			}
		case p.maskSpans != nil && p.maskSpans[(off-j0)/p.mRowStep].first >= 0:
			cls[r] = spanClass(p.maskSpans[(off-j0)/p.mRowStep], j0, cols)
		default:
			cls[r] = boolRunClass(p.maskBools[off:off+cols], p.maskedVal)
		}
		all = all && cls[r] == maskAll
	}
	if p.mRowStep == 0 {
		all = cls[0] == maskAll
	}
	return !all || !math.IsInf(float64(p.fill), -1)
}

// hiddenPrefixes reports, for a key block [j0, j0+cols) whose rows' bool
// masks each hide a run of its first keys and nothing after (some rows
// some keys: the lower edge of a sliding window), the block's keys
// [lo, hi) that some row hides and others see, lo rounded down and hi up
// to whole slivers of attnMR keys: every row hides the keys before lo and
// sees those from hi. ok is false for other blocks, with a per-key mask,
// and where the block runs whole anyway (exact, the scores an output, a
// key limit or mask end inside the block, bf16).
func (p *attnPlan) hiddenPrefixes(cls []uint8, b, i0, j0, cols int, exact bool) (lo, hi int, ok bool) {
	if p.maskBools == nil || p.mRowStep == 0 || p.mColStep != 1 || exact || p.scores != nil || p.bf16 || p.clamps() ||
		p.keyLim != nil || j0+cols > p.maskKeys || !slices.Contains(cls, maskSome) {
		return 0, 0, false
	}
	lo, hi = cols, 0
	for r, c := range cls {
		first := 0 // the row's first key it sees
		switch c {
		case maskAll:
			first = cols
		case maskSome:
			off := p.mOff[b] + (i0+r)*p.mRowStep + j0
			if p.maskSpans != nil && p.maskSpans[(off-j0)/p.mRowStep].first >= 0 {
				sp := p.maskSpans[(off-j0)/p.mRowStep]
				if int(sp.end) < j0+cols {
					return 0, 0, false // a hidden key after a seen one
				}
				first = int(sp.first) - j0 // > 0: the row's class is maskSome
				break
			}
			mk := p.maskBools[off : off+cols]
			for first < cols && mk[first] == p.maskedVal {
				first++
			}
			if boolRunClass(mk[first:], p.maskedVal) != maskNone {
				return 0, 0, false // a hidden key after a seen one
			}
		}
		lo, hi = min(lo, first), max(hi, first)
	}
	lo, hi = lo/attnMR*attnMR, min(cols, ceilTo(hi, attnMR))
	return lo, hi, lo > 0 || hi < cols
}

// boolRunClass tells whether none, all or some of mk equal masked.
func boolRunClass(mk []bool, masked bool) uint8 {
	if len(mk) == 0 {
		return maskNone
	}
	bs := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(mk))), len(mk))
	var hit, miss bool
	words := len(bs) / 8
	if words > 0 {
		ws := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(bs))), words)
		const ones = 0x0101010101010101
		mw := uint64(0)
		if masked {
			mw = ones
		}
		for _, x := range ws {
			switch x {
			case mw:
				hit = true
			case mw ^ ones:
				miss = true
			default:
				return maskSome
			}
			if hit && miss {
				return maskSome
			}
		}
	}
	for _, v := range mk[words*8:] {
		if v == masked {
			hit = true
		} else {
			miss = true
		}
	}
	switch {
	case hit && miss:
		return maskSome
	case hit:
		return maskAll
	}
	return maskNone
}

// maskPanel masks one transposed scores panel: lane c is query i0+c, row
// key is key j0+key.
func (p *attnPlan) maskPanel(st []float32, cls []uint8, b, i0, j0, cols int) {
	if p.maskFloats != nil { // additive: every lane is maskAdd
		addPanel(st, p.maskFloats, p.mOff[b]+i0*p.mRowStep+j0*p.mColStep, p.mRowStep, p.mColStep, cols, len(cls), p.maskScale)
		return
	}
	for c, k := range cls {
		if k == maskNone {
			continue
		}
		off := p.mOff[b] + (i0+c)*p.mRowStep + j0*p.mColStep
		switch k {
		case maskAll:
			for key := 0; key < cols; key++ {
				st[key*attnNR+c] = p.fill
			}
		case maskSome:
			for key, v := range p.maskBools[off : off+cols] {
				if v == p.maskedVal {
					st[key*attnNR+c] = p.fill
				}
			}
		}
	}
}

// biasPanel adds bias_scale·bias to one transposed scores panel (panel pn
// of worker w's item): lane c is query i0+c, row key is key j0+key.
func (p *attnPlan) biasPanel(st []float32, w *attnWork, pn, b, i0, j0, cols, lanes int) {
	if p.biasGrid > 0 {
		terms := p.gridTerms(w, pn, j0, cols) // lanes past the item's rows hold 0
		if tileLoop {
			kernel.AddVV(&st[0], &st[0], &terms[0], cols*attnNR)
			return
		}
		for i, x := range terms {
			st[i] += x
		}
		return
	}
	addPanel(st, p.biasFloats, p.bOff[b]+i0*p.bRowStep+j0*p.bColStep, p.bRowStep, p.bColStep, cols, lanes, p.biasScale)
}

// addPanel adds sc·src to a transposed scores panel, src query-major:
// st[key·NR + c] += sc·src[off + c·rowStep + key·colStep] for lanes
// c < lanes and keys < cols. With the AVX-512 tile and src's keys
// contiguous (colStep 1; rowStep 0 broadcasts one row over the queries,
// ALiBi's or a padding mask's), 16×16 blocks are transposed and added in
// registers (kernel.TransposeAdd16, one rounding: a fused multiply-add);
// the rest element by element. A bias by its diagonals (rowStep 1, colStep
// -1) is added row by row.
func addPanel(st, src []float32, off, rowStep, colStep, cols, lanes int, sc float32) {
	if rowStep == 1 && colStep == -1 {
		// A bias by its diagonals: key row key reads its lanes' terms
		// forward from off − key.
		for key := 0; key < cols; key++ {
			row := st[key*attnNR : key*attnNR+lanes]
			for c, v := range src[off-key : off-key+lanes] {
				row[c] += v * sc
			}
		}
		return
	}
	c0 := 0
	if tileLoop && colStep == 1 {
		full := cols &^ 15
		for ; c0+16 <= lanes && full > 0; c0 += 16 {
			_ = src[off+(c0+15)*rowStep+full-1]
			_ = st[(full-1)*attnNR+c0+15]
			for k := 0; k < full; k += 16 {
				kernel.TransposeAdd16(&st[k*attnNR+c0], attnNR, &src[off+c0*rowStep+k], rowStep, sc)
			}
			for c := c0; c < c0+16; c++ {
				for key := full; key < cols; key++ {
					st[key*attnNR+c] += src[off+c*rowStep+key] * sc
				}
			}
		}
	}
	for c := c0; c < lanes; c++ {
		at := off + c*rowStep
		if colStep == 0 {
			add := src[at] * sc
			for key := 0; key < cols; key++ {
				st[key*attnNR+c] += add
			}
			continue
		}
		for key, v := range src[at : at+cols] {
			st[key*attnNR+c] += v * sc
		}
	}
}
