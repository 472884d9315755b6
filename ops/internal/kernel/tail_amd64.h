// TAIL_START and TAIL_NEXT run a 16-lane kernel's loop over any n (in
// CX): the whole vectors with K7 all ones, then the last partial one with
// K7's low n mod 16 bits set, its loads zeroing the lanes past n and its
// stores leaving them alone (each lane's arithmetic is independent, so
// the n elements come out as from a padded copy). The loop loads with
// VMOVUPS.Z (SI), K7, Z… and stores with VMOVUPS Z…, K7, (DI); it must
// not use K7, R9 (the partial vector's lanes) or R10 (scratch).
//
//	TAIL_START(xxtail)
//	xxloop:
//		… one vector …
//		DECQ CX
//		JNZ xxloop
//	xxtail:
//		TAIL_NEXT(xxloop, xxdone)
//	xxdone:

#define TAIL_START(tail) \
	MOVQ CX, R9; \
	ANDQ $15, R9; \
	SHRQ $4, CX; \
	KXNORW K7, K7, K7; \
	TESTQ CX, CX; \
	JZ tail

#define TAIL_NEXT(loop, done) \
	TESTQ R9, R9; \
	JZ done; \
	MOVQ R9, CX; \
	MOVL $1, R10; \
	SHLL CX, R10; \
	DECL R10; \
	KMOVW R10, K7; \
	MOVQ $1, CX; \
	XORQ R9, R9; \
	JMP loop
