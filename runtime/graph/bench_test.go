package graph

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/attnrun/attnrun/internal/benchmodels"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
)

// benchThreads is the thread count of the model benchmarks:
// $ATTNRUN_BENCH_THREADS, default 2 (the ONNX Runtime comparison's).
func benchThreads() int {
	if n, err := strconv.Atoi(os.Getenv("ATTNRUN_BENCH_THREADS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// loadBenchModel compiles a benchmark model, skipping when it is absent,
// with the precision of $ATTNRUN_BENCH_PRECISION (fp32 when unset).
func loadBenchModel(b *testing.B, name string, noFuse bool) *Program {
	b.Helper()
	path := benchmodels.Path(b, name)
	m, err := onnx.Load(path, onnx.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p, err := Compile(m, Options{Threads: benchThreads(), NoFuse: noFuse, Precision: ops.Precision(os.Getenv("ATTNRUN_BENCH_PRECISION"))})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// benchInputs makes random inputs for batch 1 and sequence length s: x is
// uniform in [-1, 1); a bool mask, if any, keeps every position but the
// last quarter of the sequence.
func benchInputs(p *Program, s int) map[string]*ir.Tensor {
	r := rand.New(rand.NewSource(1))
	in := map[string]*ir.Tensor{}
	for _, vi := range p.Model.Graph.Inputs {
		dims := make([]int, len(vi.Type.Shape))
		for i, d := range vi.Type.Shape {
			switch {
			case d.Param == "batch":
				dims[i] = 1
			case d.Param != "":
				dims[i] = s
			default:
				dims[i] = int(d.Value)
			}
		}
		t := ir.NewTensor(vi.Type.DType, dims)
		switch vi.Type.DType {
		case ir.Float:
			xs := t.Float32s()
			for k := range xs {
				xs[k] = r.Float32()*2 - 1
			}
		case ir.Bool:
			bs := t.Bools()
			for k := range bs {
				bs[k] = k%s < s*3/4
			}
		}
		in[vi.Name] = t
	}
	return in
}

func benchModel(b *testing.B, name string, sizes []int) {
	for _, s := range sizes {
		b.Run(fmt.Sprintf("S=%d", s), func(b *testing.B) {
			p := loadBenchModel(b, name, false)
			timeRuns(b, p, benchInputs(p, s))
		})
	}
}

// timeRuns times b.N runs of p on in after two warm-up runs, and reports
// the CPU time and the page faults per run.
func timeRuns(b *testing.B, p *Program, in map[string]*ir.Tensor) {
	ctx := context.Background()
	// Like a backend, which copies its outputs away before the next run:
	// outputs in the plan's buffers. ATTNRUN_BENCH_FRESH=1 gives them new
	// memory every run instead.
	ro := RunOptions{ReuseOutputs: os.Getenv("ATTNRUN_BENCH_FRESH") != "1"}
	// Two warm-up runs: the first plans and sizes the arena, the second
	// touches its scratch.
	for i := 0; i < 2; i++ {
		if _, err := p.Run(ctx, in, ro); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	cpu0, flt0 := cpuTime(), minorFaults()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Run(ctx, in, ro); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// CPU time per run: less sensitive than wall time to other processes
	// on a shared machine (wall ≈ cpu/threads when the threads are busy).
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(minorFaults()-flt0)/float64(b.N), "faults/op")
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults returns the process's minor page faults so far.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// BenchmarkMHA768 runs seed 000's MultiHeadAttention (C=768, 12 heads,
// batch 1, fp32) in process on benchThreads threads.
func BenchmarkMHA768(b *testing.B) {
	benchModel(b, "s000_multi_head_c768", benchSizes([]int{512, 2048}))
}

// BenchmarkMHA768AttentionOp runs the same model with its attention as one
// ONNX Attention node on the same weights (models/export_opset23.py
// --bench DIR writes it): within a few percent of BenchmarkMHA768, as both
// run the same FusedAttention step.
func BenchmarkMHA768AttentionOp(b *testing.B) {
	benchModel(b, "s000_multi_head_c768_attention_op", benchSizes([]int{512, 2048}))
}

// BenchmarkCausal768 runs seed 000's CausalAttention (C=768) likewise.
func BenchmarkCausal768(b *testing.B) {
	benchModel(b, "s000_causal_c768", benchSizes([]int{512, 2048}))
}

// benchSizes returns the sequence lengths of $ATTNRUN_BENCH_SEQ (one
// number), else def.
func benchSizes(def []int) []int {
	if n, err := strconv.Atoi(os.Getenv("ATTNRUN_BENCH_SEQ")); err == nil && n > 0 {
		return []int{n}
	}
	return def
}

// BenchmarkSlidingWindow1024 runs the Mistral-style sliding-window
// attention (C=1024, 16 heads on 4 KV heads, window 1024) in process.
func BenchmarkSlidingWindow1024(b *testing.B) {
	benchModel(b, "mistral_sliding_window_c1024", benchSizes([]int{4096}))
}

// BenchmarkFalconMQA1024 runs the Falcon-style multi-query attention
// (C=1024, 16 heads, causal) in process: the sliding window's reference
// for the same projections with every causal key.
func BenchmarkFalconMQA1024(b *testing.B) {
	benchModel(b, "falcon_mqa_attention_c1024", benchSizes([]int{4096}))
}
