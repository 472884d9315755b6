package kernel_test

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/roofline"
)

// BenchmarkRooflineAttentionKernels measures the fused attention's two
// kernels apart and together, on one core, as ops' FusedAttention calls
// them on seed 000's MHA at S=512 (12 heads of 64, K and V read in place
// from the QKV projection's rows of 2304, items of 32 queries, one block
// of 512 keys): the bare 8×32 scores product (Sgemm8x32RowsLoop, k = 64),
// the scores kernel with the softmax's exponentials in its epilogue
// (ScoresExp8x32; scores+exp2 is ScoresExp8x32Base2, the kernel ops runs
// where no additive mask is given), P·V (Sgemm8x32Loop over the
// probabilities), and the two in sequence; PV/packed reads Vᵀ packed as slivers of 8 dims
// (PackSlivers8's layout, what ops packs at S ≥ 1024) instead of V's rows
// in place. GFLOP/s counts the products only, so "scores" against
// "scores+exp" is the exponentials' cost and "scores+exp,PV" against
// ops' BenchmarkRoofline the op's own overhead (packing Q, writing out).
// The bf16/ modes are the same for the bf16 path's kernels
// (BF16Gemm8x32Loop, ScoresExpBF16x32 and ScoresExpBF16x32Base2,
// BF16Gemm8x32LoopA8), %peak of the VDPBF16PS peak.
//
//	go test ./ops/internal/kernel -run '^$' -bench RooflineAttentionKernels
func BenchmarkRooflineAttentionKernels(b *testing.B) {
	if !kernel.AVX512 {
		b.Skip("no AVX-512 on this CPU")
	}
	const d, keys, lda, heads = 64, 512, 3 * 12 * 64, 12
	const items = keys / 32 // of 32 queries
	r := rand.New(rand.NewSource(1))
	qkv := make([]float32, keys*lda)
	for i := range qkv {
		qkv[i] = float32(r.NormFloat64()) * 0.35
	}
	qp := make([]float32, items*d*32) // scale·Qᵀ of one head, packed
	for i := range qp {
		qp[i] = float32(r.NormFloat64()) * 0.35
	}
	st := make([]float32, keys*32) // one item's scores (probabilities), transposed
	acc := make([]float32, d*32)
	var shift, sum, mx, limit [32]float32 // shifts 0, limits 8 above them: no tile stops
	for c := range limit {
		limit[c] = 8
	}
	vp := make([]float32, heads*d*keys) // every head's Vᵀ packed as slivers of 8 dims (ops' Vp)
	for h := 0; h < heads; h++ {
		kernel.PackSlivers8(&vp[h*d*keys], &qkv[1536+h*d], lda, keys, d/8, 8*keys)
	}
	modes := []string{"scores", "scores+exp", "scores+exp2", "PV", "PV/packed",
		"scores+exp,PV", "scores+exp2,PV", "scores+exp,PV/packed", "scores+exp2,PV/packed"}
	for _, mode := range modes {
		flops := float64(heads*items) * 2 * d * keys * 32
		if strings.HasPrefix(mode, "scores+") && strings.Contains(mode, ",PV") {
			flops *= 2
		}
		b.Run(mode, func(b *testing.B) {
			roofline.Report(b, 1, 1, flops, func(int) {
				for h := 0; h < heads; h++ {
					k, v := qkv[768+h*d:], qkv[1536+h*d:]
					for it := 0; it < items; it++ {
						switch mode {
						case "scores":
							kernel.Sgemm8x32RowsLoop(d, &k[0], lda, &qp[it*d*32], &st[0], 32, keys/8, 8*lda, 0, 8*32, false)
						case "scores+exp", "scores+exp,PV", "scores+exp,PV/packed":
							// Shift 0: the scores stay well below 8, so no tile stops the kernel.
							sum = [32]float32{}
							if n := kernel.ScoresExp8x32(d, &k[0], lda, &qp[it*d*32], &st[0], 32, keys/8, 8*lda, 8*32, &shift[0], &limit[0], &sum[0], &mx[0], nil, nil, 0); n != keys/8 {
								b.Fatalf("ScoresExp8x32 stopped at tile %d of %d", n, keys/8)
							}
						case "scores+exp2", "scores+exp2,PV", "scores+exp2,PV/packed":
							sum = [32]float32{}
							if n := kernel.ScoresExp8x32Base2(d, &k[0], lda, &qp[it*d*32], &st[0], 32, keys/8, 8*lda, 8*32, &shift[0], &limit[0], &sum[0], &mx[0], nil, nil, 0); n != keys/8 {
								b.Fatalf("ScoresExp8x32Base2 stopped at tile %d of %d", n, keys/8)
							}
						}
						switch mode {
						case "PV", "scores+exp,PV", "scores+exp2,PV":
							kernel.Sgemm8x32Loop(keys, &v[0], &st[0], &acc[0], lda, 32, d/8, 8, 0, 8*32, true)
						case "PV/packed", "scores+exp,PV/packed", "scores+exp2,PV/packed":
							kernel.Sgemm8x32Loop(keys, &vp[h*d*keys], &st[0], &acc[0], 8, 32, d/8, 8*keys, 0, 8*32, true)
						}
					}
				}
			}, false)
		})
	}
	if !kernel.BF16 {
		return
	}
	// bf16 (ops' attention_bf16.go layouts): K as rows of d/2 pair words
	// (packed, 8 keys a tile), scale·Qᵀ panels and Vᵀ slivers of pair words,
	// the probabilities as pair words (ScoresExpBF16x32's output, what
	// BF16Gemm8x32LoopA8 reads as B).
	const dw, kp = d / 2, keys / 2
	words := func(n int) []uint32 {
		w := make([]uint32, n)
		for i := range w {
			w[i] = 0x3e803e80 + uint32(r.Intn(1<<6))*0x10001 // bf16 pairs near 0.25
		}
		return w
	}
	kw, qw, vw, pw := words(heads*keys*dw), words(items*dw*32), words(heads*d*kp), words(kp*32+128) // + the last tile's staging
	for _, mode := range []string{"scores", "scores+exp", "scores+exp2", "PV", "scores+exp,PV", "scores+exp2,PV"} {
		flops := float64(heads*items) * 2 * d * keys * 32
		if strings.HasSuffix(mode, ",PV") {
			flops *= 2
		}
		b.Run("bf16/"+mode, func(b *testing.B) {
			roofline.Report(b, 1, 1, flops, func(int) {
				for h := 0; h < heads; h++ {
					k, v := kw[h*keys*dw:], vw[h*d*kp:]
					for it := 0; it < items; it++ {
						switch mode {
						case "scores":
							kernel.BF16Gemm8x32Loop(dw, &k[0], dw, &qw[it*dw*32], &st[0], 32, keys/8, 8*dw, 0, 8*32, false)
						case "scores+exp", "scores+exp,PV":
							sum = [32]float32{}
							if n := kernel.ScoresExpBF16x32(dw, &k[0], dw, &qw[it*dw*32], &pw[0], keys/8, 8*dw, &shift[0], &limit[0], &sum[0], &mx[0], nil, nil, 0); n != keys/8 {
								b.Fatalf("ScoresExpBF16x32 stopped at tile %d of %d", n, keys/8)
							}
						case "scores+exp2", "scores+exp2,PV":
							sum = [32]float32{}
							if n := kernel.ScoresExpBF16x32Base2(dw, &k[0], dw, &qw[it*dw*32], &pw[0], keys/8, 8*dw, &shift[0], &limit[0], &sum[0], &mx[0], nil, nil, 0); n != keys/8 {
								b.Fatalf("ScoresExpBF16x32Base2 stopped at tile %d of %d", n, keys/8)
							}
						}
						if strings.HasSuffix(mode, "PV") {
							kernel.BF16Gemm8x32LoopA8(kp, &v[0], 8, &pw[0], &acc[0], 32, d/8, 8*kp, 0, 8*32, true)
						}
					}
				}
			}, true)
		})
	}
}
