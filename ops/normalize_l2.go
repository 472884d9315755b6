package ops

import (
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// NormalizeL2Op is the op type of attnrun's L2 normalization (domain
// DomainAttnrun, opset 1), made by the plan-time rewrite of
// runtime/graph/fuse_l2norm.go from the chain F.normalize(x, dim=-1, eps)
// exports (ReduceL2, Clip, Div), or x / x.norm(dim=-1, keepdim=True)
// (ReduceL2, Div).
//
// Input: X (float32). Attributes: axis (default -1): the norm is taken
// over X's dims from axis on; epsilon (float ≥ 0, default 0): the norm's
// lower bound; x_view (ints, ops.View encoding, optional): X is read
// through this strided view of the input's data (Swin V2's q and k, a
// Gather of a Transpose of the qkv projection, are read in place).
// Output: Y = X / max(‖X‖₂, epsilon), of X's (logical) shape.
//
// Each row's norm is ReduceL2's (rowSum: the squares summed in float64,
// the square root rounded to float32), bounded
// below as Clip bounds it (NaN stays NaN), and the row is divided by it
// element by element, as Div does: the output has the chain's bits. One
// pass over X instead of three full-size steps.
const NormalizeL2Op = "NormalizeL2"

func init() {
	Register(&Schema{
		Domain: DomainAttnrun, OpType: NormalizeL2Op, Since: 1, Until: 1,
		MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: []ir.DType{ir.Float},
		Infer: inferNormalizeL2, Run: runNormalizeL2, RunInto: runNormalizeL2Into,
		Doc: "x / max(‖x‖₂, epsilon) over the dims from axis (F.normalize), reading x through an optional strided view, one pass per row",
	})
}

// normalizeL2Attrs are a NormalizeL2 node's attributes.
type normalizeL2Attrs struct {
	axis    int64
	epsilon float32
	view    *View // nil: X is contiguous
}

func parseNormalizeL2(n *ir.Node) (normalizeL2Attrs, error) {
	var a normalizeL2Attrs
	var err error
	if a.axis, err = n.AttrInt("axis", -1); err != nil {
		return a, n.Errorf("%w", err)
	}
	eps, err := epsilonAttr(n, 0)
	if err != nil {
		return a, err
	}
	a.epsilon = float32(eps)
	a.view, err = viewAttr(n, "x_view", 0)
	return a, err
}

func inferNormalizeL2(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	a, err := parseNormalizeL2(n)
	if err != nil {
		return nil, err
	}
	x := in[0].Type
	if x.DType != ir.Float {
		return nil, n.Errorf("X has element type %v, NormalizeL2 takes float32", x.DType)
	}
	shape := x.Shape
	if a.view != nil {
		if dims, ok := x.Shape.Concrete(); x.RankKnown && ok && !a.view.Fits(ShapeElems(dims)) {
			return nil, n.Errorf("x_view %v does not fit X of shape %v", a.view.Ints(), dims)
		}
		shape = ir.ShapeOf(a.view.Shape)
	} else if !x.RankKnown {
		return []Value{UnknownRank(ir.Float)}, nil
	}
	if _, err := NormAxis(a.axis, len(shape)); err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []Value{Typed(ir.Float, append(ir.Shape{}, shape...))}, nil
}

func runNormalizeL2(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 1); err != nil {
		return nil, err
	}
	a, err := parseNormalizeL2(n)
	if err != nil {
		return nil, err
	}
	shape := in[0].Shape
	if a.view != nil {
		shape = a.view.Shape
	}
	y, err := newOutput(ctx, ir.Float, shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if err := normalizeL2(ctx, n, a, in[0], y); err != nil {
		return nil, err
	}
	return []*ir.Tensor{y}, nil
}

func runNormalizeL2Into(ctx *Context, n *ir.Node, in, out []*ir.Tensor) error {
	if err := checkComputeInputs(n, in, 1); err != nil {
		return err
	}
	a, err := parseNormalizeL2(n)
	if err != nil {
		return err
	}
	return normalizeL2(ctx, n, a, in[0], out[0])
}

// normalizeL2 writes X / max(‖X‖₂, epsilon) into y, which has the shape
// of X (or of its view) and memory of its own.
func normalizeL2(ctx *Context, n *ir.Node, a normalizeL2Attrs, x, y *ir.Tensor) error {
	if err := checkComputeDType(n, "X", x.DType, []ir.DType{ir.Float}); err != nil {
		return err
	}
	xs := x.Float32s()
	v := Contiguous(x.Shape)
	if a.view != nil {
		if !a.view.Fits(len(xs)) {
			return n.Errorf("x_view %v does not fit X of shape %v", a.view.Ints(), x.Shape)
		}
		v = *a.view
	}
	if !slices.Equal(y.Shape, v.Shape) || y.DType != ir.Float {
		return n.Errorf("internal error: output %v %v for X of shape %v", y.DType, y.Shape, v.Shape)
	}
	axis, err := NormAxis(a.axis, len(v.Shape))
	if err != nil {
		return n.Errorf("%w", err)
	}
	rowLen := ShapeElems(v.Shape[axis:])
	rows := ShapeElems(v.Shape[:axis])
	if rowLen == 0 || rows == 0 {
		return nil
	}
	ys := y.Float32s()
	lead := View{Offset: v.Offset, Shape: v.Shape[:axis], Strides: v.Strides[:axis]}
	row := View{Shape: v.Shape[axis:], Strides: v.Strides[axis:]}
	contiguous := row.contiguousBlock()
	div := float32VS(opDiv)
	eps := a.epsilon
	computeParallel(computeThreads(ctx), rows, max(1, reduceRowsMin/rowLen), func(lo, hi int) {
		// Rows go in blocks: the norms of a block first, then its
		// divisions, so that each row's square root and divisions do not
		// wait on its sum.
		var srcs [normalizeL2Block][]float32
		var norms [normalizeL2Block]float32
		offs := newOdometer(lead, lo)
		for r0 := lo; r0 < hi; r0 += normalizeL2Block {
			m := min(normalizeL2Block, hi-r0)
			for j := range m {
				off := offs.next()
				if contiguous {
					srcs[j] = xs[off : off+rowLen]
				} else { // gathered into the output row, divided there
					r := r0 + j
					srcs[j] = ys[r*rowLen : (r+1)*rowLen]
					stridedCopy(srcs[j], xs, off, row.Shape, row.Strides, 1)
				}
				norms[j] = float32(math.Sqrt(rowSum(reduceL2, srcs[j])))
			}
			for j := range m {
				norm := norms[j]
				if norm < eps {
					norm = eps
				}
				r := r0 + j
				div(ys[r*rowLen:(r+1)*rowLen], srcs[j], norm)
			}
		}
	})
	return nil
}

// normalizeL2Block is how many rows NormalizeL2 takes at a time.
const normalizeL2Block = 32
