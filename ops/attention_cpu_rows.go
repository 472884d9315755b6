package ops

import (
	"math"
	"sync/atomic"

	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/parallel"
)

// Query rows one at a time: a decode step.
//
// The kernel's panels hold attnNR (32) query lanes, so a batch matrix of
// one query (a decode step after a KV cache: GPT-2's, Whisper's, any
// multi-head decoder's) computed 32 lanes of scores and of P·V for one
// that counts, in every key block. With at most attnRowsMax query rows
// (and the heads of a KV group folded into rows: foldGroupedQueries) each
// row is computed on its own instead: its scores in place against K's
// rows (kernel.DotRows16), the masks, bias and cut applied key by key,
// the exponentials (kernel.ExpShiftSum8) and the weights times V's rows
// in place (kernel.AxpyRows16). Only the keys the cut and the key limit
// leave are read. It computes in float32 whatever the precision: a
// decode step's products read every key once and are bound by memory.

// attnRowsMax is the most query rows a batch matrix may have for the row
// path: each row reads K and V again, where a panel reads them once for
// 32 lanes.
const attnRowsMax = 4

// rowsPath reports whether the run takes the row path: few query rows,
// K's and V's rows contiguous, no scores output, softcap, bias by its
// diagonals or finite causal fill (a check per row the path does not
// make), and the AVX-512 kernels.
func (p *attnPlan) rowsPath() bool {
	return kernel.AVX512 && kernel.Available && p.sq <= attnRowsMax && p.scores == nil && p.scoresMode == "" &&
		p.k.cs == 1 && p.v.cs == 1 && p.d%16 == 0 && p.dv%16 == 0 && p.softcap == 0 && !p.biasDiag && p.biasGrid == 0 &&
		(!p.causal || math.IsInf(float64(p.causalFill), -1))
}

// runRows computes every query row on the row path, the batch matrices
// shared among threads workers.
func (p *attnPlan) runRows(ctx *Context, threads int) {
	sLen := ceilTo(p.sk, 8)  // ExpShiftSum8 takes multiples of 8
	per := sLen + p.d + p.dv // scores, scale·q, the output's sums
	workers := max(1, min(threads, p.batches))
	scratch := ctx.ScratchFloats(workers * per)
	var next atomic.Int64
	parallel.Run(workers, func(w int) {
		buf := scratch[w*per : (w+1)*per]
		s, q, acc := buf[:sLen], buf[sLen:sLen+p.d], buf[sLen+p.d:]
		for b := int(next.Add(1) - 1); b < p.batches; b = int(next.Add(1) - 1) {
			for i := 0; i < p.sq; i++ {
				p.row(b, i, s, q, acc)
			}
		}
	})
}

// row computes query row i of batch matrix b into the output, with s
// (Sk rounded up to 8 floats), q (D) and acc (Dv) as scratch.
func (p *attnPlan) row(b, i int, s, q, acc []float32) {
	keys := p.sk
	if p.keyLim != nil {
		keys = min(keys, p.keyLim[b])
	}
	if p.causal {
		keys = min(keys, max(i+p.causalOff+1, 0))
	}
	out := p.o.off[b] + i*p.o.rs
	negInf := float32(math.Inf(-1))
	mx := negInf
	if keys > 0 {
		qo := p.q.off[b] + i*p.q.rs
		for c := range q {
			q[c] = p.scale * p.q.data[qo+c*p.q.cs]
		}
		kernel.DotRows16(&s[0], &q[0], &p.k.data[p.k.off[b]], p.k.rs, keys, p.d)
		p.rowTerms(s[:keys], b, i)
		for _, x := range s[:keys] {
			if x > mx || x != x && mx == mx { // a NaN stays the max: the row is NaN
				mx = x
			}
		}
	}
	if mx == negInf { // the row sees no key
		switch {
		case p.sinkFloats != nil && !math.IsInf(float64(p.sinkAt(b)), -1): // all its weight on the sink
			v := sinkOnlyValue(p.sinkAt(b))
			for c := range acc {
				acc[c] = v
			}
		case p.uniformRows:
			copy(acc, p.meanV(b))
		case p.zeroRows:
			clear(acc)
		default:
			for c := range acc {
				acc[c] = float32(math.NaN())
			}
		}
		p.writeRow(out, acc)
		return
	}
	n8 := keys &^ 7
	var sum float32
	if n8 > 0 {
		sum = kernel.ExpShiftSum8(&s[0], &s[0], n8, mx)
	}
	for j := n8; j < keys; j++ {
		s[j] = fastExp32(s[j] - mx)
		sum += s[j]
	}
	clear(acc)
	kernel.AxpyRows16(&acc[0], &s[0], &p.v.data[p.v.off[b]], p.v.rs, keys, p.dv)
	inv := 1 / sum
	if p.sinkFloats != nil {
		inv = sinkScale(mx, float64(sum), p.sinkAt(b))
	}
	for c := range acc {
		acc[c] *= inv
	}
	p.writeRow(out, acc)
}

// rowTerms applies to row i's scores s of batch matrix b what follows the
// product: the bias (before the mask with bias_first), the mask, the bias,
// the floor (scores_min), in the order the op's contract gives them.
func (p *attnPlan) rowTerms(s []float32, b, i int) {
	if p.biasFloats != nil && p.biasFirst {
		p.addRowTerms(s, p.biasFloats, p.bOff[b]+i*p.bRowStep, p.bColStep, p.biasScale)
	}
	switch {
	case p.maskFloats != nil:
		p.addRowTerms(s, p.maskFloats, p.mOff[b]+i*p.mRowStep, p.mColStep, p.maskScale)
	case p.maskBools != nil:
		at := p.mOff[b] + i*p.mRowStep
		for j := range s {
			if p.maskBools[at+j*p.mColStep] == p.maskedVal {
				s[j] = p.fill
			}
		}
	}
	if p.biasFloats != nil && !p.biasFirst {
		p.addRowTerms(s, p.biasFloats, p.bOff[b]+i*p.bRowStep, p.bColStep, p.biasScale)
	}
	if p.clamps() {
		for j, x := range s {
			s[j] = max(x, p.scoresMin)
		}
	}
}

// addRowTerms adds sc·data[at + j·step] to s[j].
func (p *attnPlan) addRowTerms(s, data []float32, at, step int, sc float32) {
	for j := range s {
		s[j] += sc * data[at+j*step]
	}
}

// writeRow writes a row of Dv values at the output's element off.
func (p *attnPlan) writeRow(off int, row []float32) {
	if p.o.cs == 1 {
		copy(p.o.data[off:off+len(row)], row)
		return
	}
	for c, x := range row {
		p.o.data[off+c*p.o.cs] = x
	}
}
