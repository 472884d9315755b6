package ops

import (
	"sort"

	"github.com/attnrun/attnrun/ir"
)

// TopK returns the k largest (or, with largest=0, smallest) elements along
// axis (default -1) and their int64 indices, in order (sorted=0 leaves the
// order to the runtime; attnrun sorts anyway). Equal elements keep their
// order: the one with the lower index comes first, as the spec says. NaN
// counts as larger than every number, as in ONNX's reference (numpy's
// sort): it comes first among the largest and last among the smallest.
// Versions: 1 takes k as an attribute and float types; 10 takes k as a
// one-element int64 input; 11 adds largest, sorted and integer types; 24
// only adds bfloat16.

func init() {
	for _, r := range versions(1, 10, 11, 24) {
		since := r[0]
		types := NumericTypes
		minIn, maxIn := 2, 2
		if since < 11 {
			types = FloatTypes
		}
		if since < 10 {
			minIn, maxIn = 1, 1
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "TopK", Since: r[0], Until: r[1],
			MinInputs: minIn, MaxInputs: maxIn, TypeInput: 0, DTypes: types,
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferTopK(n, in, since, types) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runTopK(ctx, n, in, since, types)
			},
			Doc: "the k largest or smallest elements along an axis and their indices (ties: lower index first)",
		})
	}
}

// topKAttrs are a TopK node's axis and direction.
type topKAttrs struct {
	axis    int
	largest bool
}

func parseTopK(n *ir.Node, rank, since int) (topKAttrs, error) {
	a, err := n.AttrInt("axis", -1)
	if err != nil {
		return topKAttrs{}, n.Errorf("%w", err)
	}
	axis, err := NormAxis(a, rank)
	if err != nil {
		return topKAttrs{}, n.Errorf("%w", err)
	}
	largest := int64(1)
	if since >= 11 {
		if largest, err = n.AttrInt("largest", 1); err != nil {
			return topKAttrs{}, n.Errorf("%w", err)
		}
		if _, err := n.AttrInt("sorted", 1); err != nil {
			return topKAttrs{}, n.Errorf("%w", err)
		}
	}
	return topKAttrs{axis: axis, largest: largest != 0}, nil
}

// topKCount reads k: attribute k before opset 10, input 1 after (known is
// false when that input is not a constant).
func topKCount(n *ir.Node, kv Value, since int) (k int64, known bool, err error) {
	if since < 10 {
		if n.Attr("k") == nil {
			return 0, false, n.Errorf("missing required attribute \"k\"")
		}
		k, err = n.AttrInt("k", 0)
		if err != nil {
			return 0, false, n.Errorf("%w", err)
		}
	} else {
		if kv.Type.DType != ir.Int64 {
			return 0, false, n.Errorf("k must be int64, got %v", kv.Type.DType)
		}
		vals, ok, err := constInts(kv, "k")
		if err != nil {
			return 0, false, n.Errorf("%w", err)
		}
		if !ok {
			return 0, false, nil
		}
		if len(vals) != 1 {
			return 0, false, n.Errorf("k must have one element, got %d", len(vals))
		}
		k = vals[0]
	}
	if k < 0 {
		return 0, false, n.Errorf("k = %d is negative", k)
	}
	return k, true, nil
}

func inferTopK(n *ir.Node, in []Value, since int, types []ir.DType) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkType(n, "input", x.DType, types); err != nil {
		return nil, err
	}
	k, known, err := topKCount(n, inVal(in, 1), since)
	if err != nil {
		return nil, err
	}
	if !x.RankKnown {
		return []Value{UnknownRank(x.DType), UnknownRank(ir.Int64)}, nil
	}
	a, err := parseTopK(n, len(x.Shape), since)
	if err != nil {
		return nil, err
	}
	shape := copyShape(x.Shape)
	switch d := shape[a.axis]; {
	case !known:
		shape[a.axis] = ir.UnknownDim
	case d.Known() && k > d.Value:
		return nil, n.Errorf("k = %d is larger than axis %d of size %d", k, a.axis, d.Value)
	default:
		shape[a.axis] = ir.Dim{Value: k}
	}
	return []Value{Typed(x.DType, shape), Typed(ir.Int64, copyShape(shape))}, nil
}

func runTopK(ctx *Context, n *ir.Node, in []*ir.Tensor, since int, types []ir.DType) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkType(n, "input", x.DType, types); err != nil {
		return nil, err
	}
	var kv Value
	if t := inTensor(in, 1); t != nil {
		kv = Value{Type: Known(t.DType, t.Shape), Const: t}
	}
	k, _, err := topKCount(n, kv, since)
	if err != nil {
		return nil, err
	}
	a, err := parseTopK(n, x.Rank(), since)
	if err != nil {
		return nil, err
	}
	dim := x.Shape[a.axis]
	if k > int64(dim) {
		return nil, n.Errorf("k = %d is larger than axis %d of size %d", k, a.axis, dim)
	}
	shape := append([]int{}, x.Shape...)
	shape[a.axis] = int(k)
	outer, inner := shapeProd(x.Shape[:a.axis]), shapeProd(x.Shape[a.axis+1:])
	// order[r*k+j] is the axis position of the j-th pick of row r.
	var order []int
	switch d := x.Data.(type) {
	case []float32:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []float64:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []uint16:
		if x.DType == ir.Float16 {
			order = topKOrder(halfToFloat32s(d), outer, dim, inner, int(k), a.largest)
		} else {
			order = topKOrder(d, outer, dim, inner, int(k), a.largest)
		}
	case []int8:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []int16:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []int32:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []int64:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []uint8:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []uint32:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	case []uint64:
		order = topKOrder(d, outer, dim, inner, int(k), a.largest)
	default:
		return nil, n.Errorf("unsupported element type %v", x.DType)
	}
	values := newLike(ctx, x, shape)
	indices, err := newOutput(ctx, ir.Int64, shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	src := make([]int, len(order))
	idx := indices.Int64s()
	for p, pos := range order {
		// p runs over the output in row-major order: (o, j, i).
		o, rest := p/(int(k)*inner), p%(int(k)*inner)
		i := rest % inner
		src[p] = (o*dim+pos)*inner + i
		idx[p] = int64(pos)
	}
	mk, err := kernelsOf(x.Data)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	mk.take(values.Data, x.Data, src)
	return []*ir.Tensor{values, indices}, nil
}

// topKOrder returns, in output order (row-major over outer, k, inner), the
// axis position of each pick.
func topKOrder[T numElem](x []T, outer, dim, inner, k int, largest bool) []int {
	out := make([]int, outer*k*inner)
	pos := make([]int, dim)
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			at := func(p int) T { return x[(o*dim+p)*inner+i] }
			for p := range pos {
				pos[p] = p
			}
			// before: a ranks ahead of b. NaN is the largest value.
			before := func(a, b T) bool {
				an, bn := a != a, b != b
				switch {
				case an && bn:
					return false
				case an:
					return largest
				case bn:
					return !largest
				case largest:
					return a > b
				}
				return a < b
			}
			sort.SliceStable(pos, func(p, q int) bool { return before(at(pos[p]), at(pos[q])) })
			for j := 0; j < k; j++ {
				out[(o*k+j)*inner+i] = pos[j]
			}
		}
	}
	return out
}
