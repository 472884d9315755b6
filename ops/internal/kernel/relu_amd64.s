#include "textflag.h"

// The float32 Relu kernel (package ops, unary.go).

// func Relu16(dst, src *float32, n int)
// dst = max(src, 0) for n elements (n a multiple of 16). VMAXPS returns its
// second source where either is NaN or both are zeros, and the source is x
// here, so NaN stays NaN; adding +0 then turns -0 into +0 (as Go's max
// does) and changes nothing else.
TEXT ·Relu16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VXORPS Z0, Z0, Z0
	MOVQ CX, DX
	SHRQ $6, DX
	JZ rtail
rloop:
	VMAXPS (SI), Z0, Z1
	VMAXPS 64(SI), Z0, Z2
	VMAXPS 128(SI), Z0, Z3
	VMAXPS 192(SI), Z0, Z4
	VADDPS Z0, Z1, Z1
	VMOVUPS Z1, (DI)
	VADDPS Z0, Z2, Z2
	VMOVUPS Z2, 64(DI)
	VADDPS Z0, Z3, Z3
	VMOVUPS Z3, 128(DI)
	VADDPS Z0, Z4, Z4
	VMOVUPS Z4, 192(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	DECQ DX
	JNZ rloop
rtail:
	ANDQ $63, CX
	SHRQ $4, CX
	JZ rdone
rtl:
	VMAXPS (SI), Z0, Z1
	VADDPS Z0, Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ rtl
rdone:
	VZEROUPPER
	RET
