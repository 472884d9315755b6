package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestFusedAttentionWideLogits checks the fast path on logits as wide as
// trained models' and wider (spread 16 and 64, two key blocks and a
// partial one) against the float64 reference, in fp32 and bf16: the rows'
// maxima climb over the keys, the scores kernel stops and the running
// shifts move many times a block, and P·V applies each move to the
// accumulator between the block's segments (moveShifts). fp32 is within
// 2e-4 + 1e-3·|w| (the scores' own rounding, at sizes up to 250, moves
// the probabilities by up to ~1e-4 relative). bf16 takes K and V exact in
// bf16 and is checked against the reference on the Q it multiplies by:
// scale·log2 e·Q rounded to bf16 (a score of 50 moves by a tenth with that
// rounding alone), times ln 2; what remains is the probabilities'
// rounding (bf16Near).
func TestFusedAttentionWideLogits(t *testing.T) {
	const b, h, d = 1, 2, 64
	s := 2*attnKBlock + 37
	for _, sigma := range []float64{16, 64} {
		for _, prec := range []Precision{PrecisionFP32, PrecisionBF16} {
			t.Run(fmt.Sprintf("%s/sigma=%g", prec, sigma), func(t *testing.T) {
				r := rand.New(rand.NewSource(9))
				q, k, v := randTensor(r, b, h, s, d), randTensor(r, b, h, s, d), randTensor(r, b, h, s, d)
				sp := float32(math.Sqrt(sigma))
				for i := range q.Float32s() {
					q.Float32s()[i] *= sp
					k.Float32s()[i] *= sp
				}
				const scale = 0.125
				want := refAttention(t, q, k, v, nil, scale, false, "", 0, 1)
				if prec == PrecisionBF16 {
					k, v = bf16Tensor(k), bf16Tensor(v)
					qEff := ir.NewTensor(ir.Float, q.Shape)
					for i, x := range q.Float32s() {
						qEff.Float32s()[i] = float32(rb(x*(scale*log2E32)) * math.Ln2)
					}
					want = refAttention(t, qEff, k, v, nil, 1, false, "", 0, 1)
				}
				out, err := runFusedAttention(&Context{Threads: 2, Precision: prec}, attnNode(fAttr("scale", scale)), []*ir.Tensor{q, k, v})
				if err != nil {
					t.Fatal(err)
				}
				var worst float64
				for i, g := range out[0].Float32s() {
					w := float64(want.Float32s()[i])
					worst = max(worst, math.Abs(float64(g)-w))
					ok := math.Abs(float64(g)-w) <= 2e-4+1e-3*math.Abs(w)
					if prec == PrecisionBF16 {
						ok = bf16Near(g, w)
					}
					if !ok {
						t.Fatalf("output %d: %g, want %g", i, g, w)
					}
				}
				t.Logf("largest error %.3g", worst)
			})
		}
	}
}
