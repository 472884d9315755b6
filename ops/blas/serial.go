package blas

import "github.com/attnrun/attnrun/ops/internal/kernel"

// Tile returns the rows and columns of the micro-kernel's tile of C (see
// MicroKernel): 8×32 on CPUs with AVX-512, else 6×16. It does not change
// while the program runs.
func Tile() (rows, cols int) { return mr, nr }

// SgemmSerial is Sgemm on the calling goroutine only, whatever SetThreads
// says: for kernels that spread their own work items over goroutines and
// multiply small blocks inside each.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	SgemmThreads(1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// MicroKernel computes one tile of C, MR×NR as given by Tile:
// C[0:MR, 0:NR] (row stride ldc) is set to (add false) or incremented by
// (add true) the product of a packed k×MR sliver of A (a[p*MR+r] = A[r][p])
// and a packed k×NR sliver of B (b[p*NR+j] = B[p][j]). It is the building block of Sgemm, exported for
// fused kernels that keep their operands packed across many products. It
// runs the AVX2+FMA assembly where the CPU has it, portable Go elsewhere,
// and panics when a slice is too short for its tile (a caller bug).
func MicroKernel(k int, a, b, c []float32, ldc int, add bool) {
	if k < 0 || ldc < nr || len(c) < (mr-1)*ldc+nr || len(a) < k*mr || len(b) < k*nr {
		panic("blas.MicroKernel: operand too short for its tile")
	}
	if kernel.Available {
		if k == 0 && add {
			return
		}
		if k == 0 {
			for r := 0; r < mr; r++ {
				clear(c[r*ldc : r*ldc+nr])
			}
			return
		}
		asmKernel(k, &a[0], &b[0], &c[0], ldc, add)
		return
	}
	kernelGo(k, a, b, c, ldc, add)
}

// SgemmBias computes C = op(A)·op(B) + bias on at most threads goroutines
// (threads < 1: Threads()), where bias (nil: none) has n elements and is
// added to every row of C; C is only written. The bias is added as the
// first block of each tile is stored, so it costs no pass over C. A non-nil
// epi then finishes each block of C while it is in cache (Epilogue).
// Argument checks are Sgemm's; a bias shorter than n panics. The OpenBLAS
// build runs the pure-Go GEMM here.
func SgemmBias(threads int, transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int, epi Epilogue) {
	gemmBias("SgemmBias", newFP32Tiles(true), threads, transA, transB, m, n, k, a, lda, b, ldb, bias, c, ldc, epi)
}

// gemmBias checks SgemmBias's arguments and runs it with ops' tiles.
func gemmBias(name string, ops tileOps, threads int, transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int, epi Epilogue) {
	checkGemm(name, transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if bias != nil {
		if len(bias) < n {
			panic("blas." + name + ": bias shorter than n")
		}
		bias = bias[:n]
	}
	if threads < 1 {
		threads = Threads()
	}
	gemmGo(ops, transA, transB, m, n, k, 1, a, lda, b, ldb, 0, bias, c, ldc, threads, nil, 0, epi)
}

// SgemmPacked computes C = op(A)·B (+ bias, when bias is not nil) on at
// most threads goroutines (threads < 1: Threads()), with B packed by
// PackB, or by PackBBF16 (then in bf16, see SgemmBF16); C is only
// written; a non-nil epi then finishes each block of C (Epilogue). Both
// builds run the pure-Go GEMM here.
func SgemmPacked(threads int, transA bool, m int, a []float32, lda int, pb *PackedB, bias, c []float32, ldc int, epi Epilogue) {
	SgemmPackedStriped(threads, 0, transA, m, a, lda, pb, bias, c, ldc, epi)
}

// SgemmPackedStriped is SgemmPacked for a C whose columns come in stripes
// of stripe columns that its reader splits alike: a fused QKV projection's
// output, [Q | K | V] with stripe = heads·head size, whose attention gives
// each worker a range of heads. The threads then split every stripe the
// same way (worker w takes the w-th share of each, where stripe is a
// multiple of threads·32 on AVX-512), instead of splitting C's columns
// into contiguous ranges, so that each worker writes the Q, K and V
// columns of the heads it reads next. Results are the same; stripe 0, or
// one that does not divide C evenly, is SgemmPacked.
func SgemmPackedStriped(threads, stripe int, transA bool, m int, a []float32, lda int, pb *PackedB, bias, c []float32, ldc int, epi Epilogue) {
	k, n := pb.k, pb.n
	checkGemm("SgemmPacked", transA, false, m, n, k, len(a), lda, k*n, max(n, 1), len(c), ldc)
	if bias != nil && len(bias) < n {
		panic("blas.SgemmPacked: bias shorter than n")
	}
	if bias != nil {
		bias = bias[:n]
	}
	if threads < 1 {
		threads = Threads()
	}
	gemmGo(pb.tiles(), transA, false, m, n, k, 1, a, lda, nil, 0, 0, bias, c, ldc, threads, pb, stripe, epi)
}
