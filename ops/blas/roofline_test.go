package blas

import (
	"flag"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/roofline"
)

// The roofline: this machine's fp32 (and bf16) peak, measured, and the
// GEMMs of seed 000's MultiHeadAttention at C=768, S=512 as a fraction of
// it.
//
//	go test ./ops/blas -run '^$' -bench Roofline
//
// Every sub-benchmark runs b.N rounds and reports the best round
// (GFLOP/s: the machine's shared CPUs give a round without interference
// now and then, and the best is what the hardware does) and the mean
// (mean-GFLOP/s). peak/* is the FP pipes' throughput: 24 independent
// multiply-adds on registers, no memory operands (kernel.FMAPeak512,
// DotBF16Peak512). microkernel/* is the GEMM micro-kernel's inner loop
// with its operands in L1 (k = 256, so A and B slivers take 40 KiB of the
// 48 KiB L1d on Zen 5). The 2-core variants run one copy per core in
// lock-step rounds: a round ends when both copies have. gemm/* are the
// products of the MHA layer through the GEMM the ops use, on 1 and 2
// threads; their %peak metric is GFLOP/s over the peak/fma (or peak/bf16)
// of as many cores, measured once per process (package roofline). The
// scores and context rows multiply each head with the plain GEMM; the
// fused attention kernel, which the plan runs instead, has its own row in
// package ops (go test ./ops -bench Roofline).

// l1Tile returns, for a thread count, a call that runs the micro-kernel
// 32 times on L1-resident operands (k = 256) in each thread, with its own
// tile of C, and the flops of one call; ok is false without an assembly
// micro-kernel for the precision.
func l1Tile(bf16 bool) (func(threads int) (func(t int), float64), bool) {
	const k, reps = 256, 32
	switch {
	case bf16 && kernel.BF16:
		return func(threads int) (func(int), float64) {
			a := make([]uint32, 8*k/2)
			bw := make([]uint32, 32*k/2)
			cs := make([][]float32, threads)
			for t := range cs {
				cs[t] = make([]float32, 8*32+16) // own cache lines per thread
			}
			return func(t int) {
				for i := 0; i < reps; i++ {
					kernel.BF16Gemm8x32(k/2, &a[0], k/2, &bw[0], &cs[t][0], 32, nil, true, nil, 0)
				}
			}, 2 * k * 8 * 32 * reps
		}, true
	case !bf16 && kernel.Available:
		return func(threads int) (func(int), float64) {
			a := make([]float32, mr*k)
			bb := make([]float32, nr*k)
			cs := make([][]float32, threads)
			for t := range cs {
				cs[t] = make([]float32, mr*nr+16)
			}
			return func(t int) {
				for i := 0; i < reps; i++ {
					if rowKernel != nil { // the kernel the GEMM runs: A's rows in place
						rowKernel(k, &a[0], k, &bb[0], &cs[t][0], nr, nil, true, nil, 0)
						continue
					}
					asmKernel(k, &a[0], &bb[0], &cs[t][0], nr, true)
				}
			}, float64(2 * k * mr * nr * reps)
		}, true
	}
	return nil, false
}

// mhaGemm is one product of the MHA layer.
type mhaGemm struct {
	name    string
	m, n, k int
	batch   int  // independent products (heads) spread over the threads
	transB  bool // B is k×n stored transposed (K for the scores)
	packedB bool // constant weights, packed once (SgemmPacked with bias)
}

// mhaGemms are seed 000's MultiHeadAttention products at C=768, H=12,
// S=512 (3.22 GFLOP in all, 2·m·n·k·batch summed), and its two
// projections at S=2048.
var mhaGemms = []mhaGemm{
	{"qkv-512x768x2304", 512, 2304, 768, 1, false, true},
	{"out-512x768x768", 512, 768, 768, 1, false, true},
	{"scores-12x512x64x512", 512, 512, 64, 12, true, false},
	{"context-12x512x512x64", 512, 64, 512, 12, false, false},
	// The projections at S=2048, where A (6 MiB) no longer fits in L2.
	{"qkv-2048x768x2304", 2048, 2304, 768, 1, false, true},
	{"out-2048x768x768", 2048, 768, 768, 1, false, true},
}

func BenchmarkRoofline(b *testing.B) {
	for _, bf16 := range []bool{false, true} {
		prec := "fma"
		if bf16 {
			prec = "bf16"
		}
		call, flops, ok := roofline.PeakLoop(bf16)
		if !ok {
			continue
		}
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("peak/%s/%dcore", prec, th), func(b *testing.B) {
				roofline.Report(b, th, 0, flops, func(int) { call(0) }, bf16)
			})
		}
		if tile, ok := l1Tile(bf16); ok {
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("microkernel/%s/%dcore", prec, th), func(b *testing.B) {
					run, fl := tile(th)
					roofline.Report(b, th, th, fl, run, bf16)
				})
			}
		}
	}
	r := rand.New(rand.NewSource(1))
	for _, g := range mhaGemms {
		a := randSlice(r, g.batch*g.m*g.k)
		bb := randSlice(r, g.batch*g.k*g.n)
		bias := randSlice(r, g.n)
		c := make([]float32, g.batch*g.m*g.n)
		ldb := g.n
		if g.transB {
			ldb = g.k
		}
		flops := 2 * float64(g.m*g.n*g.k*g.batch)
		for _, bf16 := range []bool{false, true} {
			if bf16 && !kernel.BF16 {
				continue
			}
			prec := map[bool]string{false: "fp32", true: "bf16"}[bf16]
			var pb *PackedB
			switch {
			case g.packedB && bf16:
				pb = PackBBF16(g.transB, g.k, g.n, bb, ldb)
			case g.packedB:
				pb = PackB(g.transB, g.k, g.n, bb, ldb)
			}
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("gemm/%s/%s/%dthread", prec, g.name, th), func(b *testing.B) {
					roofline.Report(b, 1, th, flops, func(int) {
						if pb != nil {
							SgemmPacked(th, false, g.m, a, g.k, pb, bias, c, g.n, nil)
							return
						}
						headGemms(th, g, bf16, a, bb, ldb, c)
					}, bf16)
				})
			}
		}
	}
}

// BenchmarkSgemmPackedColdWeights runs a packed 768×768 weight product
// with bias on 2 threads at the short row counts of short sequences and
// small batches (M = 16 to 128), cycling through 48 weights (113 MiB,
// more than the L3 holds), so that every product reads its weight from
// memory as a 12-layer model's does. How close it stays to the peak is
// how well the kernel's prefetches of the next B panel (nextPanelShare)
// hide memory: M rows give M/8 tiles a panel to spread them over.
//
//	go test ./ops/blas -run '^$' -bench SgemmPackedColdWeights
func BenchmarkSgemmPackedColdWeights(b *testing.B) {
	const k, n, weights = 768, 768, 48
	r := rand.New(rand.NewSource(1))
	pbs := make([]*PackedB, weights)
	for i := range pbs {
		pbs[i] = PackB(false, k, n, randSlice(r, k*n), n)
	}
	bias := randSlice(r, n)
	for _, m := range []int{16, 40, 64, 77, 128} {
		a := randSlice(r, m*k)
		c := make([]float32, m*n)
		next := 0
		b.Run(fmt.Sprintf("M=%d", m), func(b *testing.B) {
			roofline.Report(b, 1, 2, 2*float64(m*n*k), func(int) {
				SgemmPacked(2, false, m, a, k, pbs[next%weights], bias, c, n, nil)
				next++
			}, false)
		})
	}
}

// headGemms runs g.batch products spread over th goroutines, each serial
// (as the fused attention kernel spreads heads and query blocks).
func headGemms(th int, g mhaGemm, bf16 bool, a, b []float32, ldb int, c []float32) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < th; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := int(next.Add(1) - 1); h < g.batch; h = int(next.Add(1) - 1) {
				if bf16 {
					SgemmBF16(1, false, g.transB, g.m, g.n, g.k, 1, a[h*g.m*g.k:], g.k, b[h*g.k*g.n:], ldb, 0, c[h*g.m*g.n:], g.n)
					continue
				}
				SgemmSerial(false, g.transB, g.m, g.n, g.k, 1, a[h*g.m*g.k:], g.k, b[h*g.k*g.n:], ldb, 0, c[h*g.m*g.n:], g.n)
			}
		}()
	}
	wg.Wait()
}

// floorGFLOP lists the workloads' matrix-product flops (in GFLOP) that
// BenchmarkFloor measures the FP pipes' floor for; bench.js passes its
// workloads' "gflop" here.
var floorGFLOP = flag.String("floor-gflop", "3.221", "comma-separated GFLOP counts for BenchmarkFloor (default: seed 000's MHA at C=768, S=512)")

// BenchmarkFloor is the time the FP pipes alone need for a workload of N
// GFLOP of matrix products on 1 and 2 cores: jobs of the register-only peak
// loop worth that many flops, split over the cores (roofline.Floor),
// repeated for about 2 s (5 to 51 jobs). It reports the median job (p50-ms,
// and p50-GFLOP/s) and the fastest (best-ms). A runtime's median for a
// workload with that many flops cannot be below p50-ms: it has the same
// multiply-adds to issue, on the same pipes, under the same interference,
// and work besides (softmax, copies, waits).
//
//	go test ./ops/blas -run '^$' -bench Floor -benchtime 1x -args -floor-gflop 3.221,22.549
func BenchmarkFloor(b *testing.B) {
	for _, field := range strings.Split(*floorGFLOP, ",") {
		gflop, err := strconv.ParseFloat(strings.TrimSpace(field), 64)
		if err != nil || gflop <= 0 {
			b.Fatalf("-floor-gflop: %q is not a positive number of GFLOP", field)
		}
		for _, bf16 := range []bool{false, true} {
			prec := map[bool]string{false: "fma", true: "bf16"}[bf16]
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%dcore/gflop=%g", prec, th, gflop), func(b *testing.B) {
					peak := roofline.Peak(bf16, th)
					if peak == 0 {
						b.Skipf("no %s peak loop on this CPU", prec)
					}
					reps := max(5, min(51, int(2/(gflop/peak))))
					var times []time.Duration
					for i := 0; i < b.N; i++ {
						times, _ = roofline.Floor(bf16, th, gflop*1e9, reps)
					}
					p50 := times[len(times)/2]
					b.ReportMetric(float64(p50.Microseconds())/1e3, "p50-ms")
					b.ReportMetric(float64(times[0].Microseconds())/1e3, "best-ms")
					b.ReportMetric(gflop/p50.Seconds(), "p50-GFLOP/s")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}
