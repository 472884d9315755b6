package ops

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/attnrun/attnrun/ir"
)

// MaxOutputElements bounds the element count of outputs whose size comes from
// tensor contents (Expand, Tile, ConstantOfShape, Range): a larger request is
// refused before anything is allocated.
const MaxOutputElements = 1 << 31

// maxSymLen bounds the length of an integer Const that SymOf turns into a Sym
// vector: shape vectors are short.
const maxSymLen = 64

// SymLiteral makes the element of a Sym vector that stands for the integer v.
// A non-negative v is a known Dim. A negative v (Reshape's -1) cannot be a
// Dim value, since Dim{Value: -1} means "unknown", so it is written as a Param
// holding its decimal form ("-1"); dim_param names never start with '-'.
func SymLiteral(v int64) ir.Dim {
	if v >= 0 {
		return ir.Dim{Value: v}
	}
	return ir.Dim{Param: strconv.FormatInt(v, 10)}
}

// SymInt returns the integer an element of a Sym vector stands for, when it
// is a literal (see SymLiteral) rather than a symbol or unknown.
func SymInt(d ir.Dim) (int64, bool) {
	if d.Known() {
		return d.Value, true
	}
	if strings.HasPrefix(d.Param, "-") {
		if v, err := strconv.ParseInt(d.Param, 10, 64); err == nil {
			return v, true
		}
	}
	return 0, false
}

// SymSum is the symbolic sum of dims: a known size when every term is
// known, else a symbol naming the sum ("past + seq", the length of a KV
// cache after a Concat), its terms sorted and its literals added up so
// that one sum has one name; unknown when any term is. Sums of sums
// flatten.
func SymSum(dims ...ir.Dim) ir.Dim {
	var lit int64
	var names []string
	for _, d := range dims {
		switch {
		case d.Known():
			lit += d.Value
		case isSymbol(d):
			for _, term := range strings.Split(d.Param, " + ") {
				if v, err := strconv.ParseInt(term, 10, 64); err == nil && v >= 0 {
					lit += v
				} else {
					names = append(names, term)
				}
			}
		default:
			return ir.UnknownDim
		}
	}
	if len(names) == 0 {
		return ir.Dim{Value: lit}
	}
	sort.Strings(names)
	if lit != 0 {
		names = append(names, strconv.FormatInt(lit, 10))
	}
	return ir.Dim{Param: strings.Join(names, " + ")}
}

// isSymbol reports whether d is a named symbolic dim (not a literal, not unknown).
func isSymbol(d ir.Dim) bool {
	_, lit := SymInt(d)
	return d.Param != "" && !lit
}

// SymOf returns the elements of a scalar or 1-D integer value as a Sym
// vector: its Sym when set, else its Const converted with SymLiteral. ok is
// false when neither is known.
func SymOf(v Value) (ir.Shape, bool) {
	if v.Sym != nil {
		return v.Sym, true
	}
	c := v.Const
	if c == nil || c.Rank() > 1 || !c.DType.IsInt() || c.Len() > maxSymLen {
		return nil, false
	}
	vals, err := c.AsInt64s()
	if err != nil {
		return nil, false
	}
	s := make(ir.Shape, len(vals))
	for i, x := range vals {
		s[i] = SymLiteral(x)
	}
	return s, true
}

// symValue makes the Value of an integer tensor whose elements are sym: a
// 1-D tensor of len(sym) elements, or a scalar when scalar is set (sym then
// has one element). When every element is a literal and dt is int64 or
// int32, Const is filled in too.
func symValue(dt ir.DType, sym ir.Shape, scalar bool) Value {
	v := Value{Sym: append(ir.Shape{}, sym...)}
	var shape []int
	if scalar {
		v.Type = ir.TypeInfo{DType: dt, Shape: ir.Shape{}, RankKnown: true}
	} else {
		v.Type = Known(dt, []int{len(sym)})
		shape = []int{len(sym)}
	}
	vals := make([]int64, len(sym))
	for i, d := range sym {
		x, ok := SymInt(d)
		if !ok {
			return v
		}
		vals[i] = x
	}
	switch dt {
	case ir.Int64:
		v.Const = ir.FromSlice(shape, vals)
	case ir.Int32:
		s := make([]int32, len(vals))
		for i, x := range vals {
			if x < math.MinInt32 || x > math.MaxInt32 {
				return v
			}
			s[i] = int32(x)
		}
		v.Const = ir.FromSlice(shape, s)
	}
	return v
}

// inVal returns in[i], or the zero Value (an omitted input) when absent.
func inVal(in []Value, i int) Value {
	if i < len(in) {
		return in[i]
	}
	return Value{}
}

// inTensor returns in[i], or nil when absent.
func inTensor(in []*ir.Tensor, i int) *ir.Tensor {
	if i < len(in) {
		return in[i]
	}
	return nil
}

// checkRunInputs verifies that the first required inputs are present and that
// every present input is well formed.
func checkRunInputs(n *ir.Node, in []*ir.Tensor, required int) error {
	if len(in) < required {
		return n.Errorf("needs %d inputs, got %d", required, len(in))
	}
	for i, t := range in {
		if t == nil {
			if i < required {
				return n.Errorf("input %d is missing", i)
			}
			continue
		}
		if !t.DType.Known() && t.DType != ir.BFloat16 {
			return n.Errorf("input %d has unsupported dtype %v", i, t.DType)
		}
		if err := t.Check(); err != nil {
			return n.Errorf("input %d: %w", i, err)
		}
	}
	return nil
}

// checkInferInputs verifies that the first required inputs are present.
func checkInferInputs(n *ir.Node, in []Value, required int) error {
	if len(in) < required {
		return n.Errorf("needs %d inputs, got %d", required, len(in))
	}
	for i := 0; i < required; i++ {
		if !in[i].Present() {
			return n.Errorf("input %d is missing", i)
		}
	}
	return nil
}

// intVector reads a scalar or 1-D int32/int64 tensor (indices, shapes, axes).
func intVector(t *ir.Tensor, what string) ([]int64, error) {
	if t.DType != ir.Int64 && t.DType != ir.Int32 {
		return nil, fmt.Errorf("%s must be int32 or int64, got %v", what, t.DType)
	}
	if t.Rank() > 1 {
		return nil, fmt.Errorf("%s must be 1-D, got shape %v", what, t.Shape)
	}
	return t.AsInt64s()
}

// checkIntInput verifies at inference time that an index-like input is int32
// or int64 and at most 1-D.
func checkIntInput(v Value, what string) error {
	if !v.Present() {
		return nil
	}
	if v.Type.DType != ir.Int64 && v.Type.DType != ir.Int32 {
		return fmt.Errorf("%s must be int32 or int64, got %v", what, v.Type.DType)
	}
	if v.Type.RankKnown && len(v.Type.Shape) > 1 {
		return fmt.Errorf("%s must be 1-D, got shape %v", what, v.Type.Shape)
	}
	return nil
}

// constInts returns the elements of a Const index-like input.
func constInts(v Value, what string) ([]int64, bool, error) {
	if v.Const == nil {
		return nil, false, nil
	}
	vals, err := intVector(v.Const, what)
	return vals, err == nil, err
}

// vectorLen returns the length of a 1-D value when its type says so.
func vectorLen(v Value) (int, bool) {
	if !v.Type.RankKnown {
		return 0, false
	}
	if len(v.Type.Shape) == 0 {
		return 1, true
	}
	if len(v.Type.Shape) == 1 && v.Type.Shape[0].Known() {
		return int(v.Type.Shape[0].Value), true
	}
	return 0, false
}

// checkedCount multiplies dims, failing on negative dims and on products
// beyond MaxOutputElements.
func checkedCount(shape []int64) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
	}
	for _, d := range shape {
		if d == 0 {
			return 0, nil
		}
	}
	for _, d := range shape {
		if n > MaxOutputElements/d {
			return 0, fmt.Errorf("output shape %v has more than %d elements", shape, int64(MaxOutputElements))
		}
		n *= d
	}
	return int(n), nil
}

func intsOf64(s []int64) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[i] = int(v)
	}
	return out
}

func int64sOf(s []int) []int64 {
	out := make([]int64, len(s))
	for i, v := range s {
		out[i] = int64(v)
	}
	return out
}

// shapeProd multiplies sizes (1 for none).
func shapeProd(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// normAxes normalizes a list of axes against rank and rejects duplicates.
// allowNeg false rejects negative axes (opsets before 11).
func normAxes(axes []int64, rank int, allowNeg bool) ([]int, error) {
	out := make([]int, len(axes))
	seen := make(map[int]bool, len(axes))
	for i, a := range axes {
		if a < 0 && !allowNeg {
			return nil, fmt.Errorf("negative axis %d needs opset 11 or later", a)
		}
		ax, err := NormAxis(a, rank)
		if err != nil {
			return nil, err
		}
		if seen[ax] {
			return nil, fmt.Errorf("axis %d appears twice in %v", a, axes)
		}
		seen[ax] = true
		out[i] = ax
	}
	return out, nil
}

// symProd is a product of dims: a constant times a multiset of symbols, or
// unknown.
type symProd struct {
	c       int64
	syms    map[string]int
	unknown bool
}

func productOf(dims ir.Shape) symProd {
	p := symProd{c: 1, syms: map[string]int{}}
	for _, d := range dims {
		switch {
		case d.Known():
			if d.Value != 0 && p.c > math.MaxInt64/d.Value {
				p.unknown = true
			}
			p.c *= d.Value
		case isSymbol(d):
			p.syms[d.Param]++
		default:
			p.unknown = true
		}
	}
	return p
}

// dim returns the product as one Dim when it is a plain constant or a single
// symbol times 1.
func (p symProd) dim() ir.Dim {
	if p.unknown {
		return ir.UnknownDim
	}
	total := 0
	var name string
	for s, k := range p.syms {
		total += k
		name = s
	}
	switch {
	case total == 0:
		return ir.Dim{Value: p.c}
	case total == 1 && p.c == 1:
		return ir.Dim{Param: name}
	case p.c == 0:
		return ir.Dim{Value: 0}
	}
	return ir.UnknownDim
}

// div returns p / q as a Dim when it is exact and expressible.
func (p symProd) div(q symProd) ir.Dim {
	if p.unknown || q.unknown || q.c == 0 || p.c%q.c != 0 {
		return ir.UnknownDim
	}
	r := symProd{c: p.c / q.c, syms: map[string]int{}}
	for s, k := range p.syms {
		r.syms[s] = k
	}
	for s, k := range q.syms {
		if r.syms[s] < k {
			return ir.UnknownDim
		}
		r.syms[s] -= k
		if r.syms[s] == 0 {
			delete(r.syms, s)
		}
	}
	return r.dim()
}

// moveKernels holds the type-generic data-movement primitives instantiated for one
// element type; dst and src are backing slices of that type.
type moveKernels struct {
	// strided copies the strided view (off, shape, strides) of src into
	// the contiguous dst.
	strided func(dst, src any, off int, shape, strides []int, threads int)
	// blocks copies count runs of length elements from src (starting at
	// sOff, sStride apart) to dst (dOff, dStride apart).
	blocks func(dst any, dOff, dStride int, src any, sOff, sStride, count, length int)
	// gather picks rows of src: dst[o][k][:] = src[o][idx[k]][:], on up
	// to threads threads.
	gather func(dst, src any, outer, axisDim, inner int, idx []int64, threads int)
	// padRows is gather where a negative idx[k] fills row k with fill[0]
	// (fill is a one-element backing slice, or nil for the zero value).
	padRows func(dst, src any, outer, axisDim, inner int, idx []int, fill any)
	// take and put move single elements: dst[i] = src[idx[i]] (take) and
	// dst[idx[i]] = src[i] in order (put: a later index wins).
	take, put func(dst, src any, idx []int)
	// trilu zeroes the elements of each trailing rows×cols matrix of dst
	// that are outside the kept triangle.
	trilu func(dst any, mats, rows, cols int, k int64, upper bool)
}

// shortRun is the longest run blocks and gather move element by element
// rather than with copy.
const shortRun = 4

// gatherParallelMin is the fewest elements a thread of a Gather moves.
const gatherParallelMin = 1 << 16

// gatherBlock is how many indices a Gather of one-element rows takes at a
// time for every outer row.
const gatherBlock = 2048

// moveRun copies the run s into d (of the same length), element by element
// when it is at most shortRun long: a copy call per run of a few elements
// (a Concat of [..., 1] index columns, PyTorch's slice assignment as
// ScatterND; T5's position bias, a Gather of H values per (query, key)
// pair) costs more than the move.
func moveRun[T any](d, s []T) {
	if len(d) > shortRun {
		copy(d, s)
		return
	}
	for j := range d {
		d[j] = s[j]
	}
}

func kernelsFor[T any]() *moveKernels {
	return &moveKernels{
		strided: func(dst, src any, off int, shape, strides []int, threads int) {
			stridedCopy(dst.([]T), src.([]T), off, shape, strides, threads)
		},
		blocks: func(dst any, dOff, dStride int, src any, sOff, sStride, count, length int) {
			d, s := dst.([]T), src.([]T)
			for i := 0; i < count; i++ {
				moveRun(d[dOff+i*dStride:][:length], s[sOff+i*sStride:][:length])
			}
		},
		gather: func(dst, src any, outer, axisDim, inner int, idx []int64, threads int) {
			d, s := dst.([]T), src.([]T)
			if inner == 1 && outer > 1 && axisDim <= math.MaxInt32 {
				// One element a row, many outer rows (a table gathered
				// transposed, T5's position bias): the indices in blocks,
				// each block read from cache for every outer row.
				n := len(idx)
				computeParallel(threads, n, max(gatherBlock, gatherParallelMin/outer), func(lo, hi int) {
					var pos [gatherBlock]int32 // the block's indices, made non-negative
					for b0 := lo; b0 < hi; b0 += gatherBlock {
						b1 := min(b0+gatherBlock, hi)
						ps := pos[:b1-b0]
						for k, x := range idx[b0:b1] {
							if x < 0 {
								x += int64(axisDim)
							}
							ps[k] = int32(x)
						}
						for i := 0; i < outer; i++ {
							dr, sr := d[i*n+b0:i*n+b1], s[i*axisDim:(i+1)*axisDim]
							dr = dr[:len(ps)]
							for k, x := range ps {
								dr[k] = sr[x]
							}
						}
					}
				})
				return
			}
			// Rows (outer × index) split over the threads (T5's position
			// bias gathers a row of H values per (query, key) pair: 4 Mi
			// rows at S=2048).
			rows := outer * len(idx)
			computeParallel(threads, rows, max(1, gatherParallelMin/max(1, inner)), func(lo, hi int) {
				i, k := lo/len(idx), lo%len(idx) // the first row's outer index and index
				base := i * axisDim * inner
				for r := lo; r < hi; r++ {
					x := idx[k]
					if x < 0 {
						x += int64(axisDim)
					}
					p := base + int(x)*inner
					moveRun(d[r*inner:(r+1)*inner], s[p:p+inner])
					if k++; k == len(idx) {
						k, base = 0, base+axisDim*inner
					}
				}
			})
		},
		padRows: func(dst, src any, outer, axisDim, inner int, idx []int, fill any) {
			d, s := dst.([]T), src.([]T)
			var v T
			if f, ok := fill.([]T); ok && len(f) > 0 {
				v = f[0]
			}
			o := 0
			for i := 0; i < outer; i++ {
				base := i * axisDim * inner
				for _, x := range idx {
					row := d[o : o+inner]
					if x < 0 {
						for j := range row {
							row[j] = v
						}
					} else {
						copy(row, s[base+x*inner:])
					}
					o += inner
				}
			}
		},
		take: func(dst, src any, idx []int) {
			d, s := dst.([]T), src.([]T)
			for i, x := range idx {
				d[i] = s[x]
			}
		},
		put: func(dst, src any, idx []int) {
			d, s := dst.([]T), src.([]T)
			for i, x := range idx {
				d[x] = s[i]
			}
		},
		trilu: func(dst any, mats, rows, cols int, k int64, upper bool) {
			d := dst.([]T)
			var zero T
			for m := 0; m < mats; m++ {
				mat := d[m*rows*cols : (m+1)*rows*cols]
				for i := 0; i < rows; i++ {
					row := mat[i*cols : (i+1)*cols]
					// keep j-i >= k (upper) or j-i <= k (lower)
					lim := int64(i) + k
					if upper {
						// zero columns j < i+k
						e := min(max(lim, 0), int64(cols))
						for j := range row[:e] {
							row[j] = zero
						}
					} else {
						// zero columns j > i+k
						s := min(max(lim+1, 0), int64(cols))
						for j := s; j < int64(cols); j++ {
							row[j] = zero
						}
					}
				}
			}
		},
	}
}

var (
	kFloat32 = kernelsFor[float32]()
	kFloat64 = kernelsFor[float64]()
	kInt64   = kernelsFor[int64]()
	kInt32   = kernelsFor[int32]()
	kInt16   = kernelsFor[int16]()
	kInt8    = kernelsFor[int8]()
	kUint8   = kernelsFor[uint8]()
	kUint16  = kernelsFor[uint16]()
	kUint32  = kernelsFor[uint32]()
	kUint64  = kernelsFor[uint64]()
	kBool    = kernelsFor[bool]()
	kString  = kernelsFor[string]()
)

// kernelsOf picks the primitives for a backing slice's element type.
func kernelsOf(data any) (*moveKernels, error) {
	switch data.(type) {
	case []float32:
		return kFloat32, nil
	case []float64:
		return kFloat64, nil
	case []int64:
		return kInt64, nil
	case []int32:
		return kInt32, nil
	case []int16:
		return kInt16, nil
	case []int8:
		return kInt8, nil
	case []uint8:
		return kUint8, nil
	case []uint16:
		return kUint16, nil
	case []uint32:
		return kUint32, nil
	case []uint64:
		return kUint64, nil
	case []bool:
		return kBool, nil
	case []string:
		return kString, nil
	}
	return nil, fmt.Errorf("unsupported tensor data %T", data)
}

// newLike allocates a zero tensor of t's dtype with the given shape, from
// ctx.Alloc when the executor gives one.
func newLike(ctx *Context, t *ir.Tensor, shape []int) *ir.Tensor {
	if ctx != nil && ctx.Alloc != nil {
		return ctx.Alloc(t.DType, shape)
	}
	return &ir.Tensor{DType: t.DType, Shape: append([]int{}, shape...), Data: ir.MakeSlice(t.DType, shapeProd(shape))}
}

// stridedView copies the view of src described by off/shape/strides into a
// new contiguous tensor.
func stridedView(ctx *Context, src *ir.Tensor, off int, shape, strides []int) (*ir.Tensor, error) {
	k, err := kernelsOf(src.Data)
	if err != nil {
		return nil, err
	}
	out := newLike(ctx, src, shape)
	if shapeProd(shape) > 0 {
		k.strided(out.Data, src.Data, off, shape, strides, computeThreads(ctx))
	}
	return out, nil
}

// contiguousStrides returns row-major strides for shape.
func contiguousStrides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// coalesceDims drops size-1 dims and merges adjacent dims that are contiguous
// with each other in the source.
func coalesceDims(shape, strides []int) ([]int, []int) {
	sh := make([]int, 0, len(shape))
	st := make([]int, 0, len(shape))
	for i, d := range shape {
		if d == 1 {
			continue
		}
		if k := len(sh) - 1; k >= 0 && st[k] == strides[i]*d {
			sh[k] *= d
			st[k] = strides[i]
			continue
		}
		sh = append(sh, d)
		st = append(st, strides[i])
	}
	return sh, st
}

// parallelMin is the element count below which a copy stays on one thread.
const parallelMin = 1 << 16

// transposeBlock is the tile edge of the blocked 2-D transpose.
const transposeBlock = 32

// stridedCopy writes the view (off, shape, strides) of src into dst in
// row-major order. Runs along a unit-stride last axis are copied whole; a
// unit-stride second-to-last axis is handled as a blocked 2-D transpose.
func stridedCopy[T any](dst, src []T, off int, shape, strides []int, threads int) {
	shape, strides = coalesceDims(shape, strides)
	r := len(shape)
	if r == 0 {
		dst[0] = src[off]
		return
	}
	inner := 1
	if r >= 2 && strides[r-2] == 1 && strides[r-1] != 1 && shape[r-1] >= 4 && shape[r-2] >= 4 {
		inner = 2
	}
	oshape, ostr := shape[:r-inner], strides[:r-inner]
	block := shapeProd(shape[r-inner:])
	nOuter := shapeProd(oshape)
	n := shape[r-1]
	s := strides[r-1]
	var m, sm int
	if inner == 2 {
		m, sm = shape[r-2], strides[r-2]
	}
	work := func(lo, hi int) {
		idx := make([]int, len(oshape))
		p := off
		rem := lo
		for k := len(oshape) - 1; k >= 0; k-- {
			idx[k] = rem % oshape[k]
			rem /= oshape[k]
			p += idx[k] * ostr[k]
		}
		for o := lo; o < hi; o++ {
			d := dst[o*block : (o+1)*block]
			switch {
			case inner == 2:
				transpose2D(d, src, p, m, n, sm, s, 0, n)
			case s == 1:
				copy(d, src[p:p+n])
			case s == 0:
				v := src[p]
				for j := range d {
					d[j] = v
				}
			default:
				q := p
				for j := range d {
					d[j] = src[q]
					q += s
				}
			}
			for k := len(oshape) - 1; k >= 0; k-- {
				idx[k]++
				p += ostr[k]
				if idx[k] < oshape[k] {
					break
				}
				p -= ostr[k] * oshape[k]
				idx[k] = 0
			}
		}
	}
	if nOuter*block < parallelMin {
		threads = 1
	}
	if inner == 2 && nOuter < threads {
		// Too few tiles' rows to share: split each transposed matrix by
		// columns instead. T5's position bias, [S, S, H] to [H, S, S], is
		// one [S², H] matrix transposed.
		for o := 0; o < nOuter; o++ {
			p := off
			for k, rem := len(oshape)-1, o; k >= 0; k-- {
				p += rem % oshape[k] * ostr[k]
				rem /= oshape[k]
			}
			d := dst[o*block : (o+1)*block]
			computeParallel(threads, n, max(transposeBlock, parallelMin/max(1, m)), func(lo, hi int) {
				transpose2D(d, src, p, m, n, sm, s, lo, hi)
			})
		}
		return
	}
	computeParallel(threads, nOuter, 1, work)
}

// transpose2D writes dst[i*n+j] = src[p+i*sm+j*sn] for i < m and jlo ≤ j <
// jhi, in cache-sized tiles.
func transpose2D[T any](dst, src []T, p, m, n, sm, sn, jlo, jhi int) {
	for i0 := 0; i0 < m; i0 += transposeBlock {
		i1 := min(i0+transposeBlock, m)
		for j0 := jlo; j0 < jhi; j0 += transposeBlock {
			j1 := min(j0+transposeBlock, jhi)
			for i := i0; i < i1; i++ {
				row := dst[i*n : i*n+n]
				q := p + i*sm + j0*sn
				for j := j0; j < j1; j++ {
					row[j] = src[q]
					q += sn
				}
			}
		}
	}
}

// shapeDims converts a Value's known shape to concrete ints, ok false when
// any dim is not known.
func shapeDims(v Value) ([]int, bool) {
	if !v.Type.RankKnown {
		return nil, false
	}
	return v.Type.Shape.Concrete()
}

// copyShape returns a copy of s (never nil, so that a rank-0 shape stays known).
func copyShape(s ir.Shape) ir.Shape {
	return append(ir.Shape{}, s...)
}

// reshaped returns a copy of t's data under a new shape of the same element
// count.
func reshaped(t *ir.Tensor, shape []int) *ir.Tensor {
	c := t.Clone()
	c.Shape = append([]int{}, shape...)
	return c
}

// axesFrom reads a node's axes from its "axes" attribute (attr true) or from
// its input at index i. ok is false when no axes were given.
func axesFrom(n *ir.Node, in []*ir.Tensor, i int, attr bool) (axes []int64, ok bool, err error) {
	if attr {
		axes, ok, err = n.AttrInts("axes")
		if err != nil {
			return nil, false, n.Errorf("%w", err)
		}
		return axes, ok, nil
	}
	t := inTensor(in, i)
	if t == nil {
		return nil, false, nil
	}
	axes, err = intVector(t, "axes")
	if err != nil {
		return nil, false, n.Errorf("%w", err)
	}
	return axes, true, nil
}

// unknownDims returns r unknown dims.
func unknownDims(r int) ir.Shape {
	s := make(ir.Shape, r)
	for i := range s {
		s[i] = ir.UnknownDim
	}
	return s
}
