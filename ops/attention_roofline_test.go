package ops

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/roofline"
)

// BenchmarkRoofline is the fused attention's row of the roofline (see
// ops/blas's BenchmarkRoofline for the projections): seed 000's MHA
// attention at C=768, H=12, D=64, reading Q, K and V from the fused QKV
// projection's output [1, S, 2304] as the plan does, on 1 and 2 threads.
// GFLOP/s counts the two products (4·H·S²·D); %peak divides it by the
// measured multiply-add peak of as many cores (bf16: of VDPBF16PS).
//
//	go test ./ops -run '^$' -bench Roofline
func BenchmarkRoofline(b *testing.B) {
	const h, d = 12, 64
	for _, s := range []int{197, 512, 2048} { // 197: ViT-B/16's tokens
		r := rand.New(rand.NewSource(1))
		qkv := randTensor(r, 1, s, 3*h*d)
		view := func(which int) []int64 {
			return View{Offset: which * h * d, Shape: []int{1, h, s, d}, Strides: []int{s * 3 * h * d, d, 3 * h * d, 1}}.Ints()
		}
		n := attnNode(fAttr("scale", 0.125), intsAttr("q_view", view(0)), intsAttr("k_view", view(1)), intsAttr("v_view", view(2)))
		out := ir.NewTensor(ir.Float, []int{1, h, s, d})
		flops := 4 * float64(h*s*s*d)
		for _, prec := range []Precision{PrecisionFP32, PrecisionBF16} {
			if prec == PrecisionBF16 && !kernel.BF16 {
				continue
			}
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("attention/%s/S=%d/%dthread", prec, s, th), func(b *testing.B) {
					// Scratch reused across runs, as the executor's arena does.
					var bufs [][]float32
					used := 0
					ctx := &Context{Threads: th, Precision: prec, Scratch: func(n int) []float32 {
						if used == len(bufs) {
							bufs = append(bufs, make([]float32, n))
						}
						used++
						return bufs[used-1][:n]
					}}
					roofline.Report(b, 1, th, flops, func(int) {
						used = 0
						if err := runFusedAttentionInto(ctx, n, []*ir.Tensor{qkv, qkv, qkv}, []*ir.Tensor{out}); err != nil {
							b.Fatal(err)
						}
					}, prec == PrecisionBF16)
				})
			}
		}
	}
}
