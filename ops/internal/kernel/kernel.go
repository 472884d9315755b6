// Package kernel holds attnrun's assembly kernels: the GEMM micro-kernel of
// package blas and the vector exp of the softmax kernels in package ops. It
// is separate from both because a cgo package (blas built with -tags
// openblas) cannot contain Go assembly. Each kernel has a portable Go
// counterpart in its caller; Available says whether the assembly runs here.
package kernel

// MR and NR are the tile sizes of Sgemm6x16: rows and columns of C.
const (
	MR = 6
	NR = 16
)

// ExpClampHigh and ExpClampLow bound the arguments ExpShiftSum evaluates:
// larger ones give exp(ExpClampHigh) ≈ 2.4e38, smaller ones (including -Inf)
// give 0. Results below 2^-126 (arguments below about -87.3) may flush to 0.
const (
	ExpClampHigh = 88.3762626647949
	ExpClampLow  = -88.0
)
