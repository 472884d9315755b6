package ops

import "math"

// Sinks: one more logit in every row's softmax.
//
// gpt-oss joins a learned logit a head to every row of the scores, takes
// the softmax over the Sk + 1 values and drops the sink's column before
// the product with V (transformers' GptOssAttention): the sink takes a
// share of each row's weight and gives nothing back. The streaming
// softmax needs nothing per key for it: a row ends with its running shift
// m (the largest score) and l = Σ exp(x_j − m), and the sink only changes
// the normalization, to exp(x_j − M) / (l·exp(m − M) + exp(s − M)) with
// M = max(m, s), so the output row Σ exp(x_j − m)·v_j is scaled by
// sinkScale instead of 1/l. A row that sees no key gives all its weight
// to the sink and outputs 0 (NaN for a NaN or +inf sink, and with a -inf
// sink it is as without one), as the export's softmax over the joined row
// does.

// sinkAt returns the sink logit of batch matrix b.
func (p *attnPlan) sinkAt(b int) float32 { return p.sinkFloats[p.sinkOff[b]] }

// sinkScale returns the factor that turns a row's Σ exp(x_j − m)·v_j into
// its output when its softmax also takes sink logit s: exp(m − M) /
// (l·exp(m − M) + exp(s − M)), M = max(m, s), computed in float64. m is
// the row's shift (finite or NaN), l its sum. A sink of −inf leaves 1/l; a
// NaN sink makes the row NaN, as the export's softmax does.
func sinkScale(m float32, l float64, s float32) float32 {
	mm, ss := float64(m), float64(s)
	top := math.Max(mm, ss)
	if math.IsNaN(ss) {
		top = ss
	}
	f := math.Exp(mm - top)
	return float32(f / (l*f + math.Exp(ss-top)))
}

// sinkOnlyValue is every output and weight of a row that sees no key, with
// sink logit s above -inf: 0 for a finite sink (all the weight is the
// sink's), NaN for a NaN or +inf one (the export's softmax subtracts +inf
// from it).
func sinkOnlyValue(s float32) float32 {
	if math.IsNaN(float64(s)) || math.IsInf(float64(s), 1) {
		return float32(math.NaN())
	}
	return 0
}
