package ops

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/attnrun/attnrun/ir"
)

// View is a strided view of a tensor's backing data: element
// (i[0], ..., i[r-1]) of the view is element Offset + Σ i[k]·Strides[k] of
// the data. Graph rewrites use views to let a kernel read (or write) the
// result of Reshape/Transpose/Split/Squeeze chains in place instead of
// materializing them; fused ops take them as int attributes (Ints, ParseView).
type View struct {
	Offset  int
	Shape   []int
	Strides []int
}

// Contiguous returns the row-major view of a tensor of the given shape.
func Contiguous(shape []int) View {
	return View{Shape: append([]int{}, shape...), Strides: contiguousStrides(shape)}
}

// Ints encodes the view as an int attribute: offset, then the shape, then
// the strides.
func (v View) Ints() []int64 {
	out := make([]int64, 0, 1+2*len(v.Shape))
	out = append(out, int64(v.Offset))
	for _, d := range v.Shape {
		out = append(out, int64(d))
	}
	for _, s := range v.Strides {
		out = append(out, int64(s))
	}
	return out
}

// maxViewRank bounds the rank of a decoded view.
const maxViewRank = 16

// viewAttr parses node n's view attribute name (View.Ints), nil when n
// has none, with minRank the least rank the op takes (its error says so).
func viewAttr(n *ir.Node, name string, minRank int) (*View, error) {
	ints, ok, err := n.AttrInts(name)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if !ok {
		return nil, nil
	}
	v, err := ParseView(ints)
	if err != nil {
		return nil, n.Errorf("attribute %s: %w", name, err)
	}
	if len(v.Shape) < minRank {
		return nil, n.Errorf("attribute %s has rank %d, %s needs rank ≥ %d", name, len(v.Shape), n.OpType, minRank)
	}
	return &v, nil
}

// ParseView decodes View.Ints. Every dim and stride must be ≥ 0 and the
// view must address fewer than 2^62 elements.
func ParseView(ints []int64) (View, error) {
	if len(ints) < 1 || len(ints)%2 != 1 || (len(ints)-1)/2 > maxViewRank {
		return View{}, fmt.Errorf("a view has 1 + 2·rank ints (rank ≤ %d), got %d", maxViewRank, len(ints))
	}
	r := (len(ints) - 1) / 2
	v := View{Shape: make([]int, r), Strides: make([]int, r)}
	if ints[0] < 0 || ints[0] > math.MaxInt32*int64(math.MaxInt32) {
		return View{}, fmt.Errorf("view offset %d is out of range", ints[0])
	}
	v.Offset = int(ints[0])
	for k := 0; k < r; k++ {
		d, s := ints[1+k], ints[1+r+k]
		if d < 0 || s < 0 || d > math.MaxInt32 || s > math.MaxInt32*int64(math.MaxInt32) {
			return View{}, fmt.Errorf("view dim %d has size %d and stride %d; both must be ≥ 0 and in range", k, d, s)
		}
		v.Shape[k], v.Strides[k] = int(d), int(s)
	}
	if _, err := checkedElements(v.Shape); err != nil {
		return View{}, err
	}
	return v, nil
}

// Span returns one past the largest element index the view addresses (its
// Offset when the view is empty), or math.MaxInt when that index does not
// fit in an int (a view decoded from a hostile attribute may declare
// strides whose products overflow) or a dim or stride is negative.
func (v View) Span() int {
	end := v.Offset
	for _, d := range v.Shape {
		if d == 0 {
			return v.Offset
		}
	}
	for k, d := range v.Shape {
		s := v.Strides[k]
		if d < 0 || s < 0 || end < 0 {
			return math.MaxInt
		}
		hi, lo := bits.Mul64(uint64(d-1), uint64(s))
		if hi != 0 || lo > uint64(math.MaxInt-1-end) {
			return math.MaxInt
		}
		end += int(lo)
	}
	return end + 1
}

// Fits reports whether the view addresses only elements of a tensor of n
// elements. It is exact whatever the view's numbers: no overflow makes a
// view that reaches past n fit.
func (v View) Fits(n int) bool {
	for _, d := range v.Shape {
		if d == 0 {
			return true
		}
	}
	return v.Offset >= 0 && v.Span() <= n
}

// Bijective reports whether the view addresses each of the first n
// elements of the data exactly once (so a kernel writing through it
// writes every element of an n-element output and none twice).
func (v View) Bijective(n int) bool {
	if ShapeElems(v.Shape) != n {
		return false
	}
	if n == 0 {
		return true
	}
	if v.Offset != 0 {
		return false
	}
	// Sorted by stride, each dim (size > 1) must step exactly over the
	// block the previous ones cover: that makes the view a permutation of
	// the row-major layout.
	type ds struct{ d, s int }
	var dims []ds
	for k, d := range v.Shape {
		if d > 1 {
			dims = append(dims, ds{d, v.Strides[k]})
		}
	}
	for i := 1; i < len(dims); i++ {
		for j := i; j > 0 && dims[j].s < dims[j-1].s; j-- {
			dims[j], dims[j-1] = dims[j-1], dims[j]
		}
	}
	block := 1
	for _, x := range dims {
		if x.s != block {
			return false
		}
		block *= x.d
	}
	return block == n
}

// ShapeElems is the element count of a concrete shape.
func ShapeElems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Transpose returns the view with its axes permuted: axis i of the result
// is axis perm[i] of v. perm must be a permutation of v's axes.
func (v View) Transpose(perm []int) (View, bool) {
	if len(perm) != len(v.Shape) {
		return View{}, false
	}
	out := View{Offset: v.Offset, Shape: make([]int, len(perm)), Strides: make([]int, len(perm))}
	seen := make([]bool, len(perm))
	for i, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			return View{}, false
		}
		seen[p] = true
		out.Shape[i], out.Strides[i] = v.Shape[p], v.Strides[p]
	}
	return out, true
}

// Reshape returns v reshaped to shape without copying, when the strides
// allow it (numpy's rule: each run of output dims must map onto a run of
// input dims that is contiguous within itself). ok is false otherwise or
// when the element counts differ.
func (v View) Reshape(shape []int) (View, bool) {
	n := ShapeElems(v.Shape)
	if ShapeElems(shape) != n {
		return View{}, false
	}
	out := View{Offset: v.Offset, Shape: append([]int{}, shape...), Strides: make([]int, len(shape))}
	if n == 0 {
		copy(out.Strides, contiguousStrides(shape))
		return out, true
	}
	// Drop size-1 input dims; they carry no layout.
	var id, is []int
	for k, d := range v.Shape {
		if d != 1 {
			id, is = append(id, d), append(is, v.Strides[k])
		}
	}
	oi, oj := 0, 0 // current input and output dim
	for oj < len(shape) || oi < len(id) {
		if oj < len(shape) && shape[oj] == 1 {
			out.Strides[oj] = 0
			oj++
			continue
		}
		if oi >= len(id) || oj >= len(shape) {
			return View{}, false
		}
		// Grow a group of input dims [i0, oi) and output dims [j0, oj)
		// with equal products.
		i0, j0 := oi, oj
		np, op := id[oi], shape[oj]
		oi, oj = oi+1, oj+1
		for np != op {
			if np < op {
				if oi >= len(id) {
					return View{}, false
				}
				np *= id[oi]
				oi++
			} else {
				for oj < len(shape) && shape[oj] == 1 {
					out.Strides[oj] = 0
					oj++
				}
				if oj >= len(shape) {
					return View{}, false
				}
				op *= shape[oj]
				oj++
			}
		}
		// The input group must be contiguous within itself.
		for k := i0; k < oi-1; k++ {
			if is[k] != id[k+1]*is[k+1] {
				return View{}, false
			}
		}
		st := is[oi-1]
		for k := oj - 1; k >= j0; k-- {
			out.Strides[k] = st
			if shape[k] != 1 {
				st *= shape[k]
			}
		}
	}
	return out, true
}

// Squeeze drops the given axes, each of size 1.
func (v View) Squeeze(axes []int) (View, bool) {
	drop := make([]bool, len(v.Shape))
	for _, a := range axes {
		if a < 0 || a >= len(v.Shape) || v.Shape[a] != 1 {
			return View{}, false
		}
		drop[a] = true
	}
	out := View{Offset: v.Offset}
	for k, d := range v.Shape {
		if !drop[k] {
			out.Shape, out.Strides = append(out.Shape, d), append(out.Strides, v.Strides[k])
		}
	}
	return out, true
}

// Slice restricts axis to [start, start+size).
func (v View) Slice(axis, start, size int) (View, bool) {
	if axis < 0 || axis >= len(v.Shape) || start < 0 || size < 0 || start+size > v.Shape[axis] {
		return View{}, false
	}
	out := View{Offset: v.Offset + start*v.Strides[axis], Shape: append([]int{}, v.Shape...), Strides: append([]int{}, v.Strides...)}
	out.Shape[axis] = size
	return out, true
}

// contiguousBlock reports whether the view's elements are one run of
// consecutive elements of the data in row-major order.
func (v View) contiguousBlock() bool {
	want := 1
	for k := len(v.Shape) - 1; k >= 0; k-- {
		if v.Shape[k] != 1 && v.Strides[k] != want {
			return false
		}
		want *= v.Shape[k]
	}
	return true
}

// odometer walks the data offsets of a view's elements in row-major
// order.
type odometer struct {
	v   View
	idx []int
	off int
}

// newOdometer starts at the view's element number start (in row-major
// order).
func newOdometer(v View, start int) *odometer {
	o := &odometer{v: v, idx: make([]int, len(v.Shape)), off: v.Offset}
	for k := len(v.Shape) - 1; k >= 0; k-- {
		if d := v.Shape[k]; d > 0 {
			o.idx[k] = start % d
			start /= d
			o.off += o.idx[k] * v.Strides[k]
		}
	}
	return o
}

// next returns the current offset and steps to the next element.
func (o *odometer) next() int {
	cur := o.off
	for k := len(o.idx) - 1; k >= 0; k-- {
		o.idx[k]++
		o.off += o.v.Strides[k]
		if o.idx[k] < o.v.Shape[k] {
			break
		}
		o.off -= o.idx[k] * o.v.Strides[k]
		o.idx[k] = 0
	}
	return cur
}
