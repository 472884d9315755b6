//go:build !amd64

package kernel

// Available is false: only amd64 has an assembly micro-kernel.
const Available = false

// Sgemm6x16 is never called where Available is false.
func Sgemm6x16(k int, a, b, c *float32, ldc int, add bool) {
	panic("blas/internal/kernel: no assembly micro-kernel on this architecture")
}

// ExpShiftSum8 is never called where Available is false.
func ExpShiftSum8(dst, src *float32, n int, shift float32) float32 {
	panic("ops/internal/kernel: no assembly exp on this architecture")
}
