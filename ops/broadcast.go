package ops

import (
	"fmt"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// BroadcastStrides returns the strides with which an input of shape in is
// read when broadcast (numpy rules) to the shape out: one stride per output
// dim, the input's row-major stride where it has that dim, and 0 where the
// input is broadcast (a missing leading dim or a dim of size 1). It fails
// when in does not broadcast to out.
func BroadcastStrides(out, in []int) ([]int, error) {
	if len(in) > len(out) {
		return nil, fmt.Errorf("shape %v has a higher rank than the broadcast shape %v", in, out)
	}
	st := make([]int, len(out))
	off := len(out) - len(in)
	s := 1
	for i := len(in) - 1; i >= 0; i-- {
		d := in[i]
		switch {
		case d == 1:
			st[off+i] = 0
		case d == out[off+i]:
			st[off+i] = s
		default:
			return nil, fmt.Errorf("shape %v does not broadcast to %v", in, out)
		}
		s *= d
	}
	return st, nil
}

// SameShape reports whether two concrete shapes are equal.
func SameShape(a, b []int) bool { return slices.Equal(a, b) }

// Broadcaster walks an output shape in contiguous rows, giving for each row
// the offset of its first element in every broadcast input. Dims are
// collapsed first (size-1 dims dropped, adjacent dims merged where every
// input is contiguous or broadcast across both), so rows are as long as the
// inputs' layouts allow. Within a row, input k advances by InnerStride(k),
// which is 0 (broadcast) or 1 (contiguous).
type Broadcaster struct {
	dims    []int   // collapsed output dims, outermost first; never empty
	strides [][]int // strides[k][d]: input k's stride along collapsed dim d
	total   int
}

// NewBroadcaster plans the iteration of out (which must be the broadcast
// of the input shapes, or a shape they all broadcast to).
func NewBroadcaster(out []int, ins ...[]int) (*Broadcaster, error) {
	n := ir.NumElements(out)
	if n < 0 {
		return nil, fmt.Errorf("invalid broadcast shape %v", out)
	}
	full := make([][]int, len(ins))
	for k, s := range ins {
		st, err := BroadcastStrides(out, s)
		if err != nil {
			return nil, err
		}
		full[k] = st
	}
	b := &Broadcaster{strides: make([][]int, len(ins)), total: int(n)}
	// Keep dims of size > 1, merging each into the previous kept dim when
	// every input's strides allow it.
	for d, size := range out {
		if size == 1 {
			continue
		}
		last := len(b.dims) - 1
		if last >= 0 {
			merge := true
			for k := range ins {
				if b.strides[k][last] != full[k][d]*size {
					merge = false
					break
				}
			}
			if merge {
				b.dims[last] *= size
				for k := range ins {
					b.strides[k][last] = full[k][d]
				}
				continue
			}
		}
		b.dims = append(b.dims, size)
		for k := range ins {
			b.strides[k] = append(b.strides[k], full[k][d])
		}
	}
	if len(b.dims) == 0 { // every dim is 1: a single element
		b.dims = []int{1}
		for k := range ins {
			b.strides[k] = []int{0}
		}
	}
	return b, nil
}

// Row is the length of each row ForEachRow visits.
func (b *Broadcaster) Row() int { return b.dims[len(b.dims)-1] }

// InnerStride is input k's step between consecutive elements of a row: 0 or 1.
func (b *Broadcaster) InnerStride(k int) int { return b.strides[k][len(b.dims)-1] }

// ForEachRow calls f for each row of the output in order, with the row's
// output offset and each input's offset of the row's first element. f must
// not modify or keep inOffs.
func (b *Broadcaster) ForEachRow(f func(outOff int, inOffs []int)) {
	b.ForEachSpan(0, b.total, func(outOff, _ int, inOffs []int) { f(outOff, inOffs) })
}

// ForEachSpan calls f, in order, for each piece of a row within the output
// elements [lo, hi): the piece's output offset, its length and each input's
// offset of its first element. Only the first and last pieces can be
// shorter than a row. f must not modify or keep inOffs. Nothing is
// allocated per piece.
func (b *Broadcaster) ForEachSpan(lo, hi int, f func(outOff, n int, inOffs []int)) {
	hi = min(hi, b.total)
	if lo >= hi {
		return
	}
	row := b.Row()
	outer := len(b.dims) - 1
	idx := make([]int, outer)
	offs := make([]int, len(b.strides)) // each input's offset of the current row
	r := lo / row
	for d := outer - 1; d >= 0; d-- {
		idx[d] = r % b.dims[d]
		r /= b.dims[d]
		for k := range offs {
			offs[k] += idx[d] * b.strides[k][d]
		}
	}
	out := lo
	if e := lo % row; e > 0 { // a first piece that starts within its row
		cur := make([]int, len(offs))
		for k := range cur {
			cur[k] = offs[k] + e*b.strides[k][outer]
		}
		n := min(row-e, hi-out)
		f(out, n, cur)
		out += n
		b.nextRow(idx, offs)
	}
	for ; out < hi; out += row {
		f(out, min(row, hi-out), offs)
		b.nextRow(idx, offs)
	}
}

// nextRow moves the row index idx (over the outer dims) and the inputs'
// offsets offs of that row on to the next row.
func (b *Broadcaster) nextRow(idx, offs []int) {
	for d := len(idx) - 1; d >= 0; d-- {
		idx[d]++
		for k := range offs {
			offs[k] += b.strides[k][d]
		}
		if idx[d] < b.dims[d] {
			return
		}
		idx[d] = 0
		for k := range offs {
			offs[k] -= b.strides[k][d] * b.dims[d]
		}
	}
}

// binLoops holds the three inner loops of a binary elementwise kernel:
// vector-vector, vector-scalar and scalar-vector. The output may alias a
// (the loops read element i before writing element i).
type binLoops[A, B, O any] struct {
	vv func(o []O, a []A, b []B)
	vs func(o []O, a []A, b B)
	sv func(o []O, a A, b []B)
	// short, when set, computes the same results for runs (rows, or whole
	// same-shape or scalar outputs) shorter than shortRun, where the loops
	// above cost more per call than they save (assembly kernels).
	short    *binLoops[A, B, O]
	shortRun int
}

// elemLoops builds binLoops from a per-element function (one indirect
// call per element; hot ops write their loops out instead).
func elemLoops[A, B, O any](f func(A, B) O) binLoops[A, B, O] {
	return binLoops[A, B, O]{
		vv: func(o []O, a []A, b []B) {
			b = b[:len(o)]
			a = a[:len(o)]
			for i := range o {
				o[i] = f(a[i], b[i])
			}
		},
		vs: func(o []O, a []A, b B) {
			a = a[:len(o)]
			for i := range o {
				o[i] = f(a[i], b)
			}
		},
		sv: func(o []O, a A, b []B) {
			b = b[:len(o)]
			for i := range o {
				o[i] = f(a, b[i])
			}
		},
	}
}

// applyBinary computes o = op(a, b) with numpy broadcasting, where oShape
// is the broadcast of aShape and bShape (already validated) and the slices
// hold exactly as many elements as their shapes. Same-shape and scalar
// operands take single-loop fast paths; anything else goes row by row.
func applyBinary[A, B, O any](o []O, oShape []int, a []A, aShape []int, b []B, bShape []int, l binLoops[A, B, O]) error {
	if l.short == nil { // the common case, inlined: tiny tensors (shape arithmetic) are frequent
		switch {
		case len(o) == 0:
			return nil
		case len(a) == len(o) && len(b) == len(o):
			l.vv(o, a, b)
			return nil
		case len(a) == len(o) && len(b) == 1:
			l.vs(o, a, b[0])
			return nil
		case len(a) == 1 && len(b) == len(o):
			l.sv(o, a[0], b)
			return nil
		}
	}
	s := binarySpans[A, B, O]{o: o, a: a, b: b}
	l, err := s.plan(oShape, aShape, bShape, l)
	if err != nil {
		return err
	}
	s.run(l, 0, len(o))
	return nil
}

// binaryParallelMin is the fewest output elements of each thread's share
// in applyBinaryThreads: below twice that, one thread does all the work.
// BenchmarkArith's same-shape float32 Muls on the AVX-512 kernels, one
// thread → two, 2-core AMD EPYC, 2026-11-24 (medians of 3): [16384] 1.00 µs
// either way; [32768] 1.65 → 1.50 µs; [65536] 3.71 → 2.43 µs.
const binaryParallelMin = 1 << 14

// applyBinaryThreads is applyBinary on up to threads threads: an output of
// at least 2·binaryParallelMin elements is split into contiguous runs of
// whole 16-element vectors, one a thread. Each run gets the same loops
// (only the run boundaries differ), so the result does not depend on the
// number of threads. The loops escape to the heap: callers pass loops
// built once (a table), not closures made per call.
func applyBinaryThreads[A, B, O any](threads int, o []O, oShape []int, a []A, aShape []int, b []B, bShape []int, l binLoops[A, B, O]) error {
	s := binarySpans[A, B, O]{o: o, a: a, b: b}
	l, err := s.plan(oShape, aShape, bShape, l)
	if err != nil {
		return err
	}
	if threads <= 1 || len(o) < 2*binaryParallelMin {
		s.run(l, 0, len(o))
		return nil
	}
	const vec = 16
	ps, pl := s, l // only a parallel call's copies go to the heap
	computeParallel(threads, (len(o)+vec-1)/vec, binaryParallelMin/vec, func(lo, hi int) {
		ps.run(pl, lo*vec, min(hi*vec, len(o)))
	})
	return nil
}

// plan finds the operand form of s.o = op(s.a, s.b) and the Broadcaster
// where one is needed, and returns the loops to run: l, or l.short where
// the runs are shorter than l.shortRun. The loops stay apart from
// binarySpans: escape analysis does not tell a struct's fields apart, and
// the slices go to the loops, so loops inside it would go to the heap on
// every call.
func (s *binarySpans[A, B, O]) plan(oShape, aShape, bShape []int, l binLoops[A, B, O]) (binLoops[A, B, O], error) {
	o, a, b := s.o, s.a, s.b
	if len(o) == 0 {
		return l, nil
	}
	// An input holding as many elements as the output has the output's
	// layout: broadcasting only ever grows dims.
	run := len(o)
	switch {
	case len(a) == len(o) && len(b) == len(o):
		s.form = formVV
	case len(a) == len(o) && len(b) == 1:
		s.form = formVS
	case len(a) == 1 && len(b) == len(o):
		s.form = formSV
	case len(a) == len(o) && rowScalars(oShape, bShape):
		s.form, s.row = formVRowS, oShape[len(oShape)-1]
		run = s.row
	case len(b) == len(o) && rowScalars(oShape, aShape):
		s.form, s.row = formRowSV, oShape[len(oShape)-1]
		run = s.row
	default:
		br, err := NewBroadcaster(oShape, aShape, bShape)
		if err != nil {
			return l, err
		}
		s.br, s.sa, s.sb = br, br.InnerStride(0), br.InnerStride(1)
		run = br.Row()
	}
	if l.short != nil && run < l.shortRun {
		return *l.short, nil
	}
	return l, nil
}

// Operand forms of binarySpans without a Broadcaster.
const (
	formRows  = iota // row by row through the Broadcaster
	formVV           // a and b have the output's layout
	formVS           // a has it, b is one element
	formSV           // a is one element, b has the output's layout
	formVRowS        // a has it, b one element per row of the output (x / ‖x‖)
	formRowSV        // a one element per row of the output, b has its layout
)

// rowScalars reports whether an input of shape in holds one element per
// row (last dim) of an output of shape out, in the output's row order:
// in is out with its last dim 1 (leading 1s may be dropped), and the rows
// are more than one element long.
func rowScalars(out, in []int) bool {
	r := len(out)
	if r == 0 || out[r-1] < 2 || len(in) == 0 || len(in) > r || in[len(in)-1] != 1 {
		return false
	}
	lead := r - len(in)
	for i, d := range out[:r-1] {
		switch {
		case i < lead:
			if d != 1 {
				return false
			}
		case in[i-lead] != d:
			return false
		}
	}
	return true
}

// binarySpans computes a broadcasting binary op on any contiguous range of
// the output's elements.
type binarySpans[A, B, O any] struct {
	o      []O
	a      []A
	b      []B
	form   int
	br     *Broadcaster // formRows
	sa, sb int          // formRows: the inputs' inner strides
	row    int          // formVRowS, formRowSV: the output's row length
}

// run computes the output elements [lo, hi) with the loops l.
func (s *binarySpans[A, B, O]) run(l binLoops[A, B, O], lo, hi int) {
	o, a, b := s.o, s.a, s.b
	if lo >= hi {
		return
	}
	switch s.form {
	case formVV:
		l.vv(o[lo:hi], a[lo:hi], b[lo:hi])
		return
	case formVS:
		l.vs(o[lo:hi], a[lo:hi], b[0])
		return
	case formSV:
		l.sv(o[lo:hi], a[0], b[lo:hi])
		return
	case formVRowS, formRowSV:
		for off := lo; off < hi; {
			r := off / s.row
			end := min(hi, (r+1)*s.row)
			if s.form == formVRowS {
				l.vs(o[off:end], a[off:end], b[r])
			} else {
				l.sv(o[off:end], a[r], b[off:end])
			}
			off = end
		}
		return
	}
	sa, sb := s.sa, s.sb
	s.br.ForEachSpan(lo, hi, func(off, n int, offs []int) {
		or := o[off : off+n]
		ia, ib := offs[0], offs[1]
		switch {
		case sa == 1 && sb == 1:
			l.vv(or, a[ia:ia+n], b[ib:ib+n])
		case sa == 1:
			l.vs(or, a[ia:ia+n], b[ib])
		case sb == 1:
			l.sv(or, a[ia], b[ib:ib+n])
		default:
			l.vs(or[:1], a[ia:ia+1], b[ib])
			for i := 1; i < n; i++ {
				or[i] = or[0]
			}
		}
	})
}

// BroadcastTo returns t broadcast (numpy rules) to shape as a new dense
// tensor. It is the kernel of Expand-like ops.
func BroadcastTo(t *ir.Tensor, shape []int) (*ir.Tensor, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if _, err := BroadcastStrides(shape, t.Shape); err != nil {
		return nil, err
	}
	out, err := newOutput(nil, t.DType, shape)
	if err != nil {
		return nil, err
	}
	switch src := t.Data.(type) {
	case []float32:
		err = broadcastCopy(out.Data.([]float32), shape, src, t.Shape)
	case []float64:
		err = broadcastCopy(out.Data.([]float64), shape, src, t.Shape)
	case []int64:
		err = broadcastCopy(out.Data.([]int64), shape, src, t.Shape)
	case []int32:
		err = broadcastCopy(out.Data.([]int32), shape, src, t.Shape)
	case []int16:
		err = broadcastCopy(out.Data.([]int16), shape, src, t.Shape)
	case []int8:
		err = broadcastCopy(out.Data.([]int8), shape, src, t.Shape)
	case []uint8:
		err = broadcastCopy(out.Data.([]uint8), shape, src, t.Shape)
	case []uint16:
		err = broadcastCopy(out.Data.([]uint16), shape, src, t.Shape)
	case []uint32:
		err = broadcastCopy(out.Data.([]uint32), shape, src, t.Shape)
	case []uint64:
		err = broadcastCopy(out.Data.([]uint64), shape, src, t.Shape)
	case []bool:
		err = broadcastCopy(out.Data.([]bool), shape, src, t.Shape)
	case []string:
		err = broadcastCopy(out.Data.([]string), shape, src, t.Shape)
	default:
		return nil, fmt.Errorf("cannot broadcast a %v tensor", t.DType)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// broadcastCopy fills o (of shape oShape) with src broadcast to it.
func broadcastCopy[T any](o []T, oShape []int, src []T, sShape []int) error {
	if len(o) == 0 {
		return nil
	}
	if len(src) == len(o) {
		copy(o, src)
		return nil
	}
	if len(src) == 1 {
		v := src[0]
		for i := range o {
			o[i] = v
		}
		return nil
	}
	br, err := NewBroadcaster(oShape, sShape)
	if err != nil {
		return err
	}
	row := br.Row()
	contiguous := br.InnerStride(0) == 1
	br.ForEachRow(func(off int, offs []int) {
		if contiguous {
			copy(o[off:off+row], src[offs[0]:offs[0]+row])
			return
		}
		v := src[offs[0]]
		or := o[off : off+row]
		for i := range or {
			or[i] = v
		}
	})
	return nil
}
