package gpu

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
)

// maxRank is MAXR in kernels.cu: the most dims a strided kernel iterates.
const maxRank = 16

// Op codes shared with kernels.cu (OP_*, UN_*, MASK_*).
const (
	binAdd = 0
	binSub = 1
	binMul = 2
	binDiv = 3
	binPow = 4
	binAnd = 5
	binOr  = 6
	binXor = 7
	binEq  = 10
	binLt  = 11
	binGt  = 12
	binLe  = 13
	binGe  = 14

	unSqrt    = 0
	unErf     = 1
	unNeg     = 2
	unExp     = 3
	unTanh    = 4
	unRelu    = 5
	unAbs     = 6
	unRecip   = 7
	unSigmoid = 8
	unLog     = 9
	unNot     = 10

	maskNone      = 0
	maskBoolTrue  = 1
	maskBoolFalse = 2
	maskAdditive  = 3

	// What attention_f32 writes to its scores output (SC_*): nothing, or
	// FusedAttention's scores_mode stages.
	scoresNone       = 0
	scoresRaw        = 1
	scoresSoftcapped = 2
	scoresBiased     = 3
	scoresWeights    = 4
)

// Attention tiling, as AT_* in kernels.cu.
const (
	attnWarps   = 4
	attnRows    = 4
	attnBK      = 32
	attnMaxD    = 128
	attnThreads = attnWarps * 32
	attnQRows   = attnWarps * attnRows // query rows per block
)

// fieldKind says how a parameter member is encoded.
type fieldKind uint8

const (
	fInt   fieldKind = iota // i64
	fFloat                  // double
	fPtr                    // u64 device address of a value (plus a byte offset)
)

// field is one 8-byte member of a kernel's parameter struct.
type field struct {
	name string
	kind fieldKind
	i    int64
	f    float64
	// For fPtr: the value whose buffer it points into ("" for a null
	// pointer) and the byte offset inside it.
	val string
	off int64
}

// launch is one kernel launch: the kernel, its launch configuration and its
// parameter struct, member by member in declaration order.
type launch struct {
	kernel string // extern "C" name in kernels.cu
	params string // the C struct it takes
	grid   [3]uint32
	block  [3]uint32
	shmem  uint32
	fields []field
}

// paramBuilder collects a parameter struct's members.
type paramBuilder struct{ fields []field }

func (b *paramBuilder) i(name string, v int64) *paramBuilder {
	b.fields = append(b.fields, field{name: name, kind: fInt, i: v})
	return b
}

func (b *paramBuilder) f(name string, v float64) *paramBuilder {
	b.fields = append(b.fields, field{name: name, kind: fFloat, f: v})
	return b
}

// p adds a pointer to value val at byte offset off ("" is a null pointer).
func (b *paramBuilder) p(name, val string, off int64) *paramBuilder {
	b.fields = append(b.fields, field{name: name, kind: fPtr, val: val, off: off})
	return b
}

// arr adds a fixed array of maxRank i64 members, zero-padded.
func (b *paramBuilder) arr(name string, vals []int64) *paramBuilder {
	for k := 0; k < maxRank; k++ {
		v := int64(0)
		if k < len(vals) {
			v = vals[k]
		}
		b.i(fmt.Sprintf("%s[%d]", name, k), v)
	}
	return b
}

// encode lays the parameter struct out as 8-byte words, resolving pointers
// with addr.
func (l *launch) encode(addr func(val string, off int64) (uint64, error)) ([]uint64, error) {
	out := make([]uint64, len(l.fields))
	for k, f := range l.fields {
		switch f.kind {
		case fInt:
			out[k] = uint64(f.i)
		case fFloat:
			out[k] = math.Float64bits(f.f)
		case fPtr:
			if f.val == "" {
				continue
			}
			a, err := addr(f.val, f.off)
			if err != nil {
				return nil, fmt.Errorf("kernel %s, %s: %w", l.kernel, f.name, err)
			}
			out[k] = a
		}
	}
	return out, nil
}

// ---- launch configuration ----

// elemBlock is the block size of the elementwise and copy kernels.
const elemBlock = 256

// maxGridX bounds grid.x of grid-stride kernels (they loop over the rest).
const maxGridX = 1 << 20

// grid1D is the launch configuration of a grid-stride kernel over n items.
func grid1D(n int64) (grid, block [3]uint32) {
	blocks := (n + elemBlock - 1) / elemBlock
	blocks = max(1, min(blocks, maxGridX))
	return [3]uint32{uint32(blocks), 1, 1}, [3]uint32{elemBlock, 1, 1}
}

// rowBlock is the block size of a one-block-per-row reduction over cols
// elements: a multiple of 32 from 32 to 256.
func rowBlock(cols int64) uint32 {
	b := (cols + 31) / 32 * 32
	return uint32(max(32, min(b, 256)))
}

// attnShared is the dynamic shared memory of attention_f32 in bytes.
func attnShared(d, dv int) uint32 {
	return uint32(4 * (attnBK*(d+1) + attnBK*dv + attnQRows*d + attnWarps*attnBK))
}

// attnGrid is attention_f32's grid: query-row blocks by batch matrices
// (grid.y capped at 65535; the kernel loops over the rest).
func attnGrid(sq, batches int) [3]uint32 {
	return [3]uint32{uint32((sq + attnQRows - 1) / attnQRows), uint32(max(1, min(batches, 65535))), 1}
}

// ---- strided index helpers ----

// coalesce simplifies an iteration shape and its operands' strides: it drops
// dims of size 1 and merges neighbouring dims that every operand walks
// contiguously (stride[d] == stride[d+1]*shape[d+1]). The element order is
// unchanged, so a kernel iterating the result visits the same offsets.
func coalesce(shape []int, strides ...[]int) ([]int, [][]int) {
	var sh []int
	st := make([][]int, len(strides))
	for d, n := range shape {
		if n == 1 {
			continue
		}
		if len(sh) > 0 {
			last := len(sh) - 1
			merge := true
			for k := range strides {
				if st[k][last] != strides[k][d]*n {
					merge = false
					break
				}
			}
			if merge {
				sh[last] *= n
				for k := range strides {
					st[k][last] = strides[k][d]
				}
				continue
			}
		}
		sh = append(sh, n)
		for k := range strides {
			st[k] = append(st[k], strides[k][d])
		}
	}
	return sh, st
}

// contiguous returns row-major strides of shape.
func contiguous(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for d := len(shape) - 1; d >= 0; d-- {
		st[d] = s
		s *= shape[d]
	}
	return st
}

func i64s(v []int) []int64 {
	out := make([]int64, len(v))
	for k, x := range v {
		out[k] = int64(x)
	}
	return out
}

// elemKernel picks the element-size variant of a bit-copying kernel.
func elemKernel(base string, dt ir.DType) (string, error) {
	switch dt.Size() {
	case 1, 4, 8:
		return fmt.Sprintf("%s_%d", base, dt.Size()), nil
	}
	return "", fmt.Errorf("element type %v is not supported on the gpu backend", dt)
}

// ---- parameter structs, one constructor each (the order of members must
// match kernels.cu; abi_test.go checks it) ----

func binaryParams(op, n int64, out, a, b string, shape []int, sa, sb []int) *paramBuilder {
	pb := (&paramBuilder{}).i("op", op).i("n", n).p("out", out, 0).p("a", a, 0).p("b", b, 0).i("rank", int64(len(shape)))
	return pb.arr("shape", i64s(shape)).arr("sa", i64s(sa)).arr("sb", i64s(sb))
}

func unaryParams(op, n int64, out, in string) *paramBuilder {
	return (&paramBuilder{}).i("op", op).i("n", n).p("out", out, 0).p("in", in, 0)
}

func castParams(n int64, from, to ir.DType, out, in string) *paramBuilder {
	return (&paramBuilder{}).i("n", n).i("from", int64(from)).i("to", int64(to)).p("out", out, 0).p("in", in, 0)
}

func whereParams(n int64, out, cond, x, y string, shape, sc, sx, sy []int) *paramBuilder {
	pb := (&paramBuilder{}).i("n", n).p("out", out, 0).p("cond", cond, 0).p("x", x, 0).p("y", y, 0).i("rank", int64(len(shape)))
	return pb.arr("shape", i64s(shape)).arr("sc", i64s(sc)).arr("sx", i64s(sx)).arr("sy", i64s(sy))
}

// copyParams: in and out are byte offsets into the values; strides in elements.
func copyParams(n int64, out string, outOff int64, in string, inOff int64, shape, sin, sout []int) *paramBuilder {
	pb := (&paramBuilder{}).i("n", n).p("out", out, outOff).p("in", in, inOff).i("rank", int64(len(shape)))
	return pb.arr("shape", i64s(shape)).arr("sin", i64s(sin)).arr("sout", i64s(sout))
}

func gatherParams(n int64, out, data, idx string, idx64 bool, outer, axis, nidx, inner int64, errVal string) *paramBuilder {
	i64flag := int64(0)
	if idx64 {
		i64flag = 1
	}
	return (&paramBuilder{}).i("n", n).p("out", out, 0).p("data", data, 0).p("idx", idx, 0).
		i("idx64", i64flag).i("outer", outer).i("axis", axis).i("nidx", nidx).i("inner", inner).p("err", errVal, 0)
}

func fillParams(n int64, out string, bits uint64) *paramBuilder {
	return (&paramBuilder{}).i("n", n).p("out", out, 0).i("bits", int64(bits))
}

func softmaxParams(out, in string, rows, axis, inner int64) *paramBuilder {
	return (&paramBuilder{}).p("out", out, 0).p("in", in, 0).i("rows", rows).i("axis", axis).i("inner", inner)
}

func layerNormParams(out, in, scale, bias, mean, invstd string, rows, cols, scaleN, biasN int64, eps float64) *paramBuilder {
	return (&paramBuilder{}).p("out", out, 0).p("in", in, 0).p("scale", scale, 0).p("bias", bias, 0).
		p("mean", mean, 0).p("invstd", invstd, 0).i("rows", rows).i("cols", cols).i("scale_n", scaleN).
		i("bias_n", biasN).f("eps", eps)
}

// attnArgs are attention_f32's parameters. Offsets are in elements; the
// strides of one operand describe its view of the input's data.
type attnArgs struct {
	out, q, k, v, mask            string
	oOff, qOff, kOff, vOff        int
	sq, sk, d, dv                 int
	maskKind                      int
	mRow, mCol                    int
	batches                       int
	qRS, qCS, kJS, kCS, vJS, vCS  int
	oRS, oCS                      int
	scale, fill, maskScale        float64
	bshape, bq, bk, bv, bmask, bo []int // batch dims, element strides per operand
	softcap                       float64
	causal                        bool
	causalOff                     int
	maskKeys                      int    // keys the mask covers (sk unless padded)
	kvLen, scores                 string // key lengths (int64), scores output ("" when absent)
	scoresMode                    int
	bl                            []int // batch strides into kvLen
}

func attnParams(a attnArgs) *paramBuilder {
	pb := (&paramBuilder{}).p("out", a.out, 4*int64(a.oOff)).p("q", a.q, 4*int64(a.qOff)).p("k", a.k, 4*int64(a.kOff)).
		p("v", a.v, 4*int64(a.vOff)).p("mask", a.mask, 0).
		i("sq", int64(a.sq)).i("sk", int64(a.sk)).i("d", int64(a.d)).i("dv", int64(a.dv)).
		i("mask_kind", int64(a.maskKind)).i("m_row", int64(a.mRow)).i("m_col", int64(a.mCol)).i("batches", int64(a.batches)).
		i("q_rs", int64(a.qRS)).i("q_cs", int64(a.qCS)).i("k_js", int64(a.kJS)).i("k_cs", int64(a.kCS)).
		i("v_js", int64(a.vJS)).i("v_cs", int64(a.vCS)).i("o_rs", int64(a.oRS)).i("o_cs", int64(a.oCS)).
		f("scale", a.scale).f("fill", a.fill).f("mask_scale", a.maskScale).i("rank", int64(len(a.bshape)))
	pb = pb.arr("bshape", i64s(a.bshape)).arr("bq", i64s(a.bq)).arr("bk", i64s(a.bk)).arr("bv", i64s(a.bv)).
		arr("bm", i64s(a.bmask)).arr("bo", i64s(a.bo))
	causal := int64(0)
	if a.causal {
		causal = 1
	}
	return pb.f("softcap", a.softcap).i("causal", causal).i("causal_off", int64(a.causalOff)).i("mask_keys", int64(a.maskKeys)).
		i("scores_mode", int64(a.scoresMode)).p("kvlen", a.kvLen, 0).p("scores", a.scores, 0).arr("bl", i64s(a.bl))
}

func rmsNormParams(out, in, scale string, rows, cols, period int64, eps float64) *paramBuilder {
	return (&paramBuilder{}).p("out", out, 0).p("in", in, 0).p("scale", scale, 0).i("rows", rows).i("cols", cols).
		i("period", period).f("eps", eps)
}

// rotaryArgs are rotary_f32's parameters: X as [B, S, H, D] with element
// strides for B, S and H.
type rotaryArgs struct {
	out, in, cos, sin, pos, err string
	n, s, h, d, rd              int64
	bStr, sStr, hStr            int64
	interleaved                 bool
	cacheRows                   int64
}

func rotaryParams(a rotaryArgs) *paramBuilder {
	il := int64(0)
	if a.interleaved {
		il = 1
	}
	return (&paramBuilder{}).p("out", a.out, 0).p("in", a.in, 0).p("cos", a.cos, 0).p("sin", a.sin, 0).p("pos", a.pos, 0).
		p("err", a.err, 0).i("n", a.n).i("s", a.s).i("h", a.h).i("d", a.d).i("rd", a.rd).i("b_str", a.bStr).
		i("s_str", a.sStr).i("h_str", a.hStr).i("interleaved", il).i("cache_rows", a.cacheRows)
}

func triluParams(n, rows, cols, k int64, upper bool, out, in string) *paramBuilder {
	u := int64(0)
	if upper {
		u = 1
	}
	return (&paramBuilder{}).i("n", n).i("rows", rows).i("cols", cols).i("k", k).i("upper", u).p("out", out, 0).p("in", in, 0)
}

// gemmCall is one cublasSgemmStridedBatched call on row-major matrices:
// C[i] = alpha·op(A[i])·op(B[i]) + beta·C[i] for i < batch, where A is
// stored [M,K] ([K,M] when transA), B [K,N] ([N,K] when transB), C [M,N].
// The executor swaps the operands for cuBLAS's column-major convention.
type gemmCall struct {
	transA, transB   bool
	m, n, k          int
	alpha, beta      float32
	a, b, c          string // values
	aOff, bOff, cOff int64  // byte offsets into them
	strideA, strideB int64  // elements between batch matrices (0: shared)
	strideC          int64
	batch            int
	lda, ldb, ldc    int
}

// newGemm fills leading dimensions for row-major storage.
func newGemm(transA, transB bool, m, n, k int, alpha, beta float32) gemmCall {
	g := gemmCall{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta, batch: 1}
	g.lda, g.ldb, g.ldc = max(1, k), max(1, n), max(1, n)
	if transA {
		g.lda = max(1, m)
	}
	if transB {
		g.ldb = max(1, k)
	}
	return g
}

// blasCall is one cublasSgemmStridedBatched call as cuBLAS takes it
// (column-major): C[i] = alpha·op(A[i])·op(B[i]) + beta·C[i], A at a with
// leading dimension lda, and so on.
type blasCall struct {
	transA, transB            bool
	m, n, k                   int
	alpha, beta               float32
	a, b, c                   uint64
	lda, ldb, ldc             int
	strideA, strideB, strideC int64
	batch                     int
}

// columnMajor maps a row-major gemmCall, with its operands at a, b and c,
// to the cuBLAS call computing it. A row-major M×N matrix is its
// column-major transpose, so C = A·B is computed as Cᵀ = Bᵀ·Aᵀ: the
// operands, their transposes and M, N swap.
func (g *gemmCall) columnMajor(a, b, c uint64) blasCall {
	return blasCall{
		transA: g.transB, transB: g.transA, m: g.n, n: g.m, k: g.k, alpha: g.alpha, beta: g.beta,
		a: b, b: a, c: c, lda: g.ldb, ldb: g.lda, ldc: g.ldc,
		strideA: g.strideB, strideB: g.strideA, strideC: g.strideC, batch: g.batch,
	}
}
