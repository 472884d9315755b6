#include "textflag.h"
#include "hsum_amd64.h"

// The fused attention's row kernels (package ops, attention_cpu_rows.go):
// a few query rows against their keys, one row at a time, where the
// transposed panels of 32 query lanes would run mostly empty (a decode
// step). d and dv are multiples of 16.

// func DotRows16(dst, q, k *float32, ldk, n, d int)
// dst[j] = Σ_{c<d} q[c]·k[j·ldk + c] for j < n: one accumulator of 16 lanes
// a key, summed across its lanes (HSUM16) at the key's end.
TEXT ·DotRows16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ k+16(FP), DX
	MOVQ ldk+24(FP), R8
	SHLQ $2, R8
	MOVQ n+32(FP), CX
	MOVQ d+40(FP), R9
	SHRQ $4, R9
	TESTQ CX, CX
	JZ dotdone
	TESTQ R9, R9
	JZ dotzero
dotkey:
	VXORPS Z0, Z0, Z0
	XORQ AX, AX
	MOVQ R9, BX
dotchunk:
	VMOVUPS (SI)(AX*1), Z1
	VFMADD231PS (DX)(AX*1), Z1, Z0
	ADDQ $64, AX
	DECQ BX
	JNZ dotchunk
	HSUM16(Z0, Y0, X0, Y2, X2)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R8, DX
	DECQ CX
	JNZ dotkey
	JMP dotdone
dotzero:
	MOVL $0, (DI)
	ADDQ $4, DI
	DECQ CX
	JNZ dotzero
dotdone:
	VZEROUPPER
	RET

// func AxpyRows16(o, p, v *float32, ldv, n, dv int)
// o[c] += Σ_{j<n} p[j]·v[j·ldv + c] for c < dv: 64 columns (four
// accumulators) at a time, then 16, each over every key.
TEXT ·AxpyRows16(SB), NOSPLIT, $0-48
	MOVQ o+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ v+16(FP), DX
	MOVQ ldv+24(FP), R8
	SHLQ $2, R8
	MOVQ n+32(FP), CX
	MOVQ dv+40(FP), R9
axcol64:
	CMPQ R9, $64
	JLT axcol16
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ CX, BX
	TESTQ BX, BX
	JZ axstore64
axkey64:
	VBROADCASTSS (R10), Z4
	VFMADD231PS (R11), Z4, Z0
	VFMADD231PS 64(R11), Z4, Z1
	VFMADD231PS 128(R11), Z4, Z2
	VFMADD231PS 192(R11), Z4, Z3
	ADDQ $4, R10
	ADDQ R8, R11
	DECQ BX
	JNZ axkey64
axstore64:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $256, DI
	ADDQ $256, DX
	SUBQ $64, R9
	JMP axcol64
axcol16:
	CMPQ R9, $16
	JLT axdone
	VMOVUPS (DI), Z0
	MOVQ SI, R10
	MOVQ DX, R11
	MOVQ CX, BX
	TESTQ BX, BX
	JZ axstore16
axkey16:
	VBROADCASTSS (R10), Z4
	VFMADD231PS (R11), Z4, Z0
	ADDQ $4, R10
	ADDQ R8, R11
	DECQ BX
	JNZ axkey16
axstore16:
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ $64, DX
	SUBQ $16, R9
	JMP axcol16
axdone:
	VZEROUPPER
	RET
