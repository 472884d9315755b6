#include "textflag.h"

DATA expc<>+0(SB)/4, $0x3fb8aa3b
DATA expc<>+4(SB)/4, $0x3fb8aa3b
DATA expc<>+8(SB)/4, $0x3fb8aa3b
DATA expc<>+12(SB)/4, $0x3fb8aa3b
DATA expc<>+16(SB)/4, $0x3fb8aa3b
DATA expc<>+20(SB)/4, $0x3fb8aa3b
DATA expc<>+24(SB)/4, $0x3fb8aa3b
DATA expc<>+28(SB)/4, $0x3fb8aa3b
DATA expc<>+32(SB)/4, $0x3f000000
DATA expc<>+36(SB)/4, $0x3f000000
DATA expc<>+40(SB)/4, $0x3f000000
DATA expc<>+44(SB)/4, $0x3f000000
DATA expc<>+48(SB)/4, $0x3f000000
DATA expc<>+52(SB)/4, $0x3f000000
DATA expc<>+56(SB)/4, $0x3f000000
DATA expc<>+60(SB)/4, $0x3f000000
DATA expc<>+64(SB)/4, $0x3f318000
DATA expc<>+68(SB)/4, $0x3f318000
DATA expc<>+72(SB)/4, $0x3f318000
DATA expc<>+76(SB)/4, $0x3f318000
DATA expc<>+80(SB)/4, $0x3f318000
DATA expc<>+84(SB)/4, $0x3f318000
DATA expc<>+88(SB)/4, $0x3f318000
DATA expc<>+92(SB)/4, $0x3f318000
DATA expc<>+96(SB)/4, $0xb95e8083
DATA expc<>+100(SB)/4, $0xb95e8083
DATA expc<>+104(SB)/4, $0xb95e8083
DATA expc<>+108(SB)/4, $0xb95e8083
DATA expc<>+112(SB)/4, $0xb95e8083
DATA expc<>+116(SB)/4, $0xb95e8083
DATA expc<>+120(SB)/4, $0xb95e8083
DATA expc<>+124(SB)/4, $0xb95e8083
DATA expc<>+128(SB)/4, $0x39506967
DATA expc<>+132(SB)/4, $0x39506967
DATA expc<>+136(SB)/4, $0x39506967
DATA expc<>+140(SB)/4, $0x39506967
DATA expc<>+144(SB)/4, $0x39506967
DATA expc<>+148(SB)/4, $0x39506967
DATA expc<>+152(SB)/4, $0x39506967
DATA expc<>+156(SB)/4, $0x39506967
DATA expc<>+160(SB)/4, $0x3ab743ce
DATA expc<>+164(SB)/4, $0x3ab743ce
DATA expc<>+168(SB)/4, $0x3ab743ce
DATA expc<>+172(SB)/4, $0x3ab743ce
DATA expc<>+176(SB)/4, $0x3ab743ce
DATA expc<>+180(SB)/4, $0x3ab743ce
DATA expc<>+184(SB)/4, $0x3ab743ce
DATA expc<>+188(SB)/4, $0x3ab743ce
DATA expc<>+192(SB)/4, $0x3c088908
DATA expc<>+196(SB)/4, $0x3c088908
DATA expc<>+200(SB)/4, $0x3c088908
DATA expc<>+204(SB)/4, $0x3c088908
DATA expc<>+208(SB)/4, $0x3c088908
DATA expc<>+212(SB)/4, $0x3c088908
DATA expc<>+216(SB)/4, $0x3c088908
DATA expc<>+220(SB)/4, $0x3c088908
DATA expc<>+224(SB)/4, $0x3d2aa9c1
DATA expc<>+228(SB)/4, $0x3d2aa9c1
DATA expc<>+232(SB)/4, $0x3d2aa9c1
DATA expc<>+236(SB)/4, $0x3d2aa9c1
DATA expc<>+240(SB)/4, $0x3d2aa9c1
DATA expc<>+244(SB)/4, $0x3d2aa9c1
DATA expc<>+248(SB)/4, $0x3d2aa9c1
DATA expc<>+252(SB)/4, $0x3d2aa9c1
DATA expc<>+256(SB)/4, $0x3e2aaaaa
DATA expc<>+260(SB)/4, $0x3e2aaaaa
DATA expc<>+264(SB)/4, $0x3e2aaaaa
DATA expc<>+268(SB)/4, $0x3e2aaaaa
DATA expc<>+272(SB)/4, $0x3e2aaaaa
DATA expc<>+276(SB)/4, $0x3e2aaaaa
DATA expc<>+280(SB)/4, $0x3e2aaaaa
DATA expc<>+284(SB)/4, $0x3e2aaaaa
DATA expc<>+288(SB)/4, $0x3f000000
DATA expc<>+292(SB)/4, $0x3f000000
DATA expc<>+296(SB)/4, $0x3f000000
DATA expc<>+300(SB)/4, $0x3f000000
DATA expc<>+304(SB)/4, $0x3f000000
DATA expc<>+308(SB)/4, $0x3f000000
DATA expc<>+312(SB)/4, $0x3f000000
DATA expc<>+316(SB)/4, $0x3f000000
DATA expc<>+320(SB)/4, $0x3f800000
DATA expc<>+324(SB)/4, $0x3f800000
DATA expc<>+328(SB)/4, $0x3f800000
DATA expc<>+332(SB)/4, $0x3f800000
DATA expc<>+336(SB)/4, $0x3f800000
DATA expc<>+340(SB)/4, $0x3f800000
DATA expc<>+344(SB)/4, $0x3f800000
DATA expc<>+348(SB)/4, $0x3f800000
DATA expc<>+352(SB)/4, $0x42b0c0a5
DATA expc<>+356(SB)/4, $0x42b0c0a5
DATA expc<>+360(SB)/4, $0x42b0c0a5
DATA expc<>+364(SB)/4, $0x42b0c0a5
DATA expc<>+368(SB)/4, $0x42b0c0a5
DATA expc<>+372(SB)/4, $0x42b0c0a5
DATA expc<>+376(SB)/4, $0x42b0c0a5
DATA expc<>+380(SB)/4, $0x42b0c0a5
DATA expc<>+384(SB)/4, $0xc2b00000
DATA expc<>+388(SB)/4, $0xc2b00000
DATA expc<>+392(SB)/4, $0xc2b00000
DATA expc<>+396(SB)/4, $0xc2b00000
DATA expc<>+400(SB)/4, $0xc2b00000
DATA expc<>+404(SB)/4, $0xc2b00000
DATA expc<>+408(SB)/4, $0xc2b00000
DATA expc<>+412(SB)/4, $0xc2b00000
DATA expc<>+416(SB)/4, $0x3f800000
DATA expc<>+420(SB)/4, $0x3f800000
DATA expc<>+424(SB)/4, $0x3f800000
DATA expc<>+428(SB)/4, $0x3f800000
DATA expc<>+432(SB)/4, $0x3f800000
DATA expc<>+436(SB)/4, $0x3f800000
DATA expc<>+440(SB)/4, $0x3f800000
DATA expc<>+444(SB)/4, $0x3f800000
GLOBL expc<>(SB), RODATA|NOPTR, $448

// func ExpShiftSum8(dst, src *float32, n int, shift float32) float32
TEXT ·ExpShiftSum8(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS shift+24(FP), Y5
	VMOVUPS expc<>+384(SB), Y6
	VMOVUPS expc<>+352(SB), Y7
	VXORPS Y13, Y13, Y13
	SHRQ $3, CX
	JZ expdone
exploop:
	VMOVUPS (SI), Y0
	VSUBPS Y5, Y0, Y0
	VMINPS Y0, Y7, Y0
	VMAXPS Y0, Y6, Y0
	VMOVUPS expc<>+0(SB), Y1
	VFMADD213PS expc<>+32(SB), Y0, Y1
	VROUNDPS $1, Y1, Y1
	VMOVUPS Y0, Y2
	VFNMADD231PS expc<>+64(SB), Y1, Y2
	VFNMADD231PS expc<>+96(SB), Y1, Y2
	VMOVUPS expc<>+128(SB), Y3
	VFMADD213PS expc<>+160(SB), Y2, Y3
	VFMADD213PS expc<>+192(SB), Y2, Y3
	VFMADD213PS expc<>+224(SB), Y2, Y3
	VFMADD213PS expc<>+256(SB), Y2, Y3
	VFMADD213PS expc<>+288(SB), Y2, Y3
	VMULPS Y2, Y2, Y4
	VFMADD213PS Y2, Y4, Y3
	VADDPS expc<>+320(SB), Y3, Y3
	VCVTPS2DQ Y1, Y1
	VPSLLD $23, Y1, Y1
	VPADDD expc<>+416(SB), Y1, Y1
	VMULPS Y1, Y3, Y3
	VMOVUPS Y3, (DI)
	VADDPS Y3, Y13, Y13
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ exploop
expdone:
	VEXTRACTF128 $1, Y13, X0
	VADDPS X0, X13, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+32(FP)
	RET
