package ops

import (
	"errors"
	"fmt"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
)

// MatMul and Gemm. Float32 runs through blas.Sgemm directly on the tensors'
// backing slices (one call per batch matrix, or one call for the whole batch
// when the right operand is a single shared matrix), or blas.SgemmBF16
// when the context's Precision is bf16; float64 through blas.Dgemm;
// float16 is widened to float32 and back (always in fp32); integer types
// use a plain loop.

// matmulIntTypes are the types MatMul and Gemm take from opset 9.
var matmulIntTypes = []ir.DType{ir.Float, ir.Double, ir.Float16, ir.Int32, ir.Int64, ir.Uint32, ir.Uint64}

func init() {
	// MatMul-1 and Gemm-7 take float types, 9 adds integers, 13 bfloat16;
	// Gemm-11 makes C optional. Gemm-1 and 6 broadcast C only with their
	// broadcast attribute, which attnrun does not implement.
	for _, r := range typedVersions(typesFrom(9, FloatTypes, matmulIntTypes), 1, 9, 13) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "MatMul", Since: r.since, Until: r.until,
			MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: r.types,
			Infer: inferMatMul, Run: runMatMul, RunInto: runMatMulInto,
			Doc: "numpy matmul: 1-D promotion, broadcast batch dims",
		})
	}
	for _, r := range []struct {
		since, until, minIn int
		types               []ir.DType
	}{{7, 8, 3, FloatTypes}, {9, 10, 3, matmulIntTypes}, {11, 12, 2, matmulIntTypes}, {13, MaxOpset, 2, matmulIntTypes}} {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Gemm", Since: r.since, Until: r.until,
			MinInputs: r.minIn, MaxInputs: 3, TypeInput: 0, DTypes: r.types,
			Infer: inferGemm, Run: runGemm, RunInto: runGemmInto,
			Doc: "Y = alpha*op(A)*op(B) + beta*C, C broadcast to [M, N]",
		})
	}
}

// matmulDims splits MatMul operand shapes (of any dim type) after 1-D
// promotion: batch dims, and the matrix dims m×k and k2×n.
func matmulDims[D any](a, b []D, one D) (aBatch, bBatch []D, m, k, k2, n D) {
	if len(a) == 1 {
		a = []D{one, a[0]}
	}
	if len(b) == 1 {
		b = []D{b[0], one}
	}
	ra, rb := len(a), len(b)
	return a[:ra-2], b[:rb-2], a[ra-2], a[ra-1], b[rb-2], b[rb-1]
}

func inferMatMul(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0].Type, in[1].Type
	if a.DType != b.DType {
		return nil, n.Errorf("inputs have different element types %v and %v", a.DType, b.DType)
	}
	if !a.RankKnown || !b.RankKnown {
		return []Value{UnknownRank(a.DType)}, nil
	}
	if len(a.Shape) == 0 || len(b.Shape) == 0 {
		return nil, n.Errorf("MatMul does not take scalars: %s x %s", shapeText(a.Shape), shapeText(b.Shape))
	}
	aB, bB, m, k, k2, nn := matmulDims(a.Shape, b.Shape, ir.Dim{Value: 1})
	if k.Known() && k2.Known() && k.Value != k2.Value {
		return nil, n.Errorf("MatMul inner dimensions differ: %s x %s", shapeText(a.Shape), shapeText(b.Shape))
	}
	batch, err := BroadcastDims(aB, bB)
	if err != nil {
		return nil, n.Errorf("MatMul batch dimensions do not broadcast: %s x %s", shapeText(a.Shape), shapeText(b.Shape))
	}
	out := append(ir.Shape{}, batch...)
	if len(a.Shape) > 1 {
		out = append(out, m)
	}
	if len(b.Shape) > 1 {
		out = append(out, nn)
	}
	return []Value{Typed(a.DType, out)}, nil
}

// matmulPlan is a concrete MatMul: the output shape and, per batch matrix,
// where its operands start.
type matmulPlan struct {
	out     []int
	m, k, n int
	batches int
	// aOff and bOff give the matrix index into A and B of output matrix i
	// (0 for a broadcast operand); nil when folded is set.
	aOff, bOff []int
	// folded: B is one matrix shared by every batch and A is not
	// broadcast, so the whole product is one (batches*m)×k by k×n GEMM.
	folded bool
}

func planMatMul(a, b []int) (*matmulPlan, error) {
	if len(a) == 0 || len(b) == 0 {
		return nil, fmt.Errorf("MatMul does not take scalars: %v x %v", a, b)
	}
	aB, bB, m, k, k2, n := matmulDims(a, b, 1)
	if k != k2 {
		return nil, fmt.Errorf("MatMul inner dimensions differ: %v x %v", a, b)
	}
	batch, err := BroadcastShapes(aB, bB)
	if err != nil {
		return nil, fmt.Errorf("MatMul batch dimensions do not broadcast: %v x %v", a, b)
	}
	p := &matmulPlan{m: m, k: k, n: n}
	p.out = append([]int{}, batch...)
	if len(a) > 1 {
		p.out = append(p.out, m)
	}
	if len(b) > 1 {
		p.out = append(p.out, n)
	}
	if _, err := checkedElements(p.out); err != nil {
		return nil, err
	}
	if m == 0 || n == 0 {
		return p, nil // nothing to compute (batches stays 0)
	}
	p.batches = int(ir.NumElements(batch)) // ≤ output elements
	bCount := int(ir.NumElements(bB))
	if bCount == 1 && SameShape(padOnes(aB, len(batch)), batch) {
		p.folded = true
		return p, nil
	}
	p.aOff = batchOffsets(batch, aB)
	p.bOff = batchOffsets(batch, bB)
	return p, nil
}

// padOnes left-pads s with 1s to rank r.
func padOnes(s []int, r int) []int {
	out := make([]int, r)
	for i := range out {
		out[i] = 1
	}
	copy(out[r-len(s):], s)
	return out
}

// batchOffsets returns, for every index of the broadcast batch shape, the
// matrix index into an operand with batch dims in (right-aligned; size-1
// dims broadcast).
func batchOffsets(batch, in []int) []int {
	count := int(ir.NumElements(batch))
	r := len(batch)
	strides := make([]int, r)
	s := 1
	for i := len(in) - 1; i >= 0; i-- {
		if in[i] != 1 {
			strides[r-len(in)+i] = s
		}
		s *= in[i]
	}
	offs := make([]int, count)
	idx := make([]int, r)
	off := 0
	for c := 0; c < count; c++ {
		offs[c] = off
		for d := r - 1; d >= 0; d-- {
			idx[d]++
			off += strides[d]
			if idx[d] < batch[d] {
				break
			}
			off -= strides[d] * idx[d]
			idx[d] = 0
		}
	}
	return offs
}

// each calls f for every GEMM of the plan with element offsets into A, B
// and C and the row count of that GEMM.
func (p *matmulPlan) each(f func(aOff, bOff, cOff, rows int)) {
	if p.folded {
		f(0, 0, 0, p.batches*p.m)
		return
	}
	for i := 0; i < p.batches; i++ {
		f(p.aOff[i]*p.m*p.k, p.bOff[i]*p.k*p.n, i*p.m*p.n, p.m)
	}
}

func runMatMul(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	p, err := planMatMulNode(n, in)
	if err != nil {
		return nil, err
	}
	out := ir.NewTensor(in[0].DType, p.out)
	if err := matmulInto(ctx, n, p, in[0], in[1], out, true); err != nil {
		return nil, err
	}
	return []*ir.Tensor{out}, nil
}

func runMatMulInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
	p, err := planMatMulNode(n, in)
	if err != nil {
		return err
	}
	if err := checkIntoOutput(n, out, in[0].DType, p.out); err != nil {
		return err
	}
	return matmulInto(ctx, n, p, in[0], in[1], out[0], false)
}

// planMatMulNode validates MatMul's inputs and plans the product.
func planMatMulNode(n *ir.Node, in []*ir.Tensor) (*matmulPlan, error) {
	if err := checkComputeInputs(n, in, 2); err != nil {
		return nil, err
	}
	a, b := in[0], in[1]
	if a.DType != b.DType {
		return nil, n.Errorf("inputs have different element types %v and %v", a.DType, b.DType)
	}
	if err := checkComputeDType(n, "input A", a.DType, matmulIntTypes); err != nil {
		return nil, err
	}
	p, err := planMatMul(a.Shape, b.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return p, nil
}

// matmulInto computes a·b into out; zeroed tells whether out is known to
// hold zeros (the integer loops accumulate into it).
func matmulInto(ctx *Context, n *ir.Node, p *matmulPlan, a, b, out *ir.Tensor, zeroed bool) error {
	k, nn := p.k, p.n
	threads := computeThreads(ctx)
	if !zeroed && a.DType != ir.Float && a.DType != ir.Float16 && a.DType != ir.Double {
		clearTensor(out)
	}
	if p.batches == 0 && !zeroed {
		clearTensor(out) // an empty inner product: zeros
	}
	switch a.DType {
	case ir.Float, ir.Float16:
		av, err := float32View(a)
		if err != nil {
			return n.Errorf("%w", err)
		}
		bv, err := float32View(b)
		if err != nil {
			return n.Errorf("%w", err)
		}
		cv := out.Float32s()
		if a.DType == ir.Float16 {
			cv = make([]float32, out.Len())
		}
		gemm := blas.SgemmThreads
		if ctx.bf16() && a.DType == ir.Float {
			gemm = blas.SgemmBF16
		}
		p.each(func(aOff, bOff, cOff, rows int) {
			gemm(threads, false, false, rows, nn, k, 1, av[aOff:aOff+rows*k], max(1, k), bv[bOff:bOff+k*nn], max(1, nn), 0, cv[cOff:cOff+rows*nn], max(1, nn))
		})
		if a.DType == ir.Float16 {
			float32ToHalf(out.Data.([]uint16), cv)
		}
	case ir.Double:
		av, bv, cv := a.Data.([]float64), b.Data.([]float64), out.Data.([]float64)
		p.each(func(aOff, bOff, cOff, rows int) {
			blas.Dgemm(false, false, rows, nn, k, 1, av[aOff:aOff+rows*k], max(1, k), bv[bOff:bOff+k*nn], max(1, nn), 0, cv[cOff:cOff+rows*nn], max(1, nn))
		})
	case ir.Int32:
		matmulLoop(p, a.Data.([]int32), b.Data.([]int32), out.Data.([]int32))
	case ir.Int64:
		matmulLoop(p, a.Data.([]int64), b.Data.([]int64), out.Data.([]int64))
	case ir.Uint32:
		matmulLoop(p, a.Data.([]uint32), b.Data.([]uint32), out.Data.([]uint32))
	case ir.Uint64:
		matmulLoop(p, a.Data.([]uint64), b.Data.([]uint64), out.Data.([]uint64))
	}
	return nil
}

// clearTensor zeroes a tensor's elements.
func clearTensor(t *ir.Tensor) {
	switch d := t.Data.(type) {
	case []float32:
		clear(d)
	case []float64:
		clear(d)
	case []uint16:
		clear(d)
	case []int32:
		clear(d)
	case []int64:
		clear(d)
	case []uint32:
		clear(d)
	case []uint64:
		clear(d)
	}
}

// matmulLoop is MatMul for integer types (C must be zeroed).
func matmulLoop[T int32 | int64 | uint32 | uint64](p *matmulPlan, a, b, c []T) {
	k, n := p.k, p.n
	p.each(func(aOff, bOff, cOff, rows int) {
		for i := 0; i < rows; i++ {
			crow := c[cOff+i*n : cOff+(i+1)*n]
			for q := 0; q < k; q++ {
				av := a[aOff+i*k+q]
				brow := b[bOff+q*n : bOff+(q+1)*n]
				for j, bv := range brow {
					crow[j] += av * bv
				}
			}
		}
	})
}

// gemmAttrs are Gemm's attributes.
type gemmAttrs struct {
	alpha, beta    float32
	transA, transB bool
}

func parseGemmAttrs(n *ir.Node) (gemmAttrs, error) {
	var g gemmAttrs
	var err error
	if g.alpha, err = n.AttrFloat("alpha", 1); err != nil {
		return g, n.Errorf("%w", err)
	}
	if g.beta, err = n.AttrFloat("beta", 1); err != nil {
		return g, n.Errorf("%w", err)
	}
	ta, err := n.AttrInt("transA", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	tb, err := n.AttrInt("transB", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.transA, g.transB = ta != 0, tb != 0
	return g, nil
}

// gemmMNK returns M, K (from A) and K2, N (from B) given the transposes.
func gemmMNK[D any](a, b []D, g gemmAttrs) (m, k, k2, n D) {
	m, k = a[0], a[1]
	if g.transA {
		m, k = k, m
	}
	k2, n = b[0], b[1]
	if g.transB {
		k2, n = n, k2
	}
	return
}

func inferGemm(n *ir.Node, opset int, in []Value) ([]Value, error) {
	minIn := 2
	if opset < 11 {
		minIn = 3
	}
	if err := checkInferInputs(n, in, minIn); err != nil {
		return nil, err
	}
	g, err := parseGemmAttrs(n)
	if err != nil {
		return nil, err
	}
	a, b := in[0].Type, in[1].Type
	if a.DType != b.DType {
		return nil, n.Errorf("inputs A and B have different element types %v and %v", a.DType, b.DType)
	}
	var c ir.TypeInfo
	if len(in) > 2 && in[2].Present() {
		c = in[2].Type
		if c.DType != a.DType {
			return nil, n.Errorf("input C has element type %v, A has %v", c.DType, a.DType)
		}
		if c.RankKnown && len(c.Shape) > 2 {
			return nil, n.Errorf("input C must have rank ≤ 2, got shape %s", shapeText(c.Shape))
		}
	}
	for i, t := range []ir.TypeInfo{a, b} {
		if t.RankKnown && len(t.Shape) != 2 {
			return nil, n.Errorf("input %c must be 2-D, got shape %s", "AB"[i], shapeText(t.Shape))
		}
	}
	if !a.RankKnown || !b.RankKnown {
		out := ir.Shape{ir.UnknownDim, ir.UnknownDim}
		if a.RankKnown {
			out[0], _, _, _ = gemmMNK(a.Shape, ir.Shape{ir.UnknownDim, ir.UnknownDim}, g)
		}
		if b.RankKnown {
			_, _, _, out[1] = gemmMNK(ir.Shape{ir.UnknownDim, ir.UnknownDim}, b.Shape, g)
		}
		return []Value{Typed(a.DType, out)}, nil
	}
	m, k, k2, nn := gemmMNK(a.Shape, b.Shape, g)
	if k.Known() && k2.Known() && k.Value != k2.Value {
		return nil, n.Errorf("Gemm inner dimensions differ: A %s (transA=%v) x B %s (transB=%v)", shapeText(a.Shape), g.transA, shapeText(b.Shape), g.transB)
	}
	if c.RankKnown {
		want := ir.Shape{m, nn}
		off := 2 - len(c.Shape)
		for i, d := range c.Shape {
			w := want[off+i]
			if d.Known() && w.Known() && d.Value != 1 && d.Value != w.Value {
				return nil, n.Errorf("input C of shape %s does not broadcast to [M, N] = %s", shapeText(c.Shape), shapeText(want))
			}
		}
	}
	return []Value{Typed(a.DType, ir.Shape{m, nn})}, nil
}

func runGemm(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	p, err := planGemmNode(ctx, n, in)
	if err != nil {
		return nil, err
	}
	out := ir.NewTensor(in[0].DType, []int{p.m, p.n})
	gemmInto(ctx, p, in, out)
	return []*ir.Tensor{out}, nil
}

// runGemmInto is runGemm into a buffer the executor provides (reused run
// after run, so every element is written: beta 0 stores, not adds).
func runGemmInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
	p, err := planGemmNode(ctx, n, in)
	if err != nil {
		return err
	}
	if err := checkIntoOutput(n, out, in[0].DType, []int{p.m, p.n}); err != nil {
		return err
	}
	gemmInto(ctx, p, in, out[0])
	return nil
}

// gemmPlan is a Gemm call's checked attributes and dimensions: Y (m×n) =
// alpha·op(A)·op(B) + beta·C, C of cRows×cCols broadcast (g.beta 0
// without C).
type gemmPlan struct {
	g            gemmAttrs
	m, n, k      int
	cRows, cCols int
}

// planGemmNode validates Gemm's inputs and attributes.
func planGemmNode(ctx *Context, n *ir.Node, in []*ir.Tensor) (gemmPlan, error) {
	minIn := 2
	if ctx != nil && ctx.Opset > 0 && ctx.Opset < 11 {
		minIn = 3
	}
	if err := checkComputeInputs(n, in, minIn); err != nil {
		return gemmPlan{}, err
	}
	g, err := parseGemmAttrs(n)
	if err != nil {
		return gemmPlan{}, err
	}
	a, b := in[0], in[1]
	var c *ir.Tensor
	if len(in) > 2 {
		c = in[2]
	}
	if a.DType != b.DType || (c != nil && c.DType != a.DType) {
		return gemmPlan{}, n.Errorf("inputs have different element types")
	}
	if err := checkComputeDType(n, "input A", a.DType, matmulIntTypes); err != nil {
		return gemmPlan{}, err
	}
	if a.Rank() != 2 || b.Rank() != 2 {
		return gemmPlan{}, n.Errorf("inputs A and B must be 2-D, got shapes %v and %v", a.Shape, b.Shape)
	}
	m, k, k2, nn := gemmMNK(a.Shape, b.Shape, g)
	if k != k2 {
		return gemmPlan{}, n.Errorf("Gemm inner dimensions differ: A %v (transA=%v) x B %v (transB=%v)", a.Shape, g.transA, b.Shape, g.transB)
	}
	p := gemmPlan{g: g, m: m, n: nn, k: k}
	if c == nil {
		p.g.beta = 0
	} else {
		if c.Rank() > 2 {
			return gemmPlan{}, n.Errorf("input C must have rank ≤ 2, got shape %v", c.Shape)
		}
		cs := padOnes(c.Shape, 2)
		p.cRows, p.cCols = cs[0], cs[1]
		if (p.cRows != 1 && p.cRows != m) || (p.cCols != 1 && p.cCols != nn) {
			return gemmPlan{}, n.Errorf("input C of shape %v does not broadcast to [M, N] = [%d %d]", c.Shape, m, nn)
		}
	}
	if _, err := checkedElements([]int{m, nn}); err != nil {
		return gemmPlan{}, n.Errorf("%w", err)
	}
	return p, nil
}

// gemmInto computes the planned Gemm into out (m×n, in[0]'s dtype),
// overwriting every element.
func gemmInto(ctx *Context, p gemmPlan, in []*ir.Tensor, out *ir.Tensor) {
	a, b := in[0], in[1]
	var c *ir.Tensor
	if len(in) > 2 {
		c = in[2]
	}
	g, beta, m, nn, k := p.g, p.g.beta, p.m, p.n, p.k
	cRows, cCols := p.cRows, p.cCols
	lda, ldb := max(1, a.Shape[1]), max(1, b.Shape[1])
	switch a.DType {
	case ir.Float, ir.Float16:
		av, _ := float32View(a)
		bv, _ := float32View(b)
		var yv []float32
		if a.DType == ir.Float16 {
			yv = make([]float32, m*nn)
		} else {
			yv = out.Float32s()
		}
		if beta != 0 {
			cv, _ := float32View(c)
			gemmFillC(yv, m, nn, cv, cRows, cCols)
		}
		gemm := blas.SgemmThreads
		if ctx.bf16() && a.DType == ir.Float {
			gemm = blas.SgemmBF16
		}
		gemm(computeThreads(ctx), g.transA, g.transB, m, nn, k, g.alpha, av, lda, bv, ldb, beta, yv, max(1, nn))
		if a.DType == ir.Float16 {
			float32ToHalf(out.Data.([]uint16), yv)
		}
	case ir.Double:
		yv := out.Data.([]float64)
		if beta != 0 {
			gemmFillC(yv, m, nn, c.Data.([]float64), cRows, cCols)
		}
		blas.Dgemm(g.transA, g.transB, m, nn, k, float64(g.alpha), a.Data.([]float64), lda, b.Data.([]float64), ldb, float64(beta), yv, max(1, nn))
	case ir.Int32:
		gemmLoop(g, beta, m, nn, k, a.Data.([]int32), b.Data.([]int32), c, cRows, cCols, out.Data.([]int32))
	case ir.Int64:
		gemmLoop(g, beta, m, nn, k, a.Data.([]int64), b.Data.([]int64), c, cRows, cCols, out.Data.([]int64))
	case ir.Uint32:
		gemmLoop(g, beta, m, nn, k, a.Data.([]uint32), b.Data.([]uint32), c, cRows, cCols, out.Data.([]uint32))
	case ir.Uint64:
		gemmLoop(g, beta, m, nn, k, a.Data.([]uint64), b.Data.([]uint64), c, cRows, cCols, out.Data.([]uint64))
	}
}

// gemmFillC writes C, of shape cRows×cCols broadcast to m×n, into y.
func gemmFillC[T any](y []T, m, n int, c []T, cRows, cCols int) {
	for i := 0; i < m; i++ {
		ci := 0
		if cRows > 1 {
			ci = i
		}
		row := y[i*n : (i+1)*n]
		if cCols == 1 {
			v := c[ci]
			for j := range row {
				row[j] = v
			}
			continue
		}
		copy(row, c[ci*cCols:(ci+1)*cCols])
	}
}

// gemmLoop is Gemm for integer types: the product is exact in T, then
// alpha and beta apply in float64 and the result is truncated to T.
func gemmLoop[T int32 | int64 | uint32 | uint64](g gemmAttrs, beta float32, m, n, k int, a, b []T, c *ir.Tensor, cRows, cCols int, y []T) {
	at := func(i, q int) T {
		if g.transA {
			return a[q*m+i]
		}
		return a[i*k+q]
	}
	bt := func(q, j int) T {
		if g.transB {
			return b[j*k+q]
		}
		return b[q*n+j]
	}
	var cv []T
	if c != nil && beta != 0 {
		cv = c.Data.([]T)
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s T
			for q := 0; q < k; q++ {
				s += at(i, q) * bt(q, j)
			}
			v := float64(g.alpha) * float64(s)
			if cv != nil {
				ci, cj := 0, 0
				if cRows > 1 {
					ci = i
				}
				if cCols > 1 {
					cj = j
				}
				v += float64(beta) * float64(cv[ci*cCols+cj])
			}
			y[i*n+j] = T(v)
		}
	}
}

// FusedMatMulOp is the op type of attnrun's MatMul with strided operands
// and a fused bias (domain DomainAttnrun, opset 1), made by the plan-time
// MatMul rewrite in runtime/graph.
//
// Inputs: A and B (float32, logical rank ≥ 2) and an optional bias of N
// elements (every dim 1 but the last, which is N). Attributes a_view and
// b_view (ints, ops.View encoding, optional) make the kernel read A or B
// through a strided view of the input's data: a Transpose swapping the last
// two axes becomes a transposed GEMM operand, and a head split
// (Reshape+Transpose) becomes per-batch offsets and a row stride. Output:
// numpy matmul of the logical A and B (batch dims broadcast) plus the bias
// broadcast over the rows, row-major. An activation attribute, a residual
// input (index 3) and a gate input (index 4) make the GEMM finish the
// output in its epilogue (matmul_epilogue.go): y = (activation(A·B +
// bias) ⊙ gate) + residual. Attribute column_stripe (int, optional) only
// schedules: the output's columns come in stripes of that width that the
// reader splits alike (a fused QKV projection whose FusedAttention gives
// each worker a range of heads: stripe = heads·head size), so with packed
// weights the GEMM's threads split every stripe the same way
// (blas.SgemmPackedStriped); the result does not change.
const FusedMatMulOp = "FusedMatMul"

func init() {
	Register(&Schema{
		Domain: DomainAttnrun, OpType: FusedMatMulOp, Since: 1, Until: 1,
		MinInputs: 2, MaxInputs: 5, TypeInput: 0, DTypes: []ir.DType{ir.Float},
		Infer: inferFusedMatMul, Run: runFusedMatMul, RunInto: runFusedMatMulInto,
		Doc: "MatMul reading A and B through strided views (transposes, head splits) with an optional bias over the last axis, then an optional activation, gate multiply and residual add in the GEMM's epilogue",
	})
}

// fusedMatMulViews parses a_view and b_view (nil when absent).
func fusedMatMulViews(n *ir.Node) ([2]*View, error) {
	var vs [2]*View
	for i, name := range []string{"a_view", "b_view"} {
		v, err := viewAttr(n, name, 2)
		if err != nil {
			return vs, err
		}
		vs[i] = v
	}
	return vs, nil
}

func inferFusedMatMul(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 2); err != nil {
		return nil, err
	}
	vs, err := fusedMatMulViews(n)
	if err != nil {
		return nil, err
	}
	var shapes [2]ir.Shape
	for i, what := range []string{"A", "B"} {
		t := in[i].Type
		if t.DType != ir.Float {
			return nil, n.Errorf("%s has element type %v, FusedMatMul takes float32", what, t.DType)
		}
		if vs[i] != nil {
			if dims, ok := t.Shape.Concrete(); t.RankKnown && ok && !vs[i].Fits(ShapeElems(dims)) {
				return nil, n.Errorf("%s view %v does not fit the input of shape %v", what, vs[i].Ints(), dims)
			}
			shapes[i] = ir.ShapeOf(vs[i].Shape)
			continue
		}
		if !t.RankKnown {
			return []Value{UnknownRank(ir.Float)}, nil
		}
		if len(t.Shape) < 2 {
			return nil, n.Errorf("%s has rank %d, FusedMatMul needs rank ≥ 2", what, len(t.Shape))
		}
		shapes[i] = t.Shape
	}
	a, b := shapes[0], shapes[1]
	k, k2 := a[len(a)-1], b[len(b)-2]
	if k.Known() && k2.Known() && k.Value != k2.Value {
		return nil, n.Errorf("inner dimensions differ: %s x %s", shapeText(a), shapeText(b))
	}
	batch, err := BroadcastDims(a[:len(a)-2], b[:len(b)-2])
	if err != nil {
		return nil, n.Errorf("batch dimensions do not broadcast: %s x %s", shapeText(a), shapeText(b))
	}
	nn := b[len(b)-1]
	if len(in) > 2 && in[2].Present() {
		c := in[2].Type
		if c.DType != ir.Float {
			return nil, n.Errorf("bias has element type %v, want float32", c.DType)
		}
		if c.RankKnown {
			for i, d := range c.Shape {
				last := i == len(c.Shape)-1
				if (!last && d.Known() && d.Value != 1) || (last && d.Known() && nn.Known() && d.Value != nn.Value) {
					return nil, n.Errorf("bias of shape %s is not [.., N] with N = %v", shapeText(c.Shape), nn)
				}
			}
			if len(c.Shape) == 0 || len(c.Shape) > len(batch)+2 {
				return nil, n.Errorf("bias of shape %s is not [.., N] with N = %v", shapeText(c.Shape), nn)
			}
		}
	}
	out := append(batch, a[len(a)-2], nn)
	if _, err := fusedMatMulActivation(n); err != nil {
		return nil, err
	}
	if _, err := columnStripe(n); err != nil {
		return nil, err
	}
	for k, what := range epilogueOperands {
		if what == "" || len(in) <= k || !in[k].Present() {
			continue
		}
		r := in[k].Type
		if r.DType != ir.Float {
			return nil, n.Errorf("%s has element type %v, want float32", what, r.DType)
		}
		if !residualFits(r, out) {
			return nil, n.Errorf("%s of shape %s does not have the output's elements and last dim (output %s)", what, shapeText(r.Shape), shapeText(out))
		}
	}
	return []Value{Typed(ir.Float, out)}, nil
}

// epilogueOperands names FusedMatMul's elementwise epilogue inputs, by
// index (3 and 4): each holds the output's elements row-major
// (residualFits).
var epilogueOperands = [...]string{3: "residual", 4: "gate"}

// residualFits reports whether a residual or gate of type r can have the
// elements, row-major, of an output of shape out: the same last dim and
// count where they are known.
func residualFits(r ir.TypeInfo, out ir.Shape) bool {
	if !r.RankKnown {
		return true
	}
	if len(r.Shape) == 0 {
		return false
	}
	if a, b := r.Shape[len(r.Shape)-1], out[len(out)-1]; a.Known() && b.Known() && a.Value != b.Value {
		return false
	}
	rd, okR := r.Shape.Concrete()
	od, okO := out.Concrete()
	return !okR || !okO || ShapeElems(rd) == ShapeElems(od)
}

func runFusedMatMul(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	p, err := planFusedMatMul(ctx, n, in)
	if err != nil {
		return nil, err
	}
	out := ir.NewTensor(ir.Float, p.out)
	p.run(ctx, out.Float32s())
	return []*ir.Tensor{out}, nil
}

func runFusedMatMulInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
	p, err := planFusedMatMul(ctx, n, in)
	if err != nil {
		return err
	}
	if len(out) < 1 || out[0] == nil || out[0].DType != ir.Float || !SameShape(out[0].Shape, p.out) || len(out[0].Float32s()) != ShapeElems(p.out) {
		return n.Errorf("internal error: output buffer does not match shape %v", p.out)
	}
	p.run(ctx, out[0].Float32s())
	return nil
}

// fusedMatMulPlan is a FusedMatMul on concrete shapes.
type fusedMatMulPlan struct {
	out        []int
	m, k, n    int
	batches    int
	a, b       attnOperand // matrices: rows × cols with strides
	bSrc       *ir.Tensor  // the tensor B is: what its packed forms are keyed by
	bias       []float32
	foldedRows bool // one GEMM of batches·m rows (B shared, A rows evenly spaced)
	// The epilogue (matmul_epilogue.go): the activation's kernel, the gate
	// and the residual, row-major in the output's shape; nil for none.
	act            func(dst, src []float32)
	gate, residual []float32
	stripe         int // column_stripe (0: none)
}

// ColumnStripeAttr names FusedMatMul's column_stripe attribute.
const ColumnStripeAttr = "column_stripe"

// columnStripe parses FusedMatMul's column_stripe (0 when absent).
func columnStripe(n *ir.Node) (int, error) {
	v, err := n.AttrInt(ColumnStripeAttr, 0)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	if v < 0 {
		return 0, n.Errorf("%s %d is negative", ColumnStripeAttr, v)
	}
	return int(v), nil
}

func planFusedMatMul(ctx *Context, n *ir.Node, in []*ir.Tensor) (*fusedMatMulPlan, error) {
	// A constant B whose float32 data the backend released once it was
	// packed (see PackFusedMatMulB) has its shape but no data: every run
	// finds it packed.
	packedOnly := len(in) > 1 && in[1].Released() && ctx.memoizes(1)
	checked, required := in, 2
	if packedOnly {
		checked, required = slices.Clone(in), 1
		checked[1] = nil
	}
	if err := checkComputeInputs(n, checked, required); err != nil {
		return nil, err
	}
	vs, err := fusedMatMulViews(n)
	if err != nil {
		return nil, err
	}
	var views [2]View
	for i, what := range []string{"A", "B"} {
		if in[i].DType != ir.Float {
			return nil, n.Errorf("%s has element type %v, FusedMatMul takes float32", what, in[i].DType)
		}
		views[i] = Contiguous(in[i].Shape)
		if vs[i] != nil {
			views[i] = *vs[i]
		}
		if len(views[i].Shape) < 2 {
			return nil, n.Errorf("%s has rank %d, FusedMatMul needs rank ≥ 2", what, len(views[i].Shape))
		}
		elems := in[i].Len()
		if i == 1 && packedOnly {
			elems = ShapeElems(in[1].Shape)
		}
		if !views[i].Fits(elems) {
			return nil, n.Errorf("%s view %v does not fit the input of shape %v", what, views[i].Ints(), in[i].Shape)
		}
	}
	a, b := views[0], views[1]
	ra, rb := len(a.Shape), len(b.Shape)
	p := &fusedMatMulPlan{m: a.Shape[ra-2], k: a.Shape[ra-1], n: b.Shape[rb-1]}
	if b.Shape[rb-2] != p.k {
		return nil, n.Errorf("inner dimensions differ: %v x %v", a.Shape, b.Shape)
	}
	batch, err := BroadcastShapes(a.Shape[:ra-2], b.Shape[:rb-2])
	if err != nil {
		return nil, n.Errorf("batch dimensions do not broadcast: %v x %v", a.Shape, b.Shape)
	}
	p.out = append(append([]int{}, batch...), p.m, p.n)
	if _, err := checkedElements(p.out); err != nil {
		return nil, n.Errorf("%w", err)
	}
	p.batches = ShapeElems(batch)
	p.a = attnOperand{data: in[0].Float32s(), off: batchElemOffsets(batch, a.Shape[:ra-2], a.Strides[:ra-2], a.Offset), rs: a.Strides[ra-2], cs: a.Strides[ra-1]}
	p.bSrc = in[1]
	p.b = attnOperand{data: in[1].Float32s(), off: batchElemOffsets(batch, b.Shape[:rb-2], b.Strides[:rb-2], b.Offset), rs: b.Strides[rb-2], cs: b.Strides[rb-1]}
	if len(in) > 2 && in[2] != nil {
		c := in[2]
		if c.DType != ir.Float || c.Rank() == 0 || c.Len() != p.n || c.Shape[c.Rank()-1] != p.n || c.Rank() > len(p.out) {
			return nil, n.Errorf("bias of shape %v is not [.., N] with N = %d", c.Shape, p.n)
		}
		p.bias = c.Float32s()
	}
	if p.act, err = fusedMatMulActivation(n); err != nil {
		return nil, err
	}
	if p.stripe, err = columnStripe(n); err != nil {
		return nil, err
	}
	for k, what := range epilogueOperands {
		if what == "" || len(in) <= k || in[k] == nil {
			continue
		}
		r := in[k]
		if r.DType != ir.Float || r.Rank() == 0 || r.Shape[r.Rank()-1] != p.n || r.Len() != ShapeElems(p.out) {
			return nil, n.Errorf("%s of shape %v (%v) does not have the output's elements and last dim (output %v, float32)", what, r.Shape, r.DType, p.out)
		}
		if k == 3 {
			p.residual = r.Float32s()
		} else {
			p.gate = r.Float32s()
		}
	}
	// One GEMM for all batches when B is shared and A's batches are
	// consecutive row blocks.
	if p.batches > 1 && p.a.cs == 1 {
		p.foldedRows = true
		for i := 0; i < p.batches && p.foldedRows; i++ {
			p.foldedRows = p.b.off[i] == p.b.off[0] && p.a.off[i] == p.a.off[0]+i*p.m*p.a.rs
		}
	}
	return p, nil
}

// gemmOperand returns how to pass a rows×cols strided matrix to Sgemm:
// the slice from its first element, whether it is transposed and its
// leading dimension; ok is false when neither stride is 1 (the matrix must
// be gathered first).
func gemmOperand(data []float32, off, rs, cs, rows, cols int) (s []float32, trans bool, ld int, ok bool) {
	trans, ld, ok = gemmLayout(rs, cs, rows, cols)
	if !ok {
		return nil, false, 0, false
	}
	return data[off:], trans, ld, true
}

// gemmLayout is gemmOperand's answer without the data: whether the matrix
// is transposed for Sgemm, its leading dimension, and ok false when it must
// be gathered first.
func gemmLayout(rs, cs, rows, cols int) (trans bool, ld int, ok bool) {
	switch {
	case rows <= 1 && (cs == 1 || cols <= 1):
		return false, max(cols, 1), true
	case (cs == 1 || cols <= 1) && rs >= cols:
		return false, max(rs, 1), true
	case cols <= 1 && (rs == 1 || rows <= 1):
		return true, max(rows, 1), true
	case (rs == 1 || rows <= 1) && cs >= rows:
		return true, max(cs, 1), true
	}
	return false, 0, false
}

// gatherMatrix copies a strided rows×cols matrix into dst, row-major
// (contiguous rows with one copy each).
func gatherMatrix(dst, data []float32, off, rs, cs, rows, cols int) {
	for i := 0; i < rows; i++ {
		row := dst[i*cols : (i+1)*cols]
		if cs == 1 {
			copy(row, data[off+i*rs:])
			continue
		}
		for j := range row {
			row[j] = data[off+i*rs+j*cs]
		}
	}
}

// packedBKey identifies a constant B operand packed for the GEMM: the
// tensor it is (not its data, which a backend may release once packed) and
// how the GEMM reads it.
type packedBKey struct {
	src   *ir.Tensor
	off   int
	trans bool
	ld    int
	k, n  int
	bf16  bool
}

// packedB returns B at bOff (read as tb, ldb: gemmLayout's answer) packed
// once for every run (blas.PackB, or blas.PackBBF16 in bf16) when B is a
// constant of the model and the executor memoizes; nil otherwise.
func (p *fusedMatMulPlan) packedB(ctx *Context, bOff int, tb bool, ldb int) *blas.PackedB {
	return packB(ctx, packedBKey{src: p.bSrc, off: bOff, trans: tb, ld: ldb, k: p.k, n: p.n, bf16: ctx.bf16()}, p.b.data)
}

// ErrReleasedNotPacked is what packing a released B (ir.Tensor.Released)
// that is not packed yet for the layout a step reads it with fails with:
// its data must be restored first.
var ErrReleasedNotPacked = errors.New("the weight's float32 data was released, and it is not packed for this layout")

// packB packs the B that key names, from data, through the context's memo.
// A released B missing from the memo panics with ErrReleasedNotPacked.
func packB(ctx *Context, key packedBKey, data []float32) *blas.PackedB {
	pb, _ := ctx.memoOf(1, key, func() any {
		if key.src.Released() {
			panic(fmt.Errorf("weight B of shape %v at offset %d (trans %v, ld %d): %w", key.src.Shape, key.off, key.trans, key.ld, ErrReleasedNotPacked))
		}
		if key.bf16 {
			return blas.PackBBF16(key.trans, key.k, key.n, data[key.off:], key.ld)
		}
		return blas.PackB(key.trans, key.k, key.n, data[key.off:], key.ld)
	}).(*blas.PackedB)
	return pb
}

// PackFusedMatMulB packs the constant B operand b of the FusedMatMul node n
// (run with ctx, as its step runs) for every run of the step, whatever A's
// shape: the packed forms go to ctx.Memo under the keys the runs look
// them up by. ok is false when some run would still read b's float32 data
// (a view the GEMM takes only gathered, an executor that does not
// memoize): b's data must then stay. Once ok, a backend may release b's
// data (ir.Tensor.Released): the runs find it packed. A released b that
// is not packed for this step fails with ErrReleasedNotPacked.
func PackFusedMatMulB(ctx *Context, n *ir.Node, b *ir.Tensor) (ok bool, err error) {
	if !ctx.memoizes(1) || b == nil || b.DType != ir.Float {
		return false, nil
	}
	defer func() {
		if r := recover(); r != nil {
			e, isErr := r.(error)
			if !isErr || !errors.Is(e, ErrReleasedNotPacked) {
				panic(r)
			}
			ok, err = false, e
		}
	}()
	vs, err := fusedMatMulViews(n)
	if err != nil {
		return false, err
	}
	v := Contiguous(b.Shape)
	if vs[1] != nil {
		v = *vs[1]
	}
	r := len(v.Shape)
	if r < 2 || !v.Fits(ShapeElems(b.Shape)) {
		return false, nil // the step's own checks fail; nothing to pack
	}
	k, nn := v.Shape[r-2], v.Shape[r-1]
	if k == 0 || nn == 0 {
		return true, nil // no run reads B
	}
	tb, ldb, okB := gemmLayout(v.Strides[r-2], v.Strides[r-1], k, nn)
	if !okB {
		return false, nil
	}
	// Every batch offset a run can read B at: B's own batch indices
	// (broadcasting only repeats them).
	data := b.Float32s()
	for _, off := range batchElemOffsets(v.Shape[:r-2], v.Shape[:r-2], v.Strides[:r-2], v.Offset) {
		if packB(ctx, packedBKey{src: b, off: off, trans: tb, ld: ldb, k: k, n: nn, bf16: ctx.bf16()}, data) == nil {
			return false, nil
		}
	}
	return true, nil
}

func (p *fusedMatMulPlan) run(ctx *Context, out []float32) {
	threads := computeThreads(ctx)
	m, k, nn := p.m, p.k, p.n
	if len(out) == 0 {
		return
	}
	if k == 0 {
		for r := 0; r < len(out)/nn; r++ {
			if p.bias != nil {
				copy(out[r*nn:(r+1)*nn], p.bias)
			} else {
				clear(out[r*nn : (r+1)*nn])
			}
		}
		if epi := p.epilogue(out, p.gate, p.residual); epi != nil {
			epi(0, len(out)/nn, 0, nn)
		}
		return
	}
	// c is the output's rows from element cOff on: the gate's and the
	// residual's rows there are theirs.
	gemm := func(aOff, bOff int, rows int, c []float32, cOff int) {
		var gate, res []float32
		if p.gate != nil {
			gate = p.gate[cOff : cOff+len(c)]
		}
		if p.residual != nil {
			res = p.residual[cOff : cOff+len(c)]
		}
		epi := p.epilogue(c, gate, res)
		as, ta, lda, okA := gemmOperand(p.a.data, aOff, p.a.rs, p.a.cs, rows, k)
		if !okA {
			as, ta, lda = make([]float32, rows*k), false, k
			gatherMatrix(as, p.a.data, aOff, p.a.rs, p.a.cs, rows, k)
		}
		var bs []float32
		tb, ldb, okB := gemmLayout(p.b.rs, p.b.cs, k, nn)
		if okB {
			if pb := p.packedB(ctx, bOff, tb, ldb); pb != nil {
				blas.SgemmPackedStriped(threads, p.stripe, ta, rows, as, lda, pb, p.bias, c, nn, epi)
				return
			}
			bs = p.b.data[bOff:]
		} else {
			bs, tb, ldb = make([]float32, k*nn), false, nn
			gatherMatrix(bs, p.b.data, bOff, p.b.rs, p.b.cs, k, nn)
		}
		gemmBias, gemm := blas.SgemmBias, blas.SgemmThreads
		if ctx.bf16() {
			gemmBias, gemm = blas.SgemmBiasBF16, blas.SgemmBF16
		}
		if p.bias != nil || epi != nil {
			gemmBias(threads, ta, tb, rows, nn, k, as, lda, bs, ldb, p.bias, c, nn, epi)
			return
		}
		gemm(threads, ta, tb, rows, nn, k, 1, as, lda, bs, ldb, 0, c, nn)
	}
	if p.foldedRows || p.batches == 1 {
		gemm(p.a.off[0], p.b.off[0], p.batches*m, out, 0)
		return
	}
	for i := 0; i < p.batches; i++ {
		gemm(p.a.off[i], p.b.off[i], m, out[i*m*nn:(i+1)*m*nn], i*m*nn)
	}
}
