// Package blas is attnrun's dense matrix-multiply layer: single- and
// double-precision GEMM on row-major matrices with leading dimensions.
//
// Two implementations exist. Built with `-tags openblas` (and cgo), Sgemm and
// Dgemm call OpenBLAS's cblas_sgemm/cblas_dgemm (link with -lopenblas; Debian
// package libopenblas-dev). Otherwise Sgemm runs attnrun's own GEMM, written
// in Go: B and A are packed into cache-sized panels (Goto/BLIS style) and a
// micro-kernel computes each tile, with row blocks (or column panels, for
// short matrices) spread over goroutines. The micro-kernel is assembly from
// ops/internal/kernel: 8×32 with AVX-512 where the CPU has it, 6×16 with
// AVX2+FMA otherwise (Tile), portable Go elsewhere. The Go build's Dgemm is
// gonum's. Name reports which one is live.
//
// Calls take their thread count from SetThreads (Sgemm) or per call
// (SgemmThreads, SgemmSerial for kernels that run their own goroutines,
// SgemmBias). MicroKernel exposes one tile for fused kernels that keep
// their operands packed.
//
// On a 2-core AVX2 VM the Go Sgemm reaches about 150-180 GFLOP/s at 512³
// and 1024³, on par with OpenBLAS 0.3.21 (about 150); on a 2-core AVX-512
// Zen 5 VM the 8×32 kernel runs at 224 GFLOP/s per core and a 2048×768 ·
// 768×2304 product at about 390 GFLOP/s on 2 threads. gonum's native Sgemm
// manages 12-26 GFLOP/s.
//
// The only global state is the thread count (SetThreads), which applies to
// every later Sgemm from any goroutine, and a cache of packing buffers.
package blas

import (
	"fmt"
	"runtime"
	"sync/atomic"
)

// threads holds the SetThreads value; 0 means runtime.GOMAXPROCS(0).
var threads atomic.Int64

// SetThreads sets how many threads GEMM calls may use from now on, process
// wide: goroutines for the Go implementation, openblas_set_num_threads for
// OpenBLAS. n < 1 restores the default, runtime.GOMAXPROCS(0). It is the
// package's only global state and is safe to call concurrently with GEMMs
// (running calls keep the count they started with in the Go implementation).
func SetThreads(n int) {
	if n < 1 {
		n = 0
	}
	threads.Store(int64(n))
	setBackendThreads(Threads())
}

// Threads returns the thread count GEMM calls use (≥ 1).
func Threads() int {
	if n := int(threads.Load()); n > 0 {
		return n
	}
	return max(1, runtime.GOMAXPROCS(0))
}

// checkGemm validates GEMM arguments. Sgemm and Dgemm panic on violations:
// they are programming errors of the caller (ops kernels validate tensor
// shapes before calling), like in any BLAS.
func checkGemm(name string, transA, transB bool, m, n, k, lenA, lda, lenB, ldb, lenC, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("blas.%s: negative dimension m=%d n=%d k=%d", name, m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	check := func(what string, rows, cols, l, ld int) {
		if ld < max(1, cols) {
			panic(fmt.Sprintf("blas.%s: leading dimension of %s %d < %d columns", name, what, ld, cols))
		}
		if rows > 0 && cols > 0 && l < (rows-1)*ld+cols {
			panic(fmt.Sprintf("blas.%s: %s has %d elements, %dx%d with leading dimension %d needs %d", name, what, l, rows, cols, ld, (rows-1)*ld+cols))
		}
	}
	if m > 0 && n > 0 {
		check("C", m, n, lenC, ldc)
		if k > 0 {
			check("A", ar, ac, lenA, lda)
			check("B", br, bc, lenB, ldb)
		}
	}
}

// scaleC sets C = beta*C over the m×n block (beta 0 writes zeros, so NaNs in
// C do not survive, as BLAS specifies).
func scaleC[T float32 | float64](m, n int, beta T, c []T, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}
