//go:build cgo && openblas

package blas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

// Name reports which implementation is live: "openblas" or "go".
func Name() string { return "openblas" }

func init() { setBackendThreads(Threads()) }

func setBackendThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

func ctrans(t bool) C.enum_CBLAS_TRANSPOSE {
	if t {
		return C.CblasTrans
	}
	return C.CblasNoTrans
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major matrices, where
// op(X) is X or Xᵀ, op(A) is m×k, op(B) is k×n and C is m×n; lda, ldb and ldc
// are the row strides. With beta 0, C is only written. It panics when a
// dimension is negative or a slice is too short for its shape (a caller bug).
// This build calls OpenBLAS's cblas_sgemm.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	C.cblas_sgemm(C.CblasRowMajor, ctrans(transA), ctrans(transB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb),
		C.float(beta), (*C.float)(&c[0]), C.blasint(ldc))
}

// SgemmThreads is Sgemm on at most threads threads instead of the
// SetThreads count (threads < 1 means Threads()). OpenBLAS's thread count
// is process wide, so in this build a call asking for one thread runs the
// pure-Go GEMM on the calling goroutine, and any other count calls OpenBLAS.
func SgemmThreads(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if threads != 1 {
		Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkGemm("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	sgemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1, true)
}

// Dgemm is Sgemm in double precision (cblas_dgemm).
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	checkGemm("Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	C.cblas_dgemm(C.CblasRowMajor, ctrans(transA), ctrans(transB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.double(alpha), (*C.double)(&a[0]), C.blasint(lda), (*C.double)(&b[0]), C.blasint(ldb),
		C.double(beta), (*C.double)(&c[0]), C.blasint(ldc))
}
