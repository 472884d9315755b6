package ops

import (
	"fmt"
	"strings"
)

// Precision is the arithmetic of a run's float32 matrix products: MatMul,
// Gemm and FusedMatMul (and, where the kernel supports it, the fused
// attention's two products). Everything else (softmax, normalizations,
// elementwise ops, accumulation) stays fp32 whatever it says.
type Precision string

const (
	// PrecisionFP32 multiplies in fp32 (the default; "" means the same).
	PrecisionFP32 Precision = "fp32"
	// PrecisionBF16 rounds both operands of each product to bfloat16
	// (nearest even; constant weights once, when they are packed) and
	// accumulates in fp32. bfloat16 keeps 8 significant bits, so each
	// operand carries a relative error up to 2^-9 ≈ 2e-3; results differ
	// from fp32 by about that much times the cancellation in the sums.
	PrecisionBF16 Precision = "bf16"
)

// ParsePrecision accepts "", "fp32" and "bf16" (any case).
func ParsePrecision(s string) (Precision, error) {
	switch p := Precision(strings.ToLower(strings.TrimSpace(s))); p {
	case "", PrecisionFP32:
		return PrecisionFP32, nil
	case PrecisionBF16:
		return p, nil
	}
	return "", fmt.Errorf("unknown precision %q (want fp32 or bf16)", s)
}

// bf16 reports whether the context asks for bf16 products.
func (ctx *Context) bf16() bool { return ctx != nil && ctx.Precision == PrecisionBF16 }
