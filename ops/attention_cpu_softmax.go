package ops

// FusedAttention on the CPU, the scores and the streaming softmax of one
// key block: the fast path of scores and exponentials in one kernel
// (scoresExpPanel), the general path (scoresSoftmax: masks, bias, softcap,
// the scores output), the running shift and its rescale, and the weights
// output.

import (
	"math"

	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// log2E32 and ln2F32 are log2 e and ln 2 in float32:
// kernel.ScoresExp8x32Base2 works in base 2 (scores times log2 e), the
// running shifts in natural units.
const (
	log2E32 = float32(math.Log2E)
	ln2F32  = float32(math.Ln2)
)

// scoresExpPanel turns the scores of keys [j0, j0+cols) (cols stops at the
// key limit) of panel pn (queries [q0, q0+lanes), their packed Q in qpan:
// scale·Qᵀ, in bf16 with scoresBase2 times log2 e; fp32 with scoresBase2
// also has it times log2 e in w.qp2), plus the per-key mask bias[key] when
// bias is not nil (it starts at key j0) and a bias by its diagonals
// (rowBias), into probabilities under the panel's running shifts w.m,
// adding their sums to w.l, and returns how
// many of the block's keys the probabilities cover: with causal masking,
// those up to the last query's diagonal.
//
// Whole tiles of 8 keys that every lane sees (before the first query's
// diagonal) run through kernel.ScoresExp8x32 (in bf16
// kernel.ScoresExpBF16x32, which stores the probabilities as pair words at
// the start of the panel's st, and kp is the batch's packed K) in one pass:
// a tile rising above a lane's limit (shiftLimit) stops the kernel; the
// shift moves up to the tile's maximum plus a headroom (attnShiftHeadroom,
// raiseShift; P·V applies the move: moveShifts) and the kernel resumes at
// that tile. With
// scoresBase2 the base-2 kernels (kernel.ScoresExp8x32Base2,
// kernel.ScoresExpBF16x32Base2) take base-2 scores and shifts (shift2: w.m
// times log2 e, then the maxima they stopped at plus the headroom:
// raiseShiftBase2), and their 2^(x − shift) are the probabilities e^(x − m)
// up to the rounding of those products; the bias is 0 or -inf, the same in
// either unit. The rest — the at most 5 tiles straddling the panel's causal
// diagonal and a last partial sliver of keys (packed in kp) — is computed
// raw (in bf16 into w.pwf, taken back to natural units by lnTwoScores, then
// paired after the kernel's tiles), masked, and goes through colMax and
// expCols in natural units.
func (p *attnPlan) scoresExpPanel(w *attnWork, pn, b, q0, lanes, j0, cols int, bias, kp, qpan []float32) int {
	plain := cols
	if p.causal {
		cols = min(cols, q0+lanes+p.causalOff-j0) // keys past the last query's diagonal: hidden from every lane
		plain = min(cols, q0+p.causalOff+1-j0)    // keys up to the first query's diagonal: seen by every lane
	}
	if cols <= 0 {
		return 0
	}
	st := w.st[pn*attnNR*attnKBlock:]
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	var suma, mxa, shift2a, lima [maxLanes]float32
	sum, mx, shift2, lim := suma[:attnNR], mxa[:attnNR], shift2a[:attnNR], lima[:attnNR]
	full := max(plain, 0) / attnMR
	var grid []float32 // a bias by a key grid: the block's terms
	if p.biasGrid > 0 {
		grid = p.gridTerms(w, pn, j0, cols)
	}
	var k []float32
	dw := (p.d + 1) / 2 // bf16: K's and Q's pair words per key and query
	if !p.bf16 {
		k = p.k.data[p.k.off[b]+j0*p.k.rs:]
	}
	if p.scoresBase2 {
		for c, v := range m {
			shift2[c] = v * log2E32
		}
	}
	for done := 0; done < full; {
		var bp, rb *float32
		if bias != nil {
			bp = &bias[done*attnMR]
		}
		rbs := -1 // the row bias's step a key: -1 by diagonals, attnNR by grid
		switch {
		case p.rowBias != nil:
			// Key j0 + done·MR's row of terms, queries from q0.
			at := p.rowBiasIndex(b, q0, j0+done*attnMR)
			rb = &p.rowBias[at]
			if p.scoresBase2 {
				rb = &p.rowBias2[at]
			}
		case grid != nil:
			rb, rbs = &grid[done*attnMR*attnNR], attnNR
		}
		if p.scoresBase2 {
			for c, v := range shift2 {
				lim[c] = shiftLimitBase2(v)
			}
		} else {
			for c, v := range m {
				lim[c] = shiftLimit(v)
			}
		}
		switch {
		case p.scoresBase2:
			if p.bf16 {
				done += kernel.ScoresExpBF16x32Base2(dw, &wordsOf(kp)[(j0+done*attnMR)*dw], dw, &wordsOf(qpan)[0], &wordsOf(st)[done*attnMR/2*attnNR], full-done, attnMR*dw,
					&shift2[0], &lim[0], &sum[0], &mx[0], bp, rb, rbs)
			} else {
				done += kernel.ScoresExp8x32Base2(p.d, &k[done*attnMR*p.k.rs], p.k.rs, &w.qp2[pn*attnNR*p.d], &st[done*attnMR*attnNR], attnNR, full-done, attnMR*p.k.rs, attnMR*attnNR,
					&shift2[0], &lim[0], &sum[0], &mx[0], bp, rb, rbs)
			}
			if done < full {
				p.raiseShiftBase2(w, pn, mx, shift2, lim, done*attnMR, sum)
			}
			continue
		case p.bf16:
			done += kernel.ScoresExpBF16x32(dw, &wordsOf(kp)[(j0+done*attnMR)*dw], dw, &wordsOf(qpan)[0], &wordsOf(st)[done*attnMR/2*attnNR], full-done, attnMR*dw,
				&m[0], &lim[0], &sum[0], &mx[0], bp, rb, rbs)
		default:
			done += kernel.ScoresExp8x32(p.d, &k[done*attnMR*p.k.rs], p.k.rs, &qpan[0], &st[done*attnMR*attnNR], attnNR, full-done, attnMR*p.k.rs, attnMR*attnNR,
				&m[0], &lim[0], &sum[0], &mx[0], bp, rb, rbs)
		}
		if done < full {
			p.raiseShift(w, pn, mx, done*attnMR, sum)
		}
	}
	if rest := cols - full*attnMR; rest > 0 {
		// Raw scores: slivers of K's rows in place, then K's packed
		// partial last sliver when the block reaches it.
		raw := st[full*attnMR*attnNR:]
		slivers := (rest + attnMR - 1) / attnMR
		tail0 := p.sk / attnMR * attnMR
		inPlace := min(slivers, max(0, (tail0-j0)/attnMR-full))
		switch {
		case p.bf16:
			raw = w.pwf
			scoresBF16(raw, wordsOf(kp), wordsOf(qpan), p.d, j0+full*attnMR, slivers*attnMR)
			p.lnTwoScores(raw[:slivers*attnMR*attnNR])
		case inPlace > 0:
			kernel.Sgemm8x32RowsLoop(p.d, &k[full*attnMR*p.k.rs], p.k.rs, &qpan[0], &raw[0], attnNR, inPlace, attnMR*p.k.rs, 0, attnMR*attnNR, false)
		}
		if !p.bf16 && inPlace < slivers {
			kernel.Sgemm8x32Loop(p.d, &kp[0], &qpan[0], &raw[inPlace*attnMR*attnNR], attnMR, attnNR, 1, 0, 0, 0, false)
		}
		if bias != nil {
			for key, v := range bias[full*attnMR : full*attnMR+rest] {
				row := raw[key*attnNR : (key+1)*attnNR]
				for c := range row {
					row[c] += v
				}
			}
		}
		if p.rowBias != nil {
			at := p.rowBiasIndex(b, q0, j0+full*attnMR)
			for key := 0; key < rest; key++ {
				kernel.AddVV(&raw[key*attnNR], &raw[key*attnNR], &p.rowBias[at-key], attnNR)
			}
		}
		if grid != nil {
			kernel.AddVV(&raw[0], &raw[0], &grid[full*attnMR*attnNR], rest*attnNR)
		}
		if p.causal {
			fillCausal(raw[:rest*attnNR], rest, j0+full*attnMR-q0-p.causalOff, float32(math.Inf(-1)))
		}
		for c := range mx {
			mx[c] = float32(math.Inf(-1))
		}
		colMax(raw, rest, mx)
		p.raiseShift(w, pn, mx, full*attnMR, sum)
		shift := mxa[:attnNR] // as the kernel: a shift of -Inf subtracts 0
		for c, v := range m {
			shift[c] = v
			if v == float32(math.Inf(-1)) {
				shift[c] = 0
			}
		}
		expCols(raw, rest, shift, sum)
		if p.bf16 {
			kernel.PairRowsBF16x32(&wordsOf(st)[full*attnMR/2*attnNR], &raw[0], rest)
		}
	}
	l := w.l[pn*attnNR : (pn+1)*attnNR]
	for c, v := range sum {
		l[c] += float64(v)
	}
	return cols
}

// lnTwoScores takes raw bf16 scores computed from Q packed times log2 e
// (scoresBase2) back to natural units, in place: the masks, the causal
// fill and colMax/expCols work in natural units.
func (p *attnPlan) lnTwoScores(st []float32) {
	if p.bf16 && p.scoresBase2 && len(st) > 0 {
		kernel.MulVS(&st[0], &st[0], ln2F32, len(st))
	}
}

// attnShiftHeadroom bounds how far above a lane's maximum the fast path
// puts the lane's running shift when it moves it (natural units): by
// min(attnShiftHeadroom, |maximum|). A kernel stop costs a tile computed
// twice and a rescale. Under a shift at the maximum itself, a row whose
// scores keep climbing stopped the kernel at every attnRescaleSlack (8) of
// climb, and the maximum of n scores of spread σ climbs like σ·√(2 ln n):
// trained models' logits (σ of 4 to 16 and more) stopped it on most tiles
// of the first blocks, where the random weights of the benchmarks' exports
// (σ ≈ 0.1) never do. With the headroom a lane stops every 24 of climb
// once its scores are 16 or more in size.
//
// The bound by |maximum| keeps the last bits. The probabilities' arguments
// x − shift are computed in float32, and a shift far above small scores
// rounds them coarser: an unbounded headroom of 16 doubled the largest
// error of the bundled models against PyTorch (attnrun conform models/,
// median 1.66×, up to 4×); bounded, the shift stays within twice the
// maximum's size, one binade, and the errors moved by at most one ulp
// (median 1.0×, up to 2×, some down). The probabilities are at most e^-16
// of the row's largest, far above float32's smallest normal (e^-87).
//
// BenchmarkFusedAttentionLogitSpread (seed 000's shapes, 2 threads, the
// test binaries before and after alternating, three rounds, median of the
// per-round ratios, 2026-11-25): logits of σ 4 at S=512 and 2048 took
// 0.91× and 0.97× the time in fp32, 0.86× and 0.92× in bf16; σ 16 0.74×
// and 0.92× in fp32, 0.82× and 0.89× in bf16; σ 1 1.00× and 1.01× at
// S=2048 (at S=512 the build before's rounds spread 1.70–1.93 ms).
//
// A causal cut checked against hiddenMax reads the running shift as a
// lower bound of the row's maximum: there the shift moves to the maximum
// itself (shiftHeadroom).
const attnShiftHeadroom = 16

// shiftHeadroom is attnShiftHeadroom, or 0 where the item compares its
// running shifts with hiddenMax as the rows' maxima.
func (p *attnPlan) shiftHeadroom() float32 {
	if p.hiddenMax != nil {
		return 0
	}
	return attnShiftHeadroom
}

// raiseShift moves up the running shifts of panel pn's lanes where the
// maxima mx of the scores since (natural units) rise above their limits
// (shiftLimit), to the maximum plus the headroom (the smaller of
// shiftHeadroom and |maximum|); and with them, as the rescale costs the
// same for every lane, the shift of every lane whose maximum is above its
// shift at all (moveShifts).
func (p *attnPlan) raiseShift(w *attnWork, pn int, mx []float32, keys int, sum []float32) {
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	head := p.shiftHeadroom()
	var ta [maxLanes]float32
	target := ta[:attnNR]
	must := false
	for c := range m {
		target[c] = m[c]
		over := mx[c] > shiftLimit(m[c])
		must = must || over
		if over || (head > 0 && mx[c] > m[c]) {
			target[c] = mx[c] + min(head, abs32(mx[c]))
		}
	}
	if must {
		p.moveShifts(w, pn, target, keys, sum)
	}
}

// raiseShiftBase2 is raiseShift where kernel.ScoresExp8x32Base2 stopped,
// with its maxima mx, the shifts it ran under (shift2) and their limits
// (lim) in base 2: the lanes it stopped for (mx > lim, as the kernel
// compares), and the others above their shift, move their shift2 up to mx
// plus the headroom in base 2 (the smaller of shiftHeadroom·log2 e and
// |mx|) and their natural shift to that times ln 2, so that the kernel
// passes that tile when called again.
func (p *attnPlan) raiseShiftBase2(w *attnWork, pn int, mx, shift2, lim []float32, keys int, sum []float32) {
	head2 := p.shiftHeadroom() * log2E32
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	var ta [maxLanes]float32
	target := ta[:attnNR]
	for c := range shift2 {
		target[c] = m[c]
		if mx[c] > lim[c] || (head2 > 0 && mx[c] > shift2[c]) {
			shift2[c] = mx[c] + min(head2, abs32(mx[c]))
			target[c] = shift2[c] * ln2F32
		}
	}
	p.moveShifts(w, pn, target, keys, sum)
}

// attnSlackCap bounds how far a lane's scores may climb above its running
// shift before the fast path stops and moves the shift (natural units):
// the lane's limit is shift + attnSlackCap for a shift of 0 or more, and
// shift + max(attnRescaleSlack, min(attnSlackCap, |shift|)) below 0
// (shiftLimit). A fixed slack of 8 stopped the scores kernel at every 8 of
// climb past the headroom: logits of spread 16 stopped it 11 times a panel
// at S=512 and 17 at S=2048, each stop a recomputed tile and a rescale of
// the block so far, and made the op 1.44× slower than at spread 1
// (BenchmarkFusedAttentionLogitSpread, 2026-11-25).
//
// The slack costs no bits where the shift is 0 or more: a score x that
// climbed above it by x − shift is at least that large itself, so the
// argument's rounding is within the score's own. Below 0 the bound by
// |shift| keeps the argument within the shift's size, as the headroom's
// bound does. The cap keeps the probabilities at most e^24 ≈ 2.6e10, far
// from overflow: their sums, and P·V's accumulators while |V| stays below
// 1e28/Sk.
const attnSlackCap = 24

// shiftLimit is the largest score a lane with running shift s takes
// before the fast path moves its shift (natural units; -Inf for a shift
// of -Inf, NaN for NaN).
func shiftLimit(s float32) float32 {
	return limitAbove(s, attnRescaleSlack, attnSlackCap)
}

// shiftLimitBase2 is shiftLimit in base 2: the limit of a base-2 shift s2,
// the kernel's units (kernel.ScoresExp8x32Base2).
func shiftLimitBase2(s2 float32) float32 {
	return limitAbove(s2, attnRescaleSlack*log2E32, attnSlackCap*log2E32)
}

// limitAbove is s + most for s ≥ 0, else s + max(least, min(most, −s)).
func limitAbove(s, least, most float32) float32 {
	if s >= 0 {
		return s + most
	}
	return s + max(least, min(most, -s))
}

// abs32 is |x| for float32.
func abs32(x float32) float32 {
	return math.Float32frombits(math.Float32bits(x) &^ (1 << 31))
}

// moveShifts moves the running shift of panel pn's lanes up to target
// (natural units; a lane whose target is its shift keeps it): the running
// sums of earlier blocks and this block's sums so far are rescaled by
// exp(old − new) at once; the accumulator and this block's probabilities
// of the first keys keys, computed under the old shifts, are not. The move
// is recorded as a segment of the block instead (w.segs[pn]), and P·V
// rescales the accumulator once it has added those keys (item, segment by
// segment): a rescale of dv·32 accumulators where the probabilities would
// have been up to a block of keys times 32 (in bf16, pair words rescaled
// lane by lane). BenchmarkFusedAttentionLogitSpread, against rescaling
// them (2026-11-25, test binaries alternating, three rounds): bf16 at
// spread 16 1.51–1.53 → 1.19–1.27 ms (S=512), 17.9–18.2 → 15.3–15.5 ms
// (S=2048), at spread 64 3.24–3.35 → 1.81–1.87 and 26.3–27.2 → 18.8–19.2
// ms; fp32 at spread 64 3.00–3.03 → 2.79–2.81 and 33.6–35.3 → 32.0–32.6
// ms; spreads 1 to 16 in fp32 within the noise. A lane with nothing
// finite so far (shift -Inf) takes its target without a rescale: its sums,
// accumulator and probabilities are 0 or NaN, which a factor of 1 leaves
// as they are.
func (p *attnPlan) moveShifts(w *attnWork, pn int, target []float32, keys int, sum []float32) {
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	l := w.l[pn*attnNR : (pn+1)*attnNR]
	var seg attnSegment
	corr := seg.corr[:attnNR]
	rescale := false
	for c := range m {
		corr[c] = 1
		if target[c] == m[c] {
			continue
		}
		if m[c] != float32(math.Inf(-1)) {
			corr[c] = fastExp32(m[c] - target[c])
			rescale = true
		}
		m[c] = target[c]
	}
	if !rescale {
		return
	}
	for c, f := range corr {
		l[c] *= float64(f)
		sum[c] *= f
	}
	seg.keys = keys
	w.segs[pn] = append(w.segs[pn], seg)
}

// attnSegment is a move of a panel's running shifts within a key block
// (moveShifts): the block's probabilities of keys before keys were
// computed under the shifts before the move, and the accumulator is
// multiplied by corr (exp(old − new) per lane) once P·V has added them.
type attnSegment struct {
	keys int
	corr [maxLanes]float32
}

// scoresSoftmax computes the scores of key block [j0, j0+cols) for the
// item's rows (transposed panels in w.st), applies softcap, masks, bias,
// key limit and causal cut, writes the scores output's stages, and turns
// each panel into probabilities under the running shifts (softmaxPanel).
func (p *attnPlan) scoresSoftmax(w *attnWork, acc []float32, dvPad, b, i0, j0, rows, cols, lim int, kp, qp []float32, exact bool) {
	d, sk, kb := p.d, p.sk, attnKBlock
	panels := (rows + attnNR - 1) / attnNR
	colsPad := ceilTo(cols, attnMR)
	// Scores, transposed: MR keys × NR queries per tile.
	switch {
	case p.bf16:
		dw := (d + 1) / 2
		for pn := 0; pn < panels; pn++ {
			scoresBF16(w.st[pn*attnNR*kb:], wordsOf(kp), wordsOf(qp[pn*attnNR*dw:]), d, j0, colsPad)
			p.lnTwoScores(w.st[pn*attnNR*kb : pn*attnNR*kb+colsPad*attnNR])
		}
	case p.kInPlace:
		// Slivers before K's partial last one read K's rows in place;
		// that one (at most one, the block's last) is packed in kp.
		slivers := colsPad / attnMR
		inPlace := min(slivers, max(0, (sk/attnMR*attnMR-j0)/attnMR))
		for pn := 0; pn < panels; pn++ {
			st, qpan := w.st[pn*attnNR*kb:], qp[pn*attnNR*d:]
			if inPlace > 0 {
				kernel.Sgemm8x32RowsLoop(d, &p.k.data[p.k.off[b]+j0*p.k.rs], p.k.rs, &qpan[0], &st[0], attnNR, inPlace, attnMR*p.k.rs, 0, attnMR*attnNR, false)
			}
			if inPlace < slivers {
				kernel.Sgemm8x32Loop(d, &kp[0], &qpan[0], &st[inPlace*attnMR*attnNR], attnMR, attnNR, 1, 0, 0, 0, false)
			}
		}
	case tileLoop:
		for pn := 0; pn < panels; pn++ {
			kernel.Sgemm8x32Loop(d, &kp[j0*d], &qp[pn*attnNR*d], &w.st[pn*attnNR*kb], attnMR, attnNR, colsPad/attnMR, attnMR*d, 0, attnMR*attnNR, false)
		}
	default:
		for ks := 0; ks*attnMR < colsPad; ks++ {
			a := kp[(j0+ks*attnMR)*d : (j0+ks*attnMR+attnMR)*d]
			for pn := 0; pn < panels; pn++ {
				blas.MicroKernel(d, a, qp[pn*attnNR*d:(pn+1)*attnNR*d], w.st[pn*attnNR*kb+ks*attnMR*attnNR:], attnNR, false)
			}
		}
	}
	for pn := 0; pn < panels; pn++ {
		st := w.st[pn*attnNR*kb : pn*attnNR*kb+cols*attnNR]
		lanes := min(attnNR, rows-pn*attnNR)
		q0 := i0 + pn*attnNR
		if p.scoresMode == ScoresRaw {
			p.writeScores(st, b, q0, j0, cols, lanes)
		}
		if p.softcap > 0 {
			softcapScores(st, p.softcap)
		}
		if p.scoresMode == ScoresSoftcapped {
			p.writeScores(st, b, q0, j0, cols, lanes)
		}
		if p.biasFloats != nil && p.biasFirst {
			p.biasPanel(st, w, pn, b, q0, j0, cols, lanes)
		}
		if exact && p.causal && j0+cols-1 > q0+p.causalOff {
			fillCausal(st, cols, j0-q0-p.causalOff, p.causalFill)
		}
		if p.maskKind != "" {
			if mcols := min(cols, p.maskKeys-j0); mcols > 0 {
				p.maskPanel(st, w.cls[pn*attnNR:pn*attnNR+lanes], b, q0, j0, mcols)
			}
		}
		if p.biasFloats != nil && !p.biasFirst {
			p.biasPanel(st, w, pn, b, q0, j0, cols, lanes)
		}
		if p.clamps() {
			clampScores(st, p.scoresMin)
		}
		if j0+cols > lim {
			maskKeysFrom(st, max(0, lim-j0), cols, 0, attnNR)
		}
		if p.causal && !exact && j0+cols-1 > q0+p.causalOff {
			fillCausal(st, cols, j0-q0-p.causalOff, float32(math.Inf(-1)))
		}
		if p.scoresMode == ScoresBiased || p.scoresMode == ScoresWeights {
			p.writeScores(st, b, q0, j0, cols, lanes)
		}
		p.softmaxPanel(st, cols, w, pn, acc, dvPad)
	}
}

// writeScores copies a transposed panel (keys [j0, j0+cols) of queries
// [q0, q0+lanes)) into the scores output of batch b.
func (p *attnPlan) writeScores(st []float32, b, q0, j0, cols, lanes int) {
	base := (b*p.sq+q0)*p.sk + j0
	for c := 0; c < lanes; c++ {
		row := p.scores[base+c*p.sk : base+c*p.sk+cols]
		for key := range row {
			row[key] = st[key*attnNR+c]
		}
	}
}

// normalizeWeights turns the scores output's rows [i0, i0+rows) of batch b,
// written as the softmax's input, into its output: exp(s - shift) / sum
// with the row's final shift and sum (with sinks, times sinkScale instead
// of over the sum: the keys' weights, without the sink's; NaN for a row of
// -inf scores, 0 with a sink above -inf, 1/Sk with uniformRows, as
// masked_rows_weights says with zeroRows).
func (p *attnPlan) normalizeWeights(b, i0, rows int, w *attnWork) {
	negInf := float32(math.Inf(-1))
	for r := 0; r < rows; r++ {
		row := p.scores[(b*p.sq+i0+r)*p.sk : (b*p.sq+i0+r+1)*p.sk]
		m := w.m[r]
		if m == negInf {
			fill := float32(math.NaN())
			switch {
			case p.sinkFloats != nil && !math.IsInf(float64(p.sinkAt(b)), -1):
				fill = sinkOnlyValue(p.sinkAt(b)) // every weight on the sink
			case p.uniformRows:
				fill = 1 / float32(p.sk)
			case p.zeroRows && p.zeroRowsWeights == MaskedRowsWeightsZero:
				fill = 0
			case p.zeroRows && p.zeroRowsWeights == MaskedRowsWeightsUniform:
				fill = 1 / float32(p.sk)
			}
			for j := range row {
				row[j] = fill
			}
			continue
		}
		inv := float32(1 / w.l[r])
		if p.sinkFloats != nil {
			inv = sinkScale(m, w.l[r], p.sinkAt(b))
		}
		expShiftSum32(row, row, m) // vectorized; the row's weights sum to l
		for j := range row {
			row[j] *= inv
		}
	}
}

// clamps reports whether scores are raised to at least scoresMin
// (scores_min).
func (a *attnAttrs) clamps() bool { return !math.IsInf(float64(a.scoresMin), -1) }

// clampScores raises every score to at least lo (NaN stays NaN, as
// torch.max keeps it).
func clampScores(st []float32, lo float32) {
	for i, s := range st {
		st[i] = max(s, lo)
	}
}

// softcapScores replaces every score s by c·tanh(s/c): with AVX-512 in
// three vector passes over the panel (kernel.Tanh16, within a few ulp),
// else a float32 tanh per score.
func softcapScores(st []float32, c float32) {
	inv := 1 / c
	if kernel.AVX512 && len(st) > 0 {
		kernel.MulVS(&st[0], &st[0], inv, len(st))
		kernel.Tanh16(&st[0], &st[0], len(st))
		kernel.MulVS(&st[0], &st[0], c, len(st))
		return
	}
	for i, s := range st {
		st[i] = c * tanh32(s*inv)
	}
}

// tanh32 is tanh in float32 (Cephes' tanhf: a polynomial below 0.625, the
// exponential form above; about 2 ulp).
func tanh32(x float32) float32 {
	z := x
	if z < 0 {
		z = -z
	}
	switch {
	case z != z:
		return x
	case z > 44.0148: // 0.5·log(2^127): tanh is ±1 in float32
		if x < 0 {
			return -1
		}
		return 1
	case z >= 0.625:
		e := fastExp32(2 * z)
		t := 1 - 2/(e+1)
		if x < 0 {
			return -t
		}
		return t
	}
	s := x * x
	return ((((-5.70498872745e-3*s+2.06390887954e-2)*s-5.37397155531e-2)*s+1.33314422036e-1)*s-3.33332819422e-1)*s*x + x
}

// attnRescaleSlack is how far a row's scores may rise above the shift its
// exponentials use before the shift moves up (and the accumulator is
// rescaled): exp(s - shift) ≤ e^8 ≈ 3000 cannot overflow, and rescaling
// becomes rare after the first key blocks. The result is the same: every
// term and the sum use one shift. The fast path allows more, up to
// attnSlackCap (shiftLimit).
const attnRescaleSlack = 8

// softmaxPanel turns one panel of (masked) scores into exp(s - shift),
// where shift is the row's running max (kept while the scores stay within
// attnRescaleSlack of it), updating the running sums and rescaling the
// accumulator's columns where the shift moved.
func (p *attnPlan) softmaxPanel(st []float32, cols int, w *attnWork, pn int, acc []float32, dvPad int) {
	negInf := float32(math.Inf(-1))
	m := w.m[pn*attnNR : (pn+1)*attnNR]
	l := w.l[pn*attnNR : (pn+1)*attnNR]
	var mxa, shifta, suma, corra [maxLanes]float32
	mx, shift, sum, corr := mxa[:attnNR], shifta[:attnNR], suma[:attnNR], corra[:attnNR]
	copy(mx, m)
	colMax(st, cols, mx)
	rescale := false
	for c := range mx {
		corr[c] = 1
		if mx[c] == negInf {
			continue // every score so far is -inf: exp gives 0 with shift 0
		}
		if m[c] != negInf && !(mx[c] > m[c]+attnRescaleSlack) {
			shift[c], mx[c] = m[c], m[c] // keep the shift
			continue
		}
		shift[c] = mx[c]
		if m[c] != negInf {
			corr[c] = fastExp32(m[c] - mx[c])
			rescale = true
		}
	}
	expCols(st, cols, shift, sum)
	for c := range mx {
		l[c] = l[c]*float64(corr[c]) + float64(sum[c])
		m[c] = mx[c]
	}
	if !rescale {
		return
	}
	for r := 0; r < dvPad; r++ {
		row := acc[r*attnQBlock+pn*attnNR : r*attnQBlock+(pn+1)*attnNR]
		for c := range row {
			row[c] *= corr[c]
		}
	}
}

// colMax sets mx[c] = max(mx[c], st[key·NR+c]) over the keys (len(mx) =
// NR lanes).
func colMax(st []float32, keys int, mx []float32) {
	lanes := len(mx)
	if keys == 0 {
		return
	}
	_ = st[keys*lanes-1]
	switch {
	case lanes == 32 && kernel.AVX512:
		kernel.MaxCols32(&st[0], keys, &mx[0])
		return
	case lanes == 16 && kernel.Available:
		kernel.MaxCols16(&st[0], keys, &mx[0])
		return
	}
	for key := 0; key < keys; key++ {
		for c, v := range st[key*lanes : (key+1)*lanes] {
			if v > mx[c] {
				mx[c] = v
			}
		}
	}
}

// mulCols sets x[r·stride+c] *= corr[c] for the first rows rows
// (len(corr) lanes each).
func mulCols(x []float32, rows, stride int, corr []float32) {
	lanes := len(corr)
	if rows == 0 {
		return
	}
	_ = x[(rows-1)*stride+lanes-1]
	if lanes == 32 && stride == 32 && kernel.AVX512 {
		kernel.MulCols32(&x[0], rows, &corr[0])
		return
	}
	for r := 0; r < rows; r++ {
		row := x[r*stride : r*stride+lanes]
		for c, f := range corr {
			row[c] *= f
		}
	}
}

// expCols replaces st[key·NR+c] by exp(st[key·NR+c] - shift[c]) and adds
// each column's sum to sum[c] (len(shift) = NR lanes).
func expCols(st []float32, keys int, shift, sum []float32) {
	lanes := len(shift)
	if keys == 0 {
		return
	}
	_ = st[keys*lanes-1]
	switch {
	case lanes == 32 && kernel.AVX512:
		kernel.ExpShiftSumCols32(&st[0], keys, &shift[0], &sum[0])
		return
	case lanes == 16 && kernel.Available:
		kernel.ExpShiftSumCols16(&st[0], keys, &shift[0], &sum[0])
		return
	}
	for key := 0; key < keys; key++ {
		row := st[key*lanes : (key+1)*lanes]
		for c, v := range row {
			e := fastExp32(v - shift[c])
			row[c] = e
			sum[c] += e
		}
	}
}
