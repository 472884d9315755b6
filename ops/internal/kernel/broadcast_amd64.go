package kernel

import "os"

// The 8×32 row kernels (Sgemm8x32Rows, Sgemm8x32RowsLoop, BF16Gemm8x32,
// BF16Gemm8x32Loop and the four scores kernels) come in two forms that
// differ only in how each k step broadcasts A's 8 values to the lanes: by
// 8 VBROADCASTSS (VPBROADCASTD for bf16) into scratch registers, or in the
// 16 multiply-adds' memory operands (EVEX embedded broadcast, .BCST). The
// results are the same bit for bit; the speed is not, and which is faster
// depends on the core:
//
//   - Zen 4 runs a broadcast from memory on its FP pipes, beside the
//     products, so the scores kernels' exponentials (FADD-pipe work)
//     waited for them: embedded, the fp32 scores kernel with its
//     exponentials ran at 94% of peak against 88% (2-core Zen 4 VM,
//     2026-11-29 03:11-03:35 UTC, the projections unchanged).
//   - Zen 5 runs the sixteen load-op multiply-adds slower than eight
//     broadcasts and sixteen register multiply-adds: embedded, the
//     projections' GEMM ran at 81-86% of peak against 93-98%, and the
//     scores kernel with its exponentials at 76-78% against 93% (2-core
//     Zen 5 VM, 2026-11-29 07:50-07:56 UTC, go test -bench
//     Roofline/gemm and RooflineAttentionKernels, builds and then the
//     form alternating).
//
// So the embedded form runs on Zen 4 (AMD family 19h with AVX-512) and
// the separate broadcasts everywhere else.

// EmbeddedBroadcastEnv names the environment variable that overrides the
// choice of form (read once, at start; backend processes inherit it): "on"
// runs the embedded broadcasts, "off" the separate ones, anything else
// leaves the choice to the CPU (EmbeddedBroadcast). It is there to measure
// one form against the other.
const EmbeddedBroadcastEnv = "ATTNRUN_EMBEDDED_BROADCAST"

// EmbeddedBroadcast reports whether the 8×32 row kernels broadcast A's
// values in their multiply-adds' memory operands (true) or with separate
// broadcast loads (false). It is fixed at start from EmbeddedBroadcastEnv
// and the CPU; nothing changes it afterwards.
var EmbeddedBroadcast = embeddedBroadcastFrom(os.Getenv(EmbeddedBroadcastEnv), AVX512 && isZen4())

// embeddedBroadcastFrom picks the form from EmbeddedBroadcastEnv's value
// v, or from zen4 where v is neither "on" nor "off".
func embeddedBroadcastFrom(v string, zen4 bool) bool {
	switch v {
	case "on":
		return true
	case "off":
		return false
	}
	return zen4
}

// isZen4 reports whether the CPU is an AMD family 19h part: Zen 3 and Zen
// 4, of which only Zen 4 has AVX-512.
func isZen4() bool {
	_, b, c, d := cpuid(0, 0)
	amd := b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163 // "AuthenticAMD"
	if !amd {
		return false
	}
	a, _, _, _ := cpuid(1, 0)
	return cpuFamily(a) == 0x19
}

// cpuFamily returns the display family of CPUID leaf 1's EAX: the base
// family, plus the extended family where the base is 0xF.
func cpuFamily(eax uint32) uint32 {
	family := eax >> 8 & 0xF
	if family == 0xF {
		family += eax >> 20 & 0xFF
	}
	return family
}

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

//go:noescape
func sgemm8x32RowsBroadcast(k int, a *float32, lda int, b, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int)

//go:noescape
func sgemm8x32RowsEmbedded(k int, a *float32, lda int, b, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int)

//go:noescape
func sgemm8x32RowsLoopBroadcast(k int, a *float32, lda int, b, c *float32, ldc, n, as, bs, cs int, add bool)

//go:noescape
func sgemm8x32RowsLoopEmbedded(k int, a *float32, lda int, b, c *float32, ldc, n, as, bs, cs int, add bool)

//go:noescape
func bf16Gemm8x32Broadcast(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int)

//go:noescape
func bf16Gemm8x32Embedded(k int, a *uint32, lda int, b *uint32, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int)

//go:noescape
func bf16Gemm8x32LoopBroadcast(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool)

//go:noescape
func bf16Gemm8x32LoopEmbedded(k int, a *uint32, lda int, b *uint32, c *float32, ldc, n, as, bs, cs int, add bool)

//go:noescape
func scoresExp8x32Broadcast(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

//go:noescape
func scoresExp8x32Embedded(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

//go:noescape
func scoresExp8x32Base2Broadcast(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

//go:noescape
func scoresExp8x32Base2Embedded(k int, a *float32, lda int, b, c *float32, ldc, n, as, cs int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

//go:noescape
func scoresExpBF16x32Broadcast(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

//go:noescape
func scoresExpBF16x32Embedded(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

//go:noescape
func scoresExpBF16x32Base2Broadcast(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int

//go:noescape
func scoresExpBF16x32Base2Embedded(k int, a *uint32, lda int, b, c *uint32, n, as int, shift, limit, sum, mx, bias, rb *float32, rbs int) int
