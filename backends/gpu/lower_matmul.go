package gpu

// Lowering MatMul and Gemm to cuBLAS calls (strided batches where the
// batch dims broadcast regularly).

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// matmulBatches splits a batched matrix product into cuBLAS calls. outB is
// the broadcast batch shape; sa, sb, sc the operands' element strides per
// batch dim (0 where broadcast). Dims that every operand walks evenly are
// merged, the innermost remaining dim becomes the strided batch of one
// call, and the others are looped over on the host. It returns one
// (aOff, bOff, cOff) element offset triple per call, the batch count and
// the per-call strides.
func matmulBatches(outB, sa, sb, sc []int) (offs [][3]int64, count int, stride [3]int64) {
	shape, st := coalesce(outB, sa, sb, sc)
	if len(shape) == 0 {
		return [][3]int64{{0, 0, 0}}, 1, [3]int64{}
	}
	last := len(shape) - 1
	count = shape[last]
	stride = [3]int64{int64(st[0][last]), int64(st[1][last]), int64(st[2][last])}
	outer := shape[:last]
	n := ir.NumElements(outer)
	idx := make([]int, len(outer))
	for c := int64(0); c < n; c++ {
		var o [3]int64
		for d, i := range idx {
			for k := 0; k < 3; k++ {
				o[k] += int64(i * st[k][d])
			}
		}
		offs = append(offs, o)
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < outer[d] {
				break
			}
			idx[d] = 0
		}
	}
	return offs, count, stride
}

func (l *lowerer) matmul(n *ir.Node) error {
	a, err := l.in(n, 0)
	if err != nil {
		return err
	}
	b, err := l.in(n, 1)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	as, _ := l.shape(a)
	bs, _ := l.shape(b)
	if l.dtype(a) != ir.Float || l.dtype(b) != ir.Float {
		return n.Errorf("MatMul on %v × %v is not supported on the gpu backend", l.dtype(a), l.dtype(b))
	}
	if len(as) == 0 || len(bs) == 0 {
		return n.Errorf("MatMul of a scalar")
	}
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	m, k, k2, nn := as[len(as)-2], as[len(as)-1], bs[len(bs)-2], bs[len(bs)-1]
	if k != k2 {
		return n.Errorf("inner dims %d and %d differ", k, k2)
	}
	aB, bB := as[:len(as)-2], bs[:len(bs)-2]
	outB, err := ops.BroadcastShapes(aB, bB)
	if err != nil {
		return n.Errorf("%w", err)
	}
	total := ir.NumElements(outB) * int64(m) * int64(nn)
	if total == 0 {
		return nil
	}
	if k == 0 {
		l.emit(kernel("fill_4", "PFill", total, fillParams(total, out, 0)))
		return nil
	}
	sa, _ := ops.BroadcastStrides(outB, aB)
	sb, _ := ops.BroadcastStrides(outB, bB)
	sc := contiguous(outB)
	for d := range outB {
		sa[d] *= m * k
		sb[d] *= k * nn
		sc[d] *= m * nn
	}
	offs, count, stride := matmulBatches(outB, sa, sb, sc)
	mm := m
	if len(offs) == 1 && count > 1 && stride[1] == 0 && stride[0] == int64(m*k) && stride[2] == int64(m*nn) {
		// A shared right operand (x·W): one tall product.
		mm, count, stride = m*count, 1, [3]int64{}
	}
	for _, o := range offs {
		g := newGemm(false, false, mm, nn, k, 1, 0)
		g.a, g.b, g.c = a, b, out
		g.aOff, g.bOff, g.cOff = o[0]*4, o[1]*4, o[2]*4
		g.strideA, g.strideB, g.strideC, g.batch = stride[0], stride[1], stride[2], count
		l.emitGemm(g)
	}
	return nil
}

func (l *lowerer) gemm(n *ir.Node) error {
	a, err := l.in(n, 0)
	if err != nil {
		return err
	}
	b, err := l.in(n, 1)
	if err != nil {
		return err
	}
	alpha, err := n.AttrFloat("alpha", 1)
	if err != nil {
		return n.Errorf("%w", err)
	}
	beta, err := n.AttrFloat("beta", 1)
	if err != nil {
		return n.Errorf("%w", err)
	}
	ta, err := n.AttrInt("transA", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	tb, err := n.AttrInt("transB", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	as, _ := l.shape(a)
	bs, _ := l.shape(b)
	if len(as) != 2 || len(bs) != 2 {
		return n.Errorf("Gemm needs 2-D operands, got %v and %v", as, bs)
	}
	m, k := as[0], as[1]
	if ta != 0 {
		m, k = k, m
	}
	k2, nn := bs[0], bs[1]
	if tb != 0 {
		k2, nn = nn, k2
	}
	if k != k2 {
		return n.Errorf("inner dims %d and %d differ", k, k2)
	}
	c := ""
	if n.Input(2) != "" && beta != 0 {
		if c, err = l.in(n, 2); err != nil {
			return err
		}
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	if m*nn == 0 {
		return nil
	}
	if c == "" {
		beta = 0
	} else {
		cs, _ := l.shape(c)
		sin, err := ops.BroadcastStrides([]int{m, nn}, cs)
		if err != nil {
			return n.Errorf("C: %w", err)
		}
		if err := l.copyKernel(ir.Float, out, 0, c, 0, []int{m, nn}, sin, []int{nn, 1}); err != nil {
			return err
		}
	}
	g := newGemm(ta != 0, tb != 0, m, nn, k, alpha, beta)
	g.a, g.b, g.c = a, b, out
	l.emitGemm(g)
	return nil
}
