package graph

import (
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Weights zeroed after the Softmax.
//
// ESPnet's and WeNet's attention (every Conformer and Transformer of those
// speech toolkits) mask the scores and then zero the masked weights again:
//
//	scores = scores.masked_fill(mask, finfo.min)   (WeNet: -inf)
//	attn = softmax(scores).masked_fill(mask, 0.0)
//
// which exports as Where(cond, fill, S) before the Softmax and
// Where(cond', 0, P) after it, cond and cond' both Casts of one bool mask.
// In a row that keeps a key the second Where changes nothing: the masked
// weights are already exactly 0 (exp(finfo.min − max) underflows, and
// exp(-inf) is 0). A row whose every key the mask hides has all its scores
// at the fill, so its weights are uniform (finfo.min) or NaN (-inf), and the
// second Where makes them 0: its output row is 0. The fused node says so
// with masked_rows_zero (a row that sees no key outputs zeros) and a -inf
// fill, which also lets the kernel skip the key blocks the mask hides.
// The match requires the same mask (through no-op Casts) and polarity in
// both Wheres, a fill of -inf or at most -2^127 (times the scales after
// it) and no causal cut; an additive bias besides the mask (ESPnet's
// relative-position term) is assumed to hold no -inf, as the product of
// finite activations it is does not. Where the weights are also read (a
// graph output: attnrun's attention maps), the fused node writes them as
// the export has them there: after the zeroing Where, 0 in such a row;
// before it, the softmax's output, NaN for a -inf fill and uniform for a
// finite one (masked_rows_weights).

// zeroedWeights reads a Where after the Softmax that zeroes weights:
// Where(cond, 0, P) (kind bool_true_masks) or Where(cond, P, 0)
// (bool_false_masks), the zero a one-element constant, the output not
// wider than P. It returns cond, the kind and P.
func (f *fuser) zeroedWeights(n *ir.Node) (cond, kind, p string, ok bool) {
	if n.OpType != "Where" || len(n.Inputs) != 3 || f.types[n.Inputs[0]].Type.DType != ir.Bool {
		return "", "", "", false
	}
	for _, c := range []struct {
		zero, p int
		kind    string
	}{{1, 2, ops.MaskBoolTrueMasks}, {2, 1, ops.MaskBoolFalseMasks}} {
		if z, ok := f.scalarConst(n.Inputs[c.zero]); ok && z == 0 && f.notWider(n, n.Inputs[c.p]) {
			return n.Inputs[0], c.kind, n.Inputs[c.p], true
		}
	}
	return "", "", "", false
}

// noOpSource follows tensor name back through no-op Casts and Identities
// to the tensor they pass on.
func (f *fuser) noOpSource(name string) string {
	for range maxViewChain {
		i, ok := f.producer[name]
		if !ok || f.removed[i] || !f.noOp(f.pl.steps[i].node) {
			break
		}
		name = f.pl.steps[i].node.Inputs[0]
	}
	return name
}

// acceptZeroRows checks a match whose weights a Where zeroes (m.zeroCond)
// against its mask: the chain's one Where mask must hide what the zeroing
// Where zeroes, with a fill that gives masked keys no weight. It then
// turns the fill into -inf.
func (f *fuser) acceptZeroRows(m *attnMatch) bool {
	var where *maskStage
	for i := range m.masks {
		if m.masks[i].kind == ops.MaskAdditive {
			continue
		}
		if where != nil {
			return false
		}
		where = &m.masks[i]
	}
	if where == nil || where.causal || where.additive != nil || where.kind != m.zeroKind ||
		f.noOpSource(where.name) != f.noOpSource(m.zeroCond) {
		return false
	}
	fill := where.fill * where.post
	if !(math.IsInf(fill, -1) || fill <= -0x1p127) {
		return false
	}
	switch {
	case m.weights == "" || m.weightsZeroed:
	case math.IsInf(fill, -1):
		m.zeroWeights = ops.MaskedRowsWeightsNaN
	default:
		m.zeroWeights = ops.MaskedRowsWeightsUniform
	}
	where.fill, where.post = math.Inf(-1), 1
	return true
}
