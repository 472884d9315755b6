// TAIL_START and TAIL_NEXT run a 16-lane kernel's loop over any n (in
// CX): the whole vectors with K7 all ones, then the last partial one with
// K7's low n mod 16 bits set: TAIL_NEXT loads it into the loop's input
// register REG, zeroing the lanes past n, and enters the loop after its load
// (a masked load in the loop itself cost Sigmoid16 5%), and the loop's
// store, VMOVUPS Z…, K7, (DI), leaves those lanes alone. Each lane's
// arithmetic is independent, so the n elements come out as from a padded
// copy. The loop must not use K7, R9 (the partial vector's lanes) or R10
// (scratch).
//
//	TAIL_START(xxtail)
//	xxloop:
//		VMOVUPS (SI), Z0
//	xxbody:
//		… the rest of one vector …
//		DECQ CX
//		JNZ xxloop
//	xxtail:
//		TAIL_NEXT(xxbody, xxdone, Z0)
//	xxdone:

#define TAIL_START(tail) \
	MOVQ CX, R9; \
	ANDQ $15, R9; \
	SHRQ $4, CX; \
	KXNORW K7, K7, K7; \
	TESTQ CX, CX; \
	JZ tail

#define TAIL_NEXT(body, done, REG) \
	TESTQ R9, R9; \
	JZ done; \
	MOVQ R9, CX; \
	MOVL $1, R10; \
	SHLL CX, R10; \
	DECL R10; \
	KMOVW R10, K7; \
	VMOVUPS.Z (SI), K7, REG; \
	MOVQ $1, CX; \
	XORQ R9, R9; \
	JMP body
