// HSUM16(Z, X, T) leaves the sum of Z's 16 lanes in the low lane of X (X is
// Z's low 128 bits), with T's xmm/ymm as scratch.
#define HSUM16(Z, Y, X, TY, TX) \
	VEXTRACTF64X4 $1, Z, TY; \
	VADDPS TY, Y, Y; \
	VEXTRACTF128 $1, Y, TX; \
	VADDPS TX, X, X; \
	VMOVHLPS X, X, TX; \
	VADDPS TX, X, X; \
	VMOVSHDUP X, TX; \
	VADDSS TX, X, X
