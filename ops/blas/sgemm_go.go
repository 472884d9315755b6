//go:build !(cgo && openblas)

package blas

import "gonum.org/v1/gonum/blas/gonum"

// Name reports which implementation is live: "openblas" or "go".
func Name() string { return "go" }

func setBackendThreads(int) {}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major matrices, where
// op(X) is X or Xᵀ, op(A) is m×k, op(B) is k×n and C is m×n; lda, ldb and ldc
// are the row strides. With beta 0, C is only written. It panics when a
// dimension is negative or a slice is too short for its shape (a caller bug).
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	sgemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, Threads(), true)
}

// SgemmThreads is Sgemm on at most threads goroutines instead of the
// SetThreads count (threads < 1 means Threads()). Kernels that already run
// on several goroutines pass 1 (see SgemmSerial); ops pass their
// ops.Context thread budget.
func SgemmThreads(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if threads < 1 {
		threads = Threads()
	}
	sgemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads, true)
}

// Dgemm is Sgemm in double precision. The Go build delegates to gonum's
// native implementation, which uses runtime.GOMAXPROCS goroutines rather
// than SetThreads.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	checkGemm("Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	gonum.Implementation{}.Dgemm(trans(transA), trans(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
