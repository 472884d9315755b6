// Go's assembler (as of Go 1.26) has no mnemonics for the AVX512_BF16
// instructions, so they are spelled out here as bytes. Register operands
// are numbers (Z0..Z31 → 0..31), in Go's operand order: sources first,
// destination last. TestBF16Encodings checks every macro against the
// instruction set reference's encoding and TestDotBF16 checks the
// instructions' results against a Go model of them.

// EVEX prefix of a ZMM instruction in map 0F38 with W0 whose ModRM.reg
// operand is d, vvvv operand s1 and ModRM.rm register operand s2; pp is
// the implied-prefix field (1: 66, 2: F3, 3: F2). Bytes: 62, P0 = ~R
// ~X ~B ~R' 0 0 1 0, P1 = W ~vvvv 1 pp, P2 = z L'L b ~V' aaa with L'L =
// 10 (512 bits).
#define EVEX_0F38_Z(pp, s2, s1, d) \
	BYTE $0x62; \
	BYTE $((((d>>3)&1)^1)<<7 | (((s2>>4)&1)^1)<<6 | (((s2>>3)&1)^1)<<5 | (((d>>4)&1)^1)<<4 | 2); \
	BYTE $(((s1&15)^15)<<3 | 4 | pp); \
	BYTE $(2<<5 | (((s1>>4)&1)^1)<<3)

// ModRM byte for two register operands.
#define MODRM_RR(reg, rm) BYTE $(0xC0 | (reg&7)<<3 | (rm&7))

// VDPBF16PS_Z(s2, s1, d): VDPBF16PS zmm_d, zmm_s1, zmm_s2
// (EVEX.512.F3.0F38.W0 52 /r): for each fp32 lane i, d[i] += s1.bf16[2i]·s2.bf16[2i]
// + s1.bf16[2i+1]·s2.bf16[2i+1].
#define VDPBF16PS_Z(s2, s1, d) EVEX_0F38_Z(2, s2, s1, d); BYTE $0x52; MODRM_RR(d, s2)

// EVEX prefix as EVEX_0F38_Z for an instruction whose rm operand is in
// memory, a 32-bit element broadcast to every lane (EVEX.b): base and
// index are the address's registers (RAX..R15 → 0..15; index 0 where there
// is none, as its fourth bit is what the prefix holds).
#define EVEX_0F38_Z_BCST(pp, base, index, s1, d) \
	BYTE $0x62; \
	BYTE $((((d>>3)&1)^1)<<7 | (((index>>3)&1)^1)<<6 | (((base>>3)&1)^1)<<5 | (((d>>4)&1)^1)<<4 | 2); \
	BYTE $(((s1&15)^15)<<3 | 4 | pp); \
	BYTE $(2<<5 | 1<<4 | (((s1>>4)&1)^1)<<3)

// VDPBF16PS_BCST_Z(base, s1, d): VDPBF16PS zmm_d, zmm_s1, dword
// [base]{1to16}: VDPBF16PS_Z with the pair word at base broadcast, the
// load-op form whose broadcast takes no slot on the FP pipes (see
// SGEMM8x32_ROWS_KSTEP). base is not RSP, RBP, R12 or R13 (mod 00).
#define VDPBF16PS_BCST_Z(base, s1, d) EVEX_0F38_Z_BCST(2, base, 0, s1, d); BYTE $0x52; BYTE $((d&7)<<3 | (base&7))

// VDPBF16PS_BCST_SIB_Z(base, index, ss, s1, d): the same at base +
// index·2^ss (base not RBP or R13, index not RSP).
#define VDPBF16PS_BCST_SIB_Z(base, index, ss, s1, d) EVEX_0F38_Z_BCST(2, base, index, s1, d); BYTE $0x52; BYTE $((d&7)<<3 | 4); BYTE $(ss<<6 | (index&7)<<3 | (base&7))

// VCVTNE2PS2BF16_Z(s2, s1, d): VCVTNE2PS2BF16 zmm_d, zmm_s1, zmm_s2
// (EVEX.512.F2.0F38.W0 72 /r): d's 16 low bf16 are s2's floats, its 16
// high ones s1's, rounded to nearest even.
#define VCVTNE2PS2BF16_Z(s2, s1, d) EVEX_0F38_Z(3, s2, s1, d); BYTE $0x72; MODRM_RR(d, s2)

// VCVTNEPS2BF16_Z(s, d): VCVTNEPS2BF16 ymm_d, zmm_s (EVEX.512.F3.0F38.W0
// 72 /r): d's 16 bf16 are s's floats rounded to nearest even.
#define VCVTNEPS2BF16_Z(s, d) EVEX_0F38_Z(2, s, 0, d); BYTE $0x72; MODRM_RR(d, s)
