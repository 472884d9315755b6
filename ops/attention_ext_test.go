package ops

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// attnExtCase is a FusedAttention call on 4-D operands with the attributes
// the ONNX Attention op needs (grouped heads, softcap, causal offset,
// padded masks, key lengths, the scores output).
type attnExtCase struct {
	name           string
	b, hq, hk      int
	sq, sk, d, dv  int
	scale, softcap float32
	// scoresMin, when not 0, is scores_min: the scores after the mask
	// and bias are raised to at least it.
	scoresMin       float32
	causal          bool
	causalOff       int
	causalFill      float32 // causal_fill when not 0
	leftPad         int     // an additive mask's first leftPad keys hold -1e4 (GPT-2's padding)
	fp32Only        bool    // skip the bf16 run
	mask            []int   // 4-D mask shape (nil: none)
	kind            string
	fill            float32
	padKeys         bool
	kvLens          []int64 // nil: none
	maskP           float64
	scoresMode      string
	fullyMaskedRows bool  // some rows are expected to be all -inf (NaN)
	bias            []int // 4-D bias shape (nil: none)
	biasScale       float32
	biasFirst       bool
	// biasDiag gives the bias (of shape bias, its last two dims Sq and
	// Sk) by its diagonals (bias_diagonals): a random term of j − i.
	biasDiag bool
	// biasGrid, when not 0, gives the bias (of shape bias, its last dim
	// Sk) by the rows and columns of a key grid biasGrid keys wide
	// (bias_grid): a random term by grid row plus one by grid column.
	biasGrid int
	// prep, when set, changes the random mask and bias (nil when the case
	// has none) before the run.
	prep func(mask, bias *ir.Tensor)
	// sinks is the 4-D shape of input 6 (nil: none), its last two dims 1:
	// random logits spread over [-4, 4], one of them -inf.
	sinks []int
}

// refAttentionExt computes the case in float64 with the scores matrix
// materialized: Y [B, Hq, Sq, Dv] and the scores at c.scoresMode.
func refAttentionExt(c attnExtCase, q, k, v, mask, bias, sinks *ir.Tensor) (y, scores []float64) {
	qd, kd, vd := q.Float32s(), k.Float32s(), v.Float32s()
	y = make([]float64, c.b*c.hq*c.sq*c.dv)
	scores = make([]float64, c.b*c.hq*c.sq*c.sk)
	group := c.hq / c.hk
	negInf := math.Inf(-1)
	row := make([]float64, c.sk)
	for b := 0; b < c.b; b++ {
		for h := 0; h < c.hq; h++ {
			kh := h / group
			for i := 0; i < c.sq; i++ {
				for j := 0; j < c.sk; j++ {
					var dot float64
					for x := 0; x < c.d; x++ {
						dot += float64(qd[((b*c.hq+h)*c.sq+i)*c.d+x]) * float64(kd[((b*c.hk+kh)*c.sk+j)*c.d+x])
					}
					s := dot * float64(c.scale)
					if c.scoresMode == ScoresRaw {
						scores[((b*c.hq+h)*c.sq+i)*c.sk+j] = s
					}
					if c.softcap > 0 {
						s = float64(c.softcap) * math.Tanh(s/float64(c.softcap))
					}
					if c.scoresMode == ScoresSoftcapped {
						scores[((b*c.hq+h)*c.sq+i)*c.sk+j] = s
					}
					addBias := func() {
						bs := c.bias
						bi := func(dim, idx int) int {
							if bs[dim] == 1 {
								return 0
							}
							return idx
						}
						s = float64(float32(s + float64(c.biasScale)*float64(bias.Float32s()[((bi(0, b)*bs[1]+bi(1, h))*bs[2]+bi(2, i))*bs[3]+bi(3, j)])))
					}
					if bias != nil && c.biasFirst {
						addBias()
					}
					if c.causal && c.causalFill != 0 && j > i+c.causalOff {
						s = float64(c.causalFill)
					}
					if mask != nil {
						ms := c.mask
						msk := ms[3]
						mi := func(dim, idx int) int {
							if ms[dim] == 1 {
								return 0
							}
							return idx
						}
						if c.padKeys && j >= msk {
							s = negInf
						} else {
							mj := j
							if msk == 1 && !c.padKeys {
								mj = 0
							}
							off := ((mi(0, b)*ms[1]+mi(1, h))*ms[2]+mi(2, i))*msk + mj
							switch c.kind {
							case MaskAdditive:
								// Rounded as the export's float32 Add rounds: with
								// scores near -1e4 (GPT-2's padding) that rounding
								// is what the result is.
								s = float64(float32(s + float64(mask.Float32s()[off])))
							default:
								if mask.Bools()[off] == (c.kind == MaskBoolTrueMasks) {
									s = float64(c.fill)
								}
							}
						}
					}
					if bias != nil && !c.biasFirst {
						addBias()
					}
					if c.scoresMin != 0 {
						s = math.Max(s, float64(c.scoresMin))
					}
					if c.kvLens != nil && int64(j) >= c.kvLens[b] {
						s = negInf
					}
					if c.causal && c.causalFill == 0 && j > i+c.causalOff {
						s = negInf
					}
					row[j] = s
					if c.scoresMode == ScoresBiased {
						scores[((b*c.hq+h)*c.sq+i)*c.sk+j] = s
					}
				}
				mx := negInf
				for _, s := range row {
					mx = math.Max(mx, s)
				}
				sink := negInf // the sink's logit: one more term of the softmax
				if sinks != nil {
					ss := c.sinks
					si := func(dim, idx int) int {
						if ss[dim] == 1 {
							return 0
						}
						return idx
					}
					sink = float64(sinks.Float32s()[si(0, b)*ss[1]+si(1, h)])
					mx = math.Max(mx, sink)
				}
				sum := math.Exp(sink - mx)
				for j, s := range row {
					row[j] = math.Exp(s - mx)
					sum += row[j]
				}
				for j := range row {
					row[j] /= sum
					if c.scoresMode == ScoresWeights {
						scores[((b*c.hq+h)*c.sq+i)*c.sk+j] = row[j]
					}
				}
				for x := 0; x < c.dv; x++ {
					var acc float64
					for j, p := range row {
						acc += p * float64(vd[((b*c.hk+kh)*c.sk+j)*c.dv+x])
					}
					y[((b*c.hq+h)*c.sq+i)*c.dv+x] = acc
				}
			}
		}
	}
	return y, scores
}

// randMask is a random float32 mask for the additive kind, else a bool
// mask true with probability p.
func randMask(r *rand.Rand, kind string, p float64, shape []int) *ir.Tensor {
	if kind == MaskAdditive {
		return randTensor(r, shape...)
	}
	return randBools(r, p, shape...)
}

func closeF64(got float32, want float64) bool {
	if math.IsNaN(want) || math.IsNaN(float64(got)) {
		return math.IsNaN(want) && math.IsNaN(float64(got))
	}
	if math.IsInf(want, 0) {
		return float64(got) == want
	}
	return math.Abs(float64(got)-want) <= 2e-5+1e-4*math.Abs(want)
}

func TestFusedAttentionExtensions(t *testing.T) {
	negInf := float32(math.Inf(-1))
	kb := attnKBlock
	cases := []attnExtCase{
		{name: "gqa 6/2", b: 2, hq: 6, hk: 2, sq: 40, sk: 70, d: 8, dv: 8, scale: 0.3},
		{name: "gqa 4/2 long keys", b: 1, hq: 4, hk: 2, sq: 33, sk: kb + 17, d: 16, dv: 5, scale: 0.2},
		{name: "mqa 4/1", b: 2, hq: 4, hk: 1, sq: 9, sk: 12, d: 8, dv: 8, scale: 0.3},
		{name: "softcap", b: 1, hq: 2, hk: 2, sq: 20, sk: 30, d: 8, dv: 8, scale: 1, softcap: 2},
		// OPT's torch.max(scores + mask, finfo.min): rows the -inf mask
		// hides entirely become uniform; one above the scores' range
		// flattens them (every weight 1/Sk); one inside it raises the
		// lowest scores, across two key blocks.
		{name: "scores_min finfo.min after a -inf bool mask, rows hidden", b: 2, hq: 2, hk: 2, sq: 9, sk: kb + 5, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 9, kb + 5}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.5, scoresMin: -math.MaxFloat32,
			prep: func(mask, _ *ir.Tensor) {
				for j := range kb + 5 {
					mask.Bools()[2*(kb+5)+j] = true // batch 0, query 2 sees no key
				}
			}},
		{name: "scores_min after an additive mask of finfo.min terms, long", b: 1, hq: 2, hk: 1, sq: 40, sk: 2*kb + 9, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 40, 2*kb + 9}, kind: MaskAdditive, scoresMin: -math.MaxFloat32,
			prep: func(mask, _ *ir.Tensor) {
				for i, m := range mask.Float32s() {
					if m < 0 { // half the keys hidden, some twice (-inf)
						mask.Float32s()[i] = -math.MaxFloat32 * float32(1+i%2)
					}
				}
			}},
		{name: "scores_min inside the scores' range, with causal and softcap", b: 1, hq: 2, hk: 2, sq: 33, sk: kb + 20, d: 8, dv: 8, scale: 0.5, softcap: 3,
			causal: true, causalOff: kb - 13, scoresMin: -0.5},
		{name: "scores_min above every score", b: 1, hq: 1, hk: 1, sq: 5, sk: 7, d: 8, dv: 4, scale: 0.3, scoresMin: 100},
		{name: "causal square", b: 1, hq: 2, hk: 2, sq: 70, sk: 70, d: 8, dv: 8, scale: 0.3, causal: true},
		{name: "causal long, skipped blocks", b: 1, hq: 1, hk: 1, sq: 2*kb + 3, sk: 2*kb + 3, d: 8, dv: 4, scale: 0.3, causal: true},
		{name: "causal with past offset", b: 2, hq: 3, hk: 3, sq: 5, sk: 17, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: 12},
		{name: "causal upper-left, Sk > Sq", b: 1, hq: 1, hk: 1, sq: 4, sk: 9, d: 8, dv: 8, scale: 0.3, causal: true},
		{name: "causal Sq > Sk, rows without keys", b: 1, hq: 1, hk: 1, sq: 6, sk: 4, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: -2, fullyMaskedRows: true},
		// The fast path's causal diagonal: whole tiles before the first
		// query's diagonal, straddling tiles, K's partial last sliver,
		// sizes off every multiple of 8, 32 and the key block.
		{name: "causal fast path, odd sizes", b: 1, hq: 2, hk: 2, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3, causal: true},
		{name: "causal fast path, offset 13", b: 2, hq: 1, hk: 1, sq: 77, sk: 90, d: 8, dv: 16, scale: 0.3, causal: true, causalOff: 13},
		{name: "causal fast path, rescaling", b: 1, hq: 1, hk: 1, sq: 2*kb + 7, sk: 2*kb + 7, d: 16, dv: 8, scale: 0.5, causal: true},
		{name: "causal fast path, negative offset", b: 1, hq: 1, hk: 1, sq: 101, sk: 61, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: -40, fullyMaskedRows: true},
		{name: "causal + kv lengths mid-sliver", b: 2, hq: 2, hk: 2, sq: kb + 37, sk: kb + 37, d: 8, dv: 8, scale: 0.3, causal: true,
			kvLens: []int64{int64(kb) + 21, 45}},
		{name: "kv lengths mid-sliver, long", b: 2, hq: 1, hk: 1, sq: 40, sk: 2*kb + 37, d: 8, dv: 8, scale: 0.3, kvLens: []int64{int64(kb) + 19, 3}},
		// Per-key masks (key padding, broadcast along the queries) on the
		// fast path: added to each key's scores in the fused kernel.
		{name: "key padding bool + causal, odd sizes", b: 2, hq: 3, hk: 3, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3, causal: true, causalOff: 20,
			mask: []int{2, 1, 1, kb + 45}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.3},
		{name: "key padding bool mostly masked, long", b: 2, hq: 1, hk: 1, sq: 40, sk: kb + 77, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 1, kb + 77}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.9},
		{name: "key padding keep mask + causal + kv lengths + gqa", b: 2, hq: 4, hk: 2, sq: 50, sk: 75, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: 25,
			mask: []int{2, 1, 1, 75}, kind: MaskBoolFalseMasks, fill: negInf, maskP: 0.7, kvLens: []int64{60, 75}},
		{name: "key padding additive, long", b: 2, hq: 2, hk: 2, sq: 40, sk: 2*kb + 9, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 1, 2*kb + 9}, kind: MaskAdditive},
		{name: "key padding additive + causal", b: 1, hq: 2, hk: 2, sq: 70, sk: 70, d: 8, dv: 8, scale: 0.3, causal: true,
			mask: []int{1, 1, 1, 70}, kind: MaskAdditive},
		{name: "key padding, every key masked", b: 1, hq: 2, hk: 2, sq: 33, sk: 70, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 1, 70}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 1, fullyMaskedRows: true},
		{name: "key padding, finite fill", b: 2, hq: 2, hk: 2, sq: 35, sk: 50, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 1, 50}, kind: MaskBoolTrueMasks, fill: -1e9, maskP: 0.5},
		{name: "key padding, padded additive mask", b: 2, hq: 2, hk: 2, sq: 35, sk: 60, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 1, 47}, kind: MaskAdditive, padKeys: true},
		{name: "bool keep mask 4-D + causal + gqa", b: 2, hq: 4, hk: 2, sq: 12, sk: 20, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: 8,
			mask: []int{2, 4, 12, 20}, kind: MaskBoolFalseMasks, fill: negInf, maskP: 0.8},
		{name: "float mask [1,1,Sq,Sk] + softcap", b: 2, hq: 2, hk: 2, sq: 8, sk: 10, d: 8, dv: 8, scale: 0.5, softcap: 3,
			mask: []int{1, 1, 8, 10}, kind: MaskAdditive},
		{name: "padded float mask", b: 2, hq: 3, hk: 3, sq: 4, sk: 6, d: 8, dv: 10, scale: 0.35,
			mask: []int{2, 3, 4, 4}, kind: MaskAdditive, padKeys: true},
		{name: "padded bool mask of one key", b: 1, hq: 2, hk: 2, sq: 3, sk: 5, d: 4, dv: 4, scale: 0.5,
			mask: []int{1, 1, 3, 1}, kind: MaskBoolFalseMasks, fill: negInf, padKeys: true, maskP: 1},
		{name: "padded long mask", b: 1, hq: 2, hk: 1, sq: 40, sk: kb + 40, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 40, kb - 5}, kind: MaskAdditive, padKeys: true},
		{name: "kv lengths", b: 3, hq: 2, hk: 2, sq: 5, sk: kb + 9, d: 8, dv: 8, scale: 0.3, kvLens: []int64{int64(kb) + 9, 3, 0}, fullyMaskedRows: true},
		{name: "kv lengths + padded mask", b: 2, hq: 3, hk: 3, sq: 4, sk: 6, d: 8, dv: 10, scale: 0.35,
			mask: []int{2, 3, 4, 4}, kind: MaskAdditive, padKeys: true, kvLens: []int64{5, 3}},
		{name: "scores raw", b: 2, hq: 4, hk: 2, sq: 35, sk: 50, d: 8, dv: 8, scale: 0.3, softcap: 2, scoresMode: ScoresRaw,
			mask: []int{1, 1, 35, 50}, kind: MaskAdditive, causal: true},
		{name: "scores softcapped", b: 1, hq: 2, hk: 2, sq: 35, sk: 50, d: 8, dv: 8, scale: 0.3, softcap: 2, scoresMode: ScoresSoftcapped,
			mask: []int{1, 1, 35, 50}, kind: MaskAdditive},
		{name: "scores biased", b: 1, hq: 2, hk: 2, sq: 35, sk: 50, d: 8, dv: 8, scale: 0.3, softcap: 2, scoresMode: ScoresBiased,
			mask: []int{1, 1, 35, 50}, kind: MaskAdditive, causal: true, causalOff: 5},
		{name: "scores weights, long", b: 1, hq: 2, hk: 1, sq: 40, sk: kb + 30, d: 8, dv: 8, scale: 0.3, scoresMode: ScoresWeights,
			causal: true, causalOff: kb - 10},
		{name: "scores weights, masked rows", b: 2, hq: 2, hk: 2, sq: 6, sk: 7, d: 8, dv: 3, scale: 0.3, scoresMode: ScoresWeights,
			mask: []int{2, 1, 6, 7}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.5, kvLens: []int64{7, 0}, fullyMaskedRows: true},
		{name: "scores with Dv = 0", b: 1, hq: 1, hk: 1, sq: 3, sk: 4, d: 8, dv: 0, scale: 1, scoresMode: ScoresWeights},
		// A bias beside the mask: GPT-2's where(causal, s, -1e4) + padding
		// mask, a position bias before a bool mask, two additive terms.
		{name: "bool mask then bias", b: 2, hq: 2, hk: 2, sq: 9, sk: 9, d: 8, dv: 8, scale: 0.35,
			mask: []int{1, 1, 9, 9}, kind: MaskBoolFalseMasks, fill: -1e4, maskP: 0.6, bias: []int{2, 1, 1, 9}, biasScale: 1},
		{name: "bias first, then -inf mask, long, skipped blocks", b: 1, hq: 2, hk: 1, sq: 40, sk: 2*kb + 9, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 1, 2*kb + 9}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.5, bias: []int{1, 2, 40, 2*kb + 9}, biasScale: 0.5, biasFirst: true},
		{name: "-inf mask then bias, long", b: 1, hq: 1, hk: 1, sq: 33, sk: 2*kb + 1, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 33, 2*kb + 1}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.9, bias: []int{1, 1, 33, 1}, biasScale: 2},
		// A -inf key mask hides the whole second key block; a NaN of the
		// bias after it in that block makes every row NaN (-inf + NaN), so
		// the kernel must not skip the block. With the NaN in a block the
		// mask keeps half of, the same.
		{name: "-inf mask hides a block, then a bias with NaN in it", b: 1, hq: 2, hk: 1, sq: 40, sk: 2*kb + 9, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 1, 2*kb + 9}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.3, bias: []int{1, 1, 1, 2*kb + 9}, biasScale: 1,
			fullyMaskedRows: true, prep: func(mask, bias *ir.Tensor) {
				for j := kb; j < 2*kb; j++ {
					mask.Bools()[j] = true
				}
				bias.Float32s()[kb+3] = float32(math.NaN())
			}},
		{name: "additive mask then bias + gqa + weights", b: 2, hq: 4, hk: 2, sq: 7, sk: 11, d: 8, dv: 8, scale: 1,
			mask: []int{1, 4, 7, 11}, kind: MaskAdditive, bias: []int{2, 1, 1, 11}, biasScale: 1, scoresMode: ScoresWeights},
		// causal_fill: a finite fill past the diagonal (GPT-2's -1e4), cut
		// and checked per row; rows that fail (every kept key padded, no
		// kept key, kept scores near the fill) are computed again at it.
		{name: "causal fill -1e4 + additive key mask", b: 2, hq: 2, hk: 2, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3, causal: true, causalFill: -1e4,
			mask: []int{2, 1, 1, kb + 45}, kind: MaskAdditive},
		{name: "causal fill -1e4 + left padding", b: 2, hq: 2, hk: 2, sq: 2*kb + 9, sk: 2*kb + 9, d: 8, dv: 8, scale: 0.3, causal: true, causalFill: -1e4,
			mask: []int{2, 1, 1, 2*kb + 9}, kind: MaskAdditive, leftPad: 40},
		{name: "causal fill -1e9, negative offset", b: 1, hq: 2, hk: 2, sq: 101, sk: 61, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: -40, causalFill: -1e9},
		{name: "causal fill 30: kept scores near it", b: 1, hq: 2, hk: 1, sq: 70, sk: 70, d: 8, dv: 8, scale: 0.3, causal: true, causalFill: 30},
		{name: "causal fill + bool mask with a finite fill", b: 2, hq: 2, hk: 2, sq: 40, sk: 50, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: 5, causalFill: -1e4,
			mask: []int{2, 2, 40, 50}, kind: MaskBoolTrueMasks, fill: -1e9, maskP: 0.3},
		{name: "bias first + causal fill", b: 1, hq: 2, hk: 2, sq: 45, sk: 45, d: 8, dv: 8, scale: 0.3, causal: true, causalFill: -1e4,
			bias: []int{1, 1, 45, 45}, biasScale: 0.5, biasFirst: true},
		{name: "causal fill + additive mask, weights", b: 1, hq: 2, hk: 2, sq: 40, sk: kb + 30, d: 8, dv: 8, scale: 0.3, causal: true, causalFill: -1e4,
			mask: []int{1, 1, 1, kb + 30}, kind: MaskAdditive, leftPad: 10, scoresMode: ScoresWeights},
		{name: "bias over heads with gqa, biased scores", b: 1, hq: 4, hk: 2, sq: 5, sk: 6, d: 8, dv: 8, scale: 0.3,
			bias: []int{1, 4, 5, 6}, biasScale: 1, scoresMode: ScoresBiased, causal: true},
		// A bias of one value per key (ALiBi: a slope per head times the
		// key's position), alone or with a per-key mask, runs on the fast
		// path, added to each key's scores in the kernel (keyBias).
		{name: "per-key bias alone (ALiBi), causal, long", b: 1, hq: 3, hk: 3, sq: 2*kb + 9, sk: 2*kb + 9, d: 16, dv: 8, scale: 0.3, causal: true,
			bias: []int{1, 3, 1, 2*kb + 9}, biasScale: 1, biasFirst: true},
		{name: "per-key bias first + -inf key padding + causal (BLOOM)", b: 2, hq: 2, hk: 2, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3, causal: true, causalOff: 20,
			mask: []int{2, 1, 1, kb + 45}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.3, bias: []int{2, 2, 1, kb + 45}, biasScale: 0.5, biasFirst: true},
		{name: "additive key mask then per-key bias + gqa", b: 2, hq: 4, hk: 2, sq: 40, sk: kb + 30, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 1, kb + 30}, kind: MaskAdditive, bias: []int{1, 4, 1, kb + 30}, biasScale: 2},
		{name: "per-head bias, one value for every key", b: 1, hq: 2, hk: 2, sq: 33, sk: 70, d: 8, dv: 8, scale: 0.3,
			bias: []int{1, 2, 1, 1}, biasScale: 1},
		// A bias by its diagonals (T5's relative position bias), alone,
		// with key padding (additive finfo.min, T5's; bool), the causal
		// cut (T5's decoder), grouped heads, more keys than queries, the
		// scores output, and long enough for several key blocks and
		// the running shift's moves.
		{name: "diagonal bias alone, long", b: 1, hq: 3, hk: 3, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3,
			bias: []int{1, 3, kb + 45, kb + 45}, biasScale: 1, biasDiag: true},
		{name: "diagonal bias + finfo.min key padding (T5)", b: 2, hq: 2, hk: 2, sq: 2*kb + 9, sk: 2*kb + 9, d: 16, dv: 8, scale: 0.3,
			mask: []int{2, 1, 1, 2*kb + 9}, kind: MaskAdditive, bias: []int{1, 2, 2*kb + 9, 2*kb + 9}, biasScale: 1, biasDiag: true,
			prep: func(mask, _ *ir.Tensor) {
				for at := range mask.Float32s() {
					mask.Float32s()[at] = 0
					if at%(2*kb+9) >= 2*kb-40+at/(2*kb+9)*7 {
						mask.Float32s()[at] = -math.MaxFloat32
					}
				}
			}},
		{name: "diagonal bias + bool key padding + causal offset (T5 decoder)", b: 2, hq: 2, hk: 2, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3, causal: true, causalOff: 20,
			mask: []int{2, 1, 1, kb + 45}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.3, bias: []int{1, 2, kb + 45, kb + 45}, biasScale: 1, biasDiag: true},
		{name: "diagonal bias per batch + gqa, Sk > Sq, scaled", b: 2, hq: 4, hk: 2, sq: 37, sk: kb + 30, d: 8, dv: 8, scale: 0.3,
			bias: []int{2, 4, 37, kb + 30}, biasScale: 0.5, biasDiag: true},
		{name: "diagonal bias, one for all heads, Sq > Sk", b: 1, hq: 2, hk: 2, sq: 70, sk: 20, d: 8, dv: 8, scale: 0.3,
			bias: []int{1, 1, 70, 20}, biasScale: 1, biasDiag: true},
		{name: "diagonal bias first + additive mask + weights", b: 1, hq: 2, hk: 2, sq: 35, sk: 50, d: 8, dv: 8, scale: 0.3, scoresMode: ScoresWeights,
			mask: []int{1, 1, 35, 50}, kind: MaskAdditive, bias: []int{1, 2, 35, 50}, biasScale: 1, biasFirst: true, biasDiag: true},
		{name: "diagonal bias + causal fill -1e4, rescaling", b: 1, hq: 2, hk: 2, sq: 2*kb + 7, sk: 2*kb + 7, d: 16, dv: 8, scale: 0.5, causal: true, causalFill: -1e4,
			bias: []int{1, 2, 2*kb + 7, 2*kb + 7}, biasScale: 4, biasDiag: true},
		// A bias by a key grid's rows and columns (SAM's decomposed
		// relative positions), alone over several key blocks with partial
		// slivers, over small windows, one row for every query, with a
		// per-key mask (bool and finfo.min), the causal cut and a checked
		// fill, grouped heads and cross attention, a softcap and the
		// weights output (the masked path), and one query (decode).
		{name: "grid bias alone, long (SAM's global attention)", b: 1, hq: 3, hk: 3, sq: 20 * 31, sk: 20 * 31, d: 16, dv: 8, scale: 0.3,
			bias: []int{1, 3, 20 * 31, 20 * 31}, biasScale: 1, biasGrid: 31},
		{name: "grid bias, 7×7 windows (SAM's windowed attention)", b: 6, hq: 2, hk: 2, sq: 49, sk: 49, d: 16, dv: 16, scale: 0.3,
			bias: []int{6, 2, 49, 49}, biasScale: 1, biasGrid: 7},
		{name: "grid bias, one row for every query, scaled", b: 2, hq: 2, hk: 2, sq: 40, sk: 6 * 9, d: 8, dv: 8, scale: 0.3,
			bias: []int{2, 1, 1, 6 * 9}, biasScale: 0.5, biasGrid: 9},
		{name: "grid bias + bool key padding + causal", b: 2, hq: 2, hk: 2, sq: kb + 20, sk: 4 * 133, d: 16, dv: 8, scale: 0.3, causal: true,
			mask: []int{2, 1, 1, 4 * 133}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.3, bias: []int{2, 2, kb + 20, 4 * 133}, biasScale: 1, biasGrid: 133},
		{name: "grid bias + finfo.min key padding", b: 2, hq: 2, hk: 2, sq: 70, sk: 10 * 10, d: 16, dv: 8, scale: 0.3,
			mask: []int{2, 1, 1, 100}, kind: MaskAdditive, bias: []int{2, 2, 70, 100}, biasScale: 1, biasGrid: 10,
			prep: func(mask, _ *ir.Tensor) {
				for at := range mask.Float32s() {
					mask.Float32s()[at] = 0
					if at%100 >= 80+at/100*7 {
						mask.Float32s()[at] = -math.MaxFloat32
					}
				}
			}},
		{name: "grid bias + causal fill -1e4, rescaling", b: 1, hq: 2, hk: 2, sq: kb + 7, sk: 25 * 21, d: 16, dv: 8, scale: 0.5, causal: true, causalFill: -1e4,
			bias: []int{1, 2, kb + 7, 25 * 21}, biasScale: 4, biasGrid: 21},
		{name: "grid bias + gqa, Sk > Sq", b: 2, hq: 4, hk: 2, sq: 37, sk: 6 * 9, d: 8, dv: 8, scale: 0.3,
			bias: []int{2, 4, 37, 6 * 9}, biasScale: 1, biasGrid: 6},
		{name: "grid bias + softcap + weights", b: 1, hq: 2, hk: 2, sq: 35, sk: 8 * 8, d: 8, dv: 8, scale: 0.3, softcap: 5, scoresMode: ScoresWeights,
			bias: []int{1, 2, 35, 64}, biasScale: 1, biasGrid: 8},
		{name: "grid bias first + dense additive mask", b: 1, hq: 2, hk: 2, sq: 33, sk: 5 * 7, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 33, 35}, kind: MaskAdditive, bias: []int{1, 2, 33, 35}, biasScale: 1, biasFirst: true, biasGrid: 7},
		{name: "grid bias, one query", b: 2, hq: 4, hk: 2, sq: 1, sk: 16 * 16, d: 16, dv: 16, scale: 0.3,
			bias: []int{2, 4, 1, 256}, biasScale: 1, biasGrid: 16},
		// Additive masks and biases of full [Sq, Sk] matrices: a float
		// attn_mask, Swin's relative position bias (the mask) and
		// shifted-window mask (the bias) over many small windows, beside a
		// per-key mask, a per-key bias, a bias by its diagonals, the
		// causal cut, grouped heads, and long enough for several key
		// blocks and the running shift's moves.
		{name: "dense additive mask alone, long", b: 1, hq: 2, hk: 2, sq: kb + 45, sk: 2*kb + 9, d: 16, dv: 8, scale: 0.5,
			mask: []int{1, 1, kb + 45, 2*kb + 9}, kind: MaskAdditive},
		{name: "dense mask + dense bias (Swin's windows)", b: 8, hq: 3, hk: 3, sq: 49, sk: 49, d: 32, dv: 32, scale: 0.3,
			mask: []int{1, 3, 49, 49}, kind: MaskAdditive, bias: []int{8, 1, 49, 49}, biasScale: 1,
			prep: func(_, bias *ir.Tensor) {
				for at := range bias.Float32s() {
					if (at/49)%7 < at%7 {
						bias.Float32s()[at] = -100
					}
				}
			}},
		{name: "dense bias + bool key padding + causal offset, gqa", b: 2, hq: 4, hk: 2, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3, causal: true, causalOff: 20,
			mask: []int{2, 1, 1, kb + 45}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.3, bias: []int{1, 4, kb + 45, kb + 45}, biasScale: 2},
		{name: "dense additive mask + diagonal bias", b: 1, hq: 2, hk: 2, sq: 70, sk: 90, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, 70, 90}, kind: MaskAdditive, bias: []int{1, 2, 70, 90}, biasScale: 1, biasDiag: true},
		{name: "dense additive mask + per-key bias (ALiBi), rescaling", b: 2, hq: 2, hk: 2, sq: 2*kb + 7, sk: 2*kb + 7, d: 16, dv: 8, scale: 0.6,
			mask: []int{2, 2, 2*kb + 7, 2*kb + 7}, kind: MaskAdditive, bias: []int{1, 2, 1, 2*kb + 7}, biasScale: 3},
		// Sliding windows: the causal cut and a bool mask hiding the keys
		// before the window, whose lower edge crosses the key blocks
		// (hiddenPrefixes: skipped, masked and fast parts of a block).
		{name: "sliding window 300 + causal, long", b: 1, hq: 2, hk: 2, sq: 2*kb + 45, sk: 2*kb + 45, d: 16, dv: 8, scale: 0.3, causal: true,
			mask: []int{1, 1, 2*kb + 45, 2*kb + 45}, kind: MaskBoolTrueMasks, fill: negInf, prep: windowMask(300, 0, false)},
		{name: "sliding window 37 + causal offset 9 + gqa", b: 2, hq: 4, hk: 2, sq: kb + 70, sk: kb + 79, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: 9,
			mask: []int{2, 1, kb + 70, kb + 79}, kind: MaskBoolTrueMasks, fill: negInf, prep: windowMask(37, 9, false)},
		{name: "sliding window keep mask, rescaling", b: 1, hq: 1, hk: 1, sq: 3*kb + 5, sk: 3*kb + 5, d: 16, dv: 16, scale: 0.6, causal: true,
			mask: []int{1, 1, 3*kb + 5, 3*kb + 5}, kind: MaskBoolFalseMasks, fill: negInf, prep: windowMask(kb+3, 0, true)},
		// A window's mask that hides the keys past the diagonal too, with
		// the cut (the fuser keeps only the lower edge in Mistral's mask,
		// keptRowsBoolMask; an op's own mask may hide both): the diagonal
		// blocks run on the masked path.
		{name: "sliding window hiding the future too + causal", b: 1, hq: 2, hk: 2, sq: 2*kb + 45, sk: 2*kb + 45, d: 16, dv: 8, scale: 0.3, causal: true,
			mask: []int{1, 1, 2*kb + 45, 2*kb + 45}, kind: MaskBoolTrueMasks, fill: negInf, prep: windowFutureMask(300, 0, false)},
		{name: "short window hiding the future too + causal offset 9 + gqa", b: 2, hq: 4, hk: 2, sq: kb + 70, sk: kb + 79, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: 9,
			mask: []int{2, 1, kb + 70, kb + 79}, kind: MaskBoolTrueMasks, fill: negInf, prep: windowFutureMask(37, 9, false)},
		{name: "window keep mask hiding the future too + causal", b: 1, hq: 1, hk: 1, sq: 3*kb + 5, sk: 3*kb + 5, d: 16, dv: 16, scale: 0.6, causal: true,
			mask: []int{1, 1, 3*kb + 5, 3*kb + 5}, kind: MaskBoolFalseMasks, fill: negInf, prep: windowFutureMask(kb+3, 0, true)},
		{name: "window hiding the future too + finite causal fill", b: 1, hq: 2, hk: 2, sq: kb + 45, sk: kb + 45, d: 16, dv: 8, scale: 0.3, causal: true,
			causalFill: -1e4, mask: []int{1, 1, kb + 45, kb + 45}, kind: MaskBoolTrueMasks, fill: negInf, prep: windowFutureMask(200, 0, false)},
		{name: "random [Sq, Sk] mask + causal offset -3", b: 2, hq: 2, hk: 2, sq: kb + 33, sk: kb + 33, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: -3,
			mask: []int{2, 1, kb + 33, kb + 33}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.2, fullyMaskedRows: true},
		{name: "sliding window, no cut (the mask hides the future too)", b: 1, hq: 2, hk: 1, sq: kb + 9, sk: kb + 9, d: 8, dv: 8, scale: 0.3,
			mask: []int{1, 1, kb + 9, kb + 9}, kind: MaskBoolTrueMasks, fill: negInf, prep: func(mask, _ *ir.Tensor) {
				windowMask(100, 0, false)(mask, nil)
				n := kb + 9
				for i := 0; i < n; i++ {
					for j := i + 1; j < n; j++ {
						mask.Bools()[i*n+j] = true
					}
				}
			}},
		// At most attnRowsMax query rows (a decode step) take the row
		// path (attention_cpu_rows.go), the query heads of a KV group
		// folded into rows (foldGroupedQueries).
		// gpt-oss's sinks: a logit a head in every row's softmax; rows
		// that see no key output 0 (all their weight on the sink).
		{name: "sinks, gqa 4/2, causal", b: 2, hq: 4, hk: 2, sq: 40, sk: kb + 19, d: 16, dv: 8, scale: 0.25, causal: true, causalOff: kb - 21, sinks: []int{1, 4, 1, 1}},
		// (The last matrix's sink is -inf: its rows without keys are NaN.)
		{name: "sinks per batch and head, causal Sq > Sk, rows without keys", b: 2, hq: 2, hk: 2, sq: 6, sk: 4, d: 8, dv: 8, scale: 0.3, causal: true, causalOff: -2,
			sinks: []int{2, 2, 1, 1}, fullyMaskedRows: true},
		{name: "sinks, bool mask with hidden rows, two key blocks", b: 2, hq: 2, hk: 2, sq: 9, sk: kb + 5, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 9, kb + 5}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.5, sinks: []int{1, 2, 1, 1}, fullyMaskedRows: true,
			prep: func(mask, _ *ir.Tensor) {
				for j := range kb + 5 {
					mask.Bools()[2*(kb+5)+j] = true // batch 0, query 2 sees no key
				}
			}},
		{name: "sinks with the weights output, hidden rows", b: 2, hq: 2, hk: 2, sq: 9, sk: kb + 5, d: 8, dv: 8, scale: 0.3,
			mask: []int{2, 1, 9, kb + 5}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.5, sinks: []int{1, 2, 1, 1}, fullyMaskedRows: true, scoresMode: ScoresWeights,
			prep: func(mask, _ *ir.Tensor) {
				for j := range kb + 5 {
					mask.Bools()[2*(kb+5)+j] = true // batch 0, query 2 sees no key
				}
			}},
		{name: "sinks, rows: gqa 8/2 decode", b: 2, hq: 8, hk: 2, sq: 1, sk: 90, d: 16, dv: 32, scale: 0.3, causal: true, causalOff: 89, sinks: []int{1, 8, 1, 1}},
		{name: "rows: one query after a cache", b: 2, hq: 3, hk: 3, sq: 1, sk: kb + 37, d: 64, dv: 64, scale: 0.125, causal: true, causalOff: kb + 36},
		{name: "rows: gqa 8/2 decode, key padding", b: 2, hq: 8, hk: 2, sq: 1, sk: 90, d: 16, dv: 32, scale: 0.3, causal: true, causalOff: 89,
			mask: []int{2, 1, 1, 90}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 0.3},
		{name: "rows: three queries, the cut hiding keys, kv lengths", b: 2, hq: 2, hk: 2, sq: 3, sk: 40, d: 16, dv: 16, scale: 0.3, causal: true, causalOff: 20,
			kvLens: []int64{30, 12}},
		{name: "rows: additive [Sq, Sk] mask and bias first, scores_min", b: 1, hq: 2, hk: 2, sq: 4, sk: 50, d: 16, dv: 48, scale: 0.3,
			mask: []int{1, 2, 4, 50}, kind: MaskAdditive, bias: []int{1, 1, 4, 50}, biasScale: 0.5, biasFirst: true, scoresMin: -3},
		{name: "rows: keep mask with a finite fill, bias after", b: 2, hq: 2, hk: 1, sq: 2, sk: 33, d: 32, dv: 16, scale: 0.3,
			mask: []int{2, 1, 2, 33}, kind: MaskBoolFalseMasks, fill: -1e9, maskP: 0.5, bias: []int{1, 2, 2, 33}, biasScale: 1},
		{name: "rows: every key masked", b: 1, hq: 2, hk: 2, sq: 1, sk: 20, d: 16, dv: 16, scale: 0.3,
			mask: []int{1, 1, 1, 20}, kind: MaskBoolTrueMasks, fill: negInf, maskP: 1, fullyMaskedRows: true},
		{name: "rows: negative offset, rows without keys", b: 1, hq: 1, hk: 1, sq: 4, sk: 9, d: 16, dv: 16, scale: 0.3, causal: true, causalOff: -2,
			fullyMaskedRows: true},
	}
	r := rand.New(rand.NewSource(11))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkExtCase(t, r, c) })
	}
}

// windowMask returns a prep that sets a [.., Sq, Sk] bool mask to hide the
// keys j ≤ i + off - w of each query i, the keys before a sliding window of
// w keys ending at the causal diagonal: true there, or with keep (a keep
// mask, MaskBoolFalseMasks) false there and true elsewhere.
func windowMask(w, off int, keep bool) func(mask, bias *ir.Tensor) {
	return bandMask(w, off, keep, false)
}

// windowFutureMask is windowMask(w, off, keep) that also hides the keys
// past each query's diagonal, j > i + off.
func windowFutureMask(w, off int, keep bool) func(mask, bias *ir.Tensor) {
	return bandMask(w, off, keep, true)
}

// bandMask is windowMask, hiding the keys past the diagonal too with
// future.
func bandMask(w, off int, keep, future bool) func(mask, bias *ir.Tensor) {
	return func(mask, _ *ir.Tensor) {
		r := len(mask.Shape)
		sq, sk := mask.Shape[r-2], mask.Shape[r-1]
		for at := range mask.Bools() {
			i, j := at/sk%sq, at%sk
			mask.Bools()[at] = (j <= i+off-w || future && j > i+off) != keep
		}
	}
}

// diagonalBias returns a random bias by its diagonals, of shape shape's
// batch dims and Sq + Sk − 1, and the [..., Sq, Sk] bias it stands for.
func diagonalBias(r *rand.Rand, shape []int) (diag, full *ir.Tensor) {
	n := len(shape)
	sq, sk := shape[n-2], shape[n-1]
	nd := sq + sk - 1
	diag = randTensor(r, append(append([]int{}, shape[:n-2]...), nd)...)
	full = ir.NewTensor(ir.Float, shape)
	for at := range full.Float32s() {
		m, i, j := at/(sq*sk), at/sk%sq, at%sk
		full.Float32s()[at] = diag.Float32s()[m*nd+i-j+sk-1]
	}
	return diag, full
}

// gridBias returns a random bias by the rows and columns of a key grid kw
// keys wide (bias_grid), of shape shape's batch and Sq dims and kh + kw
// terms, and the [..., Sq, Sk] bias it stands for (its terms summed in
// float32, as the kernel sums them).
func gridBias(r *rand.Rand, shape []int, kw int) (grid, full *ir.Tensor) {
	n := len(shape)
	sq, sk := shape[n-2], shape[n-1]
	kh := sk / kw
	grid = randTensor(r, append(append([]int{}, shape[:n-1]...), kh+kw)...)
	for i := range grid.Float32s() {
		grid.Float32s()[i] *= 3
	}
	full = ir.NewTensor(ir.Float, shape)
	g := grid.Float32s()
	for at := range full.Float32s() {
		m, i, j := at/(sq*sk), at/sk%sq, at%sk
		row := (m*sq + i) * (kh + kw)
		full.Float32s()[at] = g[row+j/kw] + g[row+kh+j%kw]
	}
	return grid, full
}

// checkExtCase runs case c (random operands from r) on 1 and 3 threads in
// fp32, and in bf16 where the CPU has it, against refAttentionExt.
func checkExtCase(t *testing.T, r *rand.Rand, c attnExtCase) {
	t.Helper()
	q := randTensor(r, c.b, c.hq, c.sq, c.d)
	k := randTensor(r, c.b, c.hk, c.sk, c.d)
	v := randTensor(r, c.b, c.hk, c.sk, c.dv)
	in := []*ir.Tensor{q, k, v, nil, nil}
	attrs := []*ir.Attribute{fAttr("scale", c.scale)}
	if c.hq != c.hk && c.hk > 1 {
		attrs = append(attrs, iAttr("kv_group", int64(c.hq/c.hk)))
	}
	if c.softcap > 0 {
		attrs = append(attrs, fAttr("softcap", c.softcap))
	}
	if c.scoresMin != 0 {
		attrs = append(attrs, fAttr("scores_min", c.scoresMin))
	}
	if c.causal {
		attrs = append(attrs, iAttr("causal", 1), iAttr("causal_offset", int64(c.causalOff)))
	}
	if c.causalFill != 0 {
		attrs = append(attrs, fAttr("causal_fill", c.causalFill))
	}
	var mask *ir.Tensor
	if c.mask != nil {
		mask = randMask(r, c.kind, c.maskP, c.mask)
		for i, m := range mask.Float32s() {
			if i%c.mask[3] < c.leftPad {
				mask.Float32s()[i] = m - 1e4
			}
		}
		in[3] = mask
		attrs = append(attrs, sAttr("mask_kind", c.kind), fAttr("mask_fill", c.fill))
		if c.padKeys {
			attrs = append(attrs, iAttr("mask_pad_keys", 1))
		}
	}
	if c.kvLens != nil {
		in[4] = ir.FromSlice([]int{len(c.kvLens)}, c.kvLens)
	}
	var bias *ir.Tensor
	if c.bias != nil {
		bias = randTensor(r, c.bias...)
		in = append(in, bias)
		attrs = append(attrs, fAttr("bias_scale", c.biasScale))
		if c.biasFirst {
			attrs = append(attrs, iAttr("bias_first", 1))
		}
		if c.biasDiag {
			in[5], bias = diagonalBias(r, c.bias)
			attrs = append(attrs, iAttr("bias_diagonals", 1))
		}
		if c.biasGrid > 0 {
			in[5], bias = gridBias(r, c.bias, c.biasGrid)
			attrs = append(attrs, iAttr("bias_grid", int64(c.biasGrid)))
		}
	}
	if c.prep != nil {
		c.prep(mask, bias)
	}
	var sinks *ir.Tensor
	if c.sinks != nil {
		sinks = randTensor(r, c.sinks...)
		for i := range sinks.Float32s() {
			sinks.Float32s()[i] *= 4
		}
		sinks.Float32s()[len(sinks.Float32s())-1] = float32(math.Inf(-1))
		for len(in) < 6 {
			in = append(in, nil)
		}
		in = append(in, sinks)
	}
	n := attnNode(attrs...)
	n.Outputs = []string{"y"}
	if c.scoresMode != "" {
		n.Outputs = append(n.Outputs, "scores")
		n.Attrs = append(n.Attrs, sAttr("scores_mode", c.scoresMode))
	}
	wantY, wantS := refAttentionExt(c, q, k, v, mask, bias, sinks)
	vals := make([]Value, len(in))
	for i, x := range in {
		if x != nil {
			vals[i] = Value{Type: Known(x.DType, x.Shape)}
		}
	}
	inferred, err := inferFusedAttention(n, 1, vals)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct {
		threads int
		prec    Precision
	}{{1, PrecisionFP32}, {3, PrecisionFP32}, {3, PrecisionBF16}} {
		threads := run.threads
		if run.prec == PrecisionBF16 && (!kernel.BF16 || c.fp32Only) {
			continue
		}
		// bf16 products (8 significant bits) against the float64
		// reference: bf16Near.
		closeF64 := closeF64
		if run.prec == PrecisionBF16 {
			exact := closeF64 // NaN and ±Inf must match as they are
			closeF64 = func(g float32, w float64) bool {
				if math.IsNaN(w) || math.IsInf(w, 0) {
					return exact(g, w)
				}
				return bf16Near(g, w)
			}
		}
		out, err := runFusedAttention(&Context{Threads: threads, Precision: run.prec}, n, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(n.Outputs) || len(inferred) != len(out) {
			t.Fatalf("%d outputs, %d inferred, want %d", len(out), len(inferred), len(n.Outputs))
		}
		for k, o := range out {
			if !SameShape(mustConcrete(t, inferred[k].Type.Shape), o.Shape) {
				t.Fatalf("output %d has shape %v, inference said %v", k, o.Shape, inferred[k].Type.Shape)
			}
		}
		nans := 0
		for i, g := range out[0].Float32s() {
			if math.IsNaN(wantY[i]) {
				nans++
			}
			if !closeF64(g, wantY[i]) {
				t.Fatalf("threads %d, %v: Y[%d] = %g, want %g", threads, run.prec, i, g, wantY[i])
			}
		}
		if nans > 0 != c.fullyMaskedRows && c.dv > 0 {
			t.Fatalf("%d NaN outputs; fully masked rows expected: %v", nans, c.fullyMaskedRows)
		}
		if c.scoresMode != "" {
			for i, g := range out[1].Float32s() {
				if !closeF64(g, wantS[i]) {
					t.Fatalf("threads %d, %v: scores[%d] = %g, want %g", threads, run.prec, i, g, wantS[i])
				}
			}
		}
	}
}

// TestFusedAttentionCausalRescale makes every query's scores rise with the
// key, so that with causal masking each row's maximum is at its diagonal:
// the fast path's running shift moves up inside the fused kernel's tiles
// and in the straddling tiles it computes raw.
func TestFusedAttentionCausalRescale(t *testing.T) {
	s := 2*attnKBlock + 5
	c := attnExtCase{b: 1, hq: 1, hk: 1, sq: s, sk: s, d: 1, dv: 2, scale: 1, causal: true}
	q := ir.NewTensor(ir.Float, []int{1, 1, s, 1})
	k := ir.NewTensor(ir.Float, []int{1, 1, s, 1})
	v := ir.NewTensor(ir.Float, []int{1, 1, s, 2})
	for j := 0; j < s; j++ {
		q.Float32s()[j] = 1
		k.Float32s()[j] = float32(j) / 3 // rising scores: many shifts
		v.Float32s()[2*j], v.Float32s()[2*j+1] = float32(j%3), float32(j%7)
	}
	want, _ := refAttentionExt(c, q, k, v, nil, nil, nil)
	for _, threads := range []int{1, 2} {
		out, err := runFusedAttention(&Context{Threads: threads}, attnNode(fAttr("scale", 1), iAttr("causal", 1)), []*ir.Tensor{q, k, v})
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range out[0].Float32s() {
			if !closeF64(g, want[i]) {
				t.Fatalf("threads %d: Y[%d] = %g, want %g", threads, i, g, want[i])
			}
		}
	}
}

func TestFusedAttentionExtensionErrors(t *testing.T) {
	x := randTensor(rand.New(rand.NewSource(1)), 1, 4, 3, 8)
	k2 := randTensor(rand.New(rand.NewSource(2)), 1, 3, 3, 8)
	cases := []struct {
		name  string
		attrs []*ir.Attribute
		in    []*ir.Tensor
		outs  []string
		want  string
	}{
		{"group does not divide", []*ir.Attribute{iAttr("kv_group", 2)}, []*ir.Tensor{x, k2, k2}, nil, "Q's heads must be 2 times K's"},
		{"group of rank 2", []*ir.Attribute{iAttr("kv_group", 2)}, []*ir.Tensor{randTensor(rand.New(rand.NewSource(3)), 3, 8), k2, k2}, nil, "rank ≥ 3"},
		{"bad group", []*ir.Attribute{iAttr("kv_group", 0)}, []*ir.Tensor{x, x, x}, nil, "kv_group must be ≥ 1"},
		{"negative softcap", []*ir.Attribute{fAttr("softcap", -1)}, []*ir.Tensor{x, x, x}, nil, "softcap"},
		{"NaN scores_min", []*ir.Attribute{fAttr("scores_min", float32(math.NaN()))}, []*ir.Tensor{x, x, x}, nil, "scores_min must be a number below +inf"},
		{"bad causal", []*ir.Attribute{iAttr("causal", 2)}, []*ir.Tensor{x, x, x}, nil, "causal must be 0 or 1"},
		{"scores without mode", nil, []*ir.Tensor{x, x, x}, []string{"y", "s"}, "scores_mode is not set"},
		{"bad scores mode", []*ir.Attribute{sAttr("scores_mode", "all")}, []*ir.Tensor{x, x, x}, []string{"y", "s"}, "scores_mode \"all\""},
		{"kv lengths count", nil, []*ir.Tensor{x, x, x, nil, ir.FromSlice([]int{2}, []int64{1, 2})}, nil, "kv_lengths has 2 entries"},
		{"kv lengths type", nil, []*ir.Tensor{x, x, x, nil, ir.FromSlice([]int{1}, []float32{1})}, nil, "kv_lengths must be a 1-D int64"},
		{"mask longer than keys", []*ir.Attribute{sAttr("mask_kind", MaskAdditive), iAttr("mask_pad_keys", 1)}, []*ir.Tensor{x, x, x, randTensor(rand.New(rand.NewSource(4)), 3, 4)}, nil, "does not broadcast"},
		{"short mask without padding", []*ir.Attribute{sAttr("mask_kind", MaskAdditive)}, []*ir.Tensor{x, x, x, randTensor(rand.New(rand.NewSource(4)), 3, 2)}, nil, "does not broadcast"},
		{"bias of the wrong length", nil, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(5)), 3, 2)}, nil, "bias [3 2] does not broadcast"},
		{"bool bias", nil, []*ir.Tensor{x, x, x, nil, nil, ir.NewTensor(ir.Bool, []int{3, 3})}, nil, "bias has element type bool"},
		{"bias batch does not broadcast", nil, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(6)), 3, 3, 3)}, nil, "do not broadcast"},
		{"bias_diagonals without a bias", []*ir.Attribute{iAttr("bias_diagonals", 1)}, []*ir.Tensor{x, x, x}, nil, "bias_diagonals is set but no bias"},
		{"bias of the wrong number of diagonals", []*ir.Attribute{iAttr("bias_diagonals", 1)}, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(7)), 4, 6)}, nil, "bias [4 6] gives 6 diagonals (bias_diagonals), the scores [3 3] have 5"},
		{"diagonals of a batch that does not broadcast", []*ir.Attribute{iAttr("bias_diagonals", 1)}, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(8)), 3, 5)}, nil, "do not broadcast"},
		{"bias_grid without a bias", []*ir.Attribute{iAttr("bias_grid", 3)}, []*ir.Tensor{x, x, x}, nil, "bias_grid is set but no bias"},
		{"negative bias_grid", []*ir.Attribute{iAttr("bias_grid", -1)}, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(7)), 3, 4)}, nil, "bias_grid must be ≥ 0"},
		{"bias_grid with bias_diagonals", []*ir.Attribute{iAttr("bias_grid", 3), iAttr("bias_diagonals", 1)}, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(7)), 3, 4)}, nil, "bias_grid and bias_diagonals exclude each other"},
		{"bias_grid not dividing the keys", []*ir.Attribute{iAttr("bias_grid", 2)}, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(7)), 3, 4)}, nil, "bias_grid 2 does not divide the 3 keys into grid rows"},
		{"grid bias of the wrong length", []*ir.Attribute{iAttr("bias_grid", 3)}, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(7)), 3, 3)}, nil, "bias_grid 3: 3 keys make 1 grid rows, so the bias needs 4 terms a query (rows, then columns), not 3"},
		{"grid bias of rank 0", []*ir.Attribute{iAttr("bias_grid", 3)}, []*ir.Tensor{x, x, x, nil, nil, ir.FromSlice([]int{}, []float32{1})}, nil, "so the bias needs 4 terms a query (rows, then columns), not 1"},
		{"grid bias of another query count", []*ir.Attribute{iAttr("bias_grid", 3)}, []*ir.Tensor{x, x, x, nil, nil, randTensor(rand.New(rand.NewSource(7)), 2, 4)}, nil, "does not broadcast"},
		{"bad bias_first", []*ir.Attribute{iAttr("bias_first", 3)}, []*ir.Tensor{x, x, x}, nil, "bias_first must be 0 or 1"},
		{"causal_fill without causal", []*ir.Attribute{fAttr("causal_fill", -1e4)}, []*ir.Tensor{x, x, x}, nil, "causal_fill -10000 is given without causal = 1"},
		{"NaN causal_fill", []*ir.Attribute{iAttr("causal", 1), fAttr("causal_fill", float32(math.NaN()))}, []*ir.Tensor{x, x, x}, nil, "causal_fill must be finite or -inf, got NaN"},
		{"+inf causal_fill", []*ir.Attribute{iAttr("causal", 1), fAttr("causal_fill", float32(math.Inf(1)))}, []*ir.Tensor{x, x, x}, nil, "causal_fill must be finite or -inf, got +Inf"},
		{"sinks per key", nil, []*ir.Tensor{x, x, x, nil, nil, nil, randTensor(rand.New(rand.NewSource(9)), 1, 4, 1, 3)}, nil, "sinks [1 4 1 3] must have rank ≥ 2 and last two dims 1"},
		{"sinks of rank 1", nil, []*ir.Tensor{x, x, x, nil, nil, nil, randTensor(rand.New(rand.NewSource(9)), 4)}, nil, "must have rank ≥ 2"},
		{"int sinks", nil, []*ir.Tensor{x, x, x, nil, nil, nil, ir.FromSlice([]int{4, 1, 1}, []int64{1, 2, 3, 4})}, nil, "sinks have element type int64"},
		{"sinks batch does not broadcast", nil, []*ir.Tensor{x, x, x, nil, nil, nil, randTensor(rand.New(rand.NewSource(9)), 3, 1, 1)}, nil, "do not broadcast"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := attnNode(c.attrs...)
			n.Outputs = c.outs
			_, err := runFusedAttention(&Context{Threads: 1}, n, c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestTanh32(t *testing.T) {
	worst := 0.0
	for x := -50.0; x <= 50; x += 0.001 {
		got, want := float64(tanh32(float32(x))), math.Tanh(float64(float32(x)))
		e := math.Abs(got - want)
		if want != 0 {
			e /= math.Abs(want)
		}
		worst = math.Max(worst, e)
	}
	if worst > 5e-7 {
		t.Fatalf("tanh32's worst relative error %g, want ≤ 5e-7", worst)
	}
	for _, x := range []float32{0, float32(math.Inf(1)), float32(math.Inf(-1))} {
		if got := tanh32(x); float64(got) != math.Tanh(float64(x)) {
			t.Fatalf("tanh32(%g) = %g", x, got)
		}
	}
	if !math.IsNaN(float64(tanh32(float32(math.NaN())))) {
		t.Fatal("tanh32(NaN) is not NaN")
	}
}

// BenchmarkFusedAttentionCausal compares, at S=2048 (12 heads of 64, 2
// threads), attention without a mask, with the causal attribute (key
// blocks past the diagonal are never computed) and with the same causal
// mask as a bool tensor (blocks are classified from the mask, as for an
// exported masked_fill), and with a per-key mask ([1, 1, 1, S], half the
// keys masked at random) with and without the causal attribute.
func BenchmarkFusedAttentionCausal(b *testing.B) {
	const s, h, d = 2048, 12, 64
	r := rand.New(rand.NewSource(1))
	q, k, v := randTensor(r, 1, h, s, d), randTensor(r, 1, h, s, d), randTensor(r, 1, h, s, d)
	mask := ir.NewTensor(ir.Bool, []int{s, s})
	for i := 0; i < s; i++ {
		for j := i + 1; j < s; j++ {
			mask.Bools()[i*s+j] = true
		}
	}
	// A per-key mask hiding half the keys at random, as a [1, 1, 1, S]
	// bool mask (what bench-compare feeds the causal-or model).
	pad := randBools(r, 0.5, 1, 1, 1, s)
	out := ir.NewTensor(ir.Float, []int{1, h, s, d})
	cases := []struct {
		name string
		n    *ir.Node
		in   []*ir.Tensor
	}{
		{"none", attnNode(fAttr("scale", 0.125)), []*ir.Tensor{q, k, v}},
		{"causal attribute", attnNode(fAttr("scale", 0.125), iAttr("causal", 1)), []*ir.Tensor{q, k, v}},
		{"causal bool mask", attnNode(fAttr("scale", 0.125), sAttr("mask_kind", MaskBoolTrueMasks)), []*ir.Tensor{q, k, v, mask}},
		{"key mask", attnNode(fAttr("scale", 0.125), sAttr("mask_kind", MaskBoolTrueMasks)), []*ir.Tensor{q, k, v, pad}},
		{"causal attribute + key mask", attnNode(fAttr("scale", 0.125), iAttr("causal", 1), sAttr("mask_kind", MaskBoolTrueMasks)), []*ir.Tensor{q, k, v, pad}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := &Context{Threads: 2}
			for i := 0; i < b.N; i++ {
				if err := runFusedAttentionInto(ctx, c.n, c.in, []*ir.Tensor{out}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMaxMin32 checks the causal check's bound reduction: the extremes of
// slices of every length up to a few lanes past four, NaN wherever it is.
func TestMaxMin32(t *testing.T) {
	nan := float32(math.NaN())
	for n := 0; n <= 11; n++ {
		for at := -1; at < n; at++ { // the NaN's index (-1: none)
			xs := make([]float32, n)
			for i := range xs {
				xs[i] = float32((i*7)%5) - 2
			}
			if at >= 0 {
				xs[at] = nan
			}
			hi, lo := maxMin32(xs)
			wantHi, wantLo := float32(math.Inf(-1)), float32(math.Inf(1))
			for _, x := range xs {
				wantHi, wantLo = max(wantHi, x), min(wantLo, x)
			}
			same := func(a, b float32) bool { return a == b || (a != a && b != b) }
			if !same(hi, wantHi) || !same(lo, wantLo) {
				t.Errorf("n %d, NaN at %d: maxMin32 = %g, %g; want %g, %g", n, at, hi, lo, wantHi, wantLo)
			}
			if at >= 0 && (hi == hi || lo == lo) {
				t.Errorf("n %d, NaN at %d: the NaN is lost (%g, %g)", n, at, hi, lo)
			}
		}
	}
}

// TestFusedAttentionCausalFillRandom runs random causal_fill cases against
// the float64 reference: sizes across key blocks, offsets of either sign,
// fills from GPT-2's -1e4 to finfo.min and one near the scores (30), and
// an additive per-key mask whose first keys may be padding (-1e4 or
// finfo.min) — rows then fail the check and are computed again.
func TestFusedAttentionCausalFillRandom(t *testing.T) {
	r := rand.New(rand.NewSource(23))
	fills := []float32{-1e4, -1e9, -math.MaxFloat32, 30}
	for i := range 24 {
		n := 1 + r.Intn(attnKBlock+80)
		// fp32 only: a row that sees a handful of keys can be off by more
		// than the bf16 tolerance whatever the fill (the -inf cut too).
		c := attnExtCase{name: fmt.Sprint(i), b: 1 + r.Intn(2), hq: 2, hk: 1 + r.Intn(2), sq: n, sk: n, d: 8, dv: 8,
			scale: 0.3, causal: true, causalOff: r.Intn(41) - 20, causalFill: fills[r.Intn(len(fills))], fp32Only: true}
		if c.causalOff < 0 && c.causalFill == -math.MaxFloat32 {
			// Rows with no key see finfo.min plus a padded finfo.min: -inf
			// everywhere and NaN, where the float64 reference sees a
			// uniform row; keep the offset for the other fills.
			c.causalOff = -c.causalOff
		}
		if r.Intn(3) > 0 {
			c.mask, c.kind = []int{c.b, 1, 1, n}, MaskAdditive
			if r.Intn(2) == 0 {
				c.leftPad = r.Intn(n/4 + 1)
			}
		}
		t.Run(fmt.Sprintf("%d: B=%d Hk=%d S=%d off=%d fill=%g mask=%v pad=%d", i, c.b, c.hk, n, c.causalOff, c.causalFill, c.mask != nil, c.leftPad), func(t *testing.T) {
			checkExtCase(t, r, c)
		})
	}
}
