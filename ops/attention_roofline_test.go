package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/roofline"
)

// benchScratch is a Context's Scratch for benchmarks: the buffers of the
// first run are handed out again on every run (used = 0 starts one), as
// the executor's arena does.
type benchScratch struct {
	bufs [][]float32
	used int
}

// floats returns the next buffer of n floats.
func (s *benchScratch) floats(n int) []float32 {
	if s.used == len(s.bufs) {
		s.bufs = append(s.bufs, make([]float32, n))
	}
	s.used++
	return s.bufs[s.used-1][:n]
}

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
					var scratch benchScratch
					ctx := &Context{Threads: th, Precision: prec, Scratch: scratch.floats}
					roofline.Report(b, 1, th, flops, func(int) {
						scratch.used = 0
						if err := runFusedAttentionInto(ctx, n, []*ir.Tensor{qkv, qkv, qkv}, []*ir.Tensor{out}); err != nil {
							b.Fatal(err)
						}
					}, prec == PrecisionBF16)
				})
			}
		}
	}
}

// BenchmarkFusedAttentionLogitSpread measures the fused attention on seed
// 000's shapes (Q, K and V read from the fused QKV projection's output,
// 12 heads of 64, 2 threads) with logits of spread σ = 1, 4, 16 and 64: the
// running shifts of the streaming softmax move as the rows' maxima climb,
// and each move stops the scores kernel (attnShiftHeadroom). Trained
// models' logits spread far wider than the random weights of the
// benchmarks' exports (σ ≈ 0.1); ONNX Runtime's softmax takes each row's
// maximum first and does not depend on it.
//
//	go test ./ops -run '^$' -bench FusedAttentionLogitSpread
func BenchmarkFusedAttentionLogitSpread(b *testing.B) {
	const h, d = 12, 64
	for _, s := range []int{512, 2048} {
		for _, sigma := range []float32{1, 4, 16, 64} {
			// Q and K of spread √σ: scale · D products of spread σ each
			// is σ when scale = 1/√D.
			r := rand.New(rand.NewSource(1))
			qkv := randTensor(r, 1, s, 3*h*d)
			spread := float32(math.Sqrt(float64(sigma)))
			for i := range qkv.Float32s() {
				qkv.Float32s()[i] *= spread
			}
			view := func(which int) []int64 {
				return View{Offset: which * h * d, Shape: []int{1, h, s, d}, Strides: []int{s * 3 * h * d, d, 3 * h * d, 1}}.Ints()
			}
			n := attnNode(fAttr("scale", 0.125), intsAttr("q_view", view(0)), intsAttr("k_view", view(1)), intsAttr("v_view", view(2)))
			out := ir.NewTensor(ir.Float, []int{1, h, s, d})
			for _, prec := range []Precision{PrecisionFP32, PrecisionBF16} {
				if prec == PrecisionBF16 && !kernel.BF16 {
					continue
				}
				b.Run(fmt.Sprintf("%s/S=%d/sigma=%g", prec, s, sigma), func(b *testing.B) {
					var scratch benchScratch
					ctx := &Context{Threads: 2, Precision: prec, Scratch: scratch.floats}
					for i := 0; i < b.N; i++ {
						scratch.used = 0
						if err := runFusedAttentionInto(ctx, n, []*ir.Tensor{qkv, qkv, qkv}, []*ir.Tensor{out}); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
