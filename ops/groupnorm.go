package ops

import (
	"math"

	"github.com/attnrun/attnrun/ir"
)

// GroupNormalization (opsets 18, 21): X of shape [N, C, D1, …] is split
// into num_groups groups of C/num_groups consecutive channels; each block
// of one sample and one group (its channels at every spatial position) is
// normalized to zero mean and unit variance, (x - mean) / sqrt(var +
// epsilon), then scaled and shifted: per group at opset 18 (scale and bias
// of shape [num_groups]; ONNX deprecated that form), per channel from 21
// (shape [C]).
//
// The kernel, shared with InstanceNormalization (one group per channel),
// reads each block twice for its mean and variance (accumulated in
// float64) and once more to write it, with no allocation beyond the output
// (and one row of float32 for float16 tensors).

func init() {
	for _, r := range versions(18, 21) {
		perChannel := r[0] >= 21
		doc := "(x - mean) / sqrt(var + epsilon) over groups of channels, then scale and bias per group"
		if perChannel {
			doc = "(x - mean) / sqrt(var + epsilon) over groups of channels, then scale and bias per channel"
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "GroupNormalization", Since: r[0], Until: r[1],
			MinInputs: 3, MaxInputs: 3, TypeInput: 0, DTypes: FloatTypes,
			Infer: func(n *ir.Node, _ int, in []Value) ([]Value, error) { return inferGroupNorm(n, in, perChannel) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runGroupNorm(ctx, n, in, perChannel)
			},
			Doc: doc,
			Notes: []string{
				"the mean and variance are accumulated in float64 and the block is written in X's type (float16 through float32), whatever stash_type (a float type) says.",
			},
		})
	}
}

// groupNormAttrs are GroupNormalization's attributes.
type groupNormAttrs struct {
	groups  int
	epsilon float64
}

func parseGroupNorm(n *ir.Node) (groupNormAttrs, error) {
	var a groupNormAttrs
	if n.Attr("num_groups") == nil {
		return a, n.Errorf("attribute num_groups is required")
	}
	g, err := n.AttrInt("num_groups", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if g < 1 || g > math.MaxInt32 {
		return a, n.Errorf("num_groups must be positive, got %d", g)
	}
	a.groups = int(g)
	if a.epsilon, err = normEpsilon(n); err != nil {
		return a, err
	}
	return a, checkStashType(n)
}

// checkStashType fails unless a normalization's stash_type attribute
// (default 1, float32) names a float type.
func checkStashType(n *ir.Node) error {
	stash, err := n.AttrInt("stash_type", int64(ir.Float))
	if err != nil {
		return n.Errorf("%w", err)
	}
	if !typeIn(ir.DType(stash), rmsNormTypes) {
		return n.Errorf("stash_type %d is not a float type (1, 10, 11 or 16)", stash)
	}
	return nil
}

// normEpsilon reads a normalization's epsilon attribute (default 1e-5),
// which must be finite and ≥ 0.
func normEpsilon(n *ir.Node) (float64, error) { return epsilonAttr(n, 1e-5) }

// epsilonAttr reads a node's epsilon attribute (def when absent), which
// must be finite and ≥ 0.
func epsilonAttr(n *ir.Node, def float32) (float64, error) {
	eps, err := n.AttrFloat("epsilon", def)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	e := float64(eps)
	if e < 0 || math.IsNaN(e) || math.IsInf(e, 0) {
		return 0, n.Errorf("epsilon must be finite and ≥ 0, got %g", eps)
	}
	return e, nil
}

func inferGroupNorm(n *ir.Node, in []Value, perChannel bool) ([]Value, error) {
	a, err := parseGroupNorm(n)
	if err != nil {
		return nil, err
	}
	return inferChannelNorm(n, in, []string{"X", "scale", "bias"}, a.groups, perChannel, []int{0, 1, 2})
}

// inferChannelNorm checks the inputs of a normalization of X of shape
// [N, C, D1, …] (input 0) whose C channels form groups of equal size
// (groups 1: no constraint), with 1-D parameters (inputs 1 on, float) that
// hold one value per channel, or per group when perChannel is false; names
// names every input; each of sameTypes lists inputs of one element type.
// Y has X's type and shape.
func inferChannelNorm(n *ir.Node, in []Value, names []string, groups int, perChannel bool, sameTypes ...[]int) ([]Value, error) {
	if err := checkInferInputs(n, in, len(names)); err != nil {
		return nil, err
	}
	for _, idx := range sameTypes {
		if err := checkSameTypes(n, in, names, idx...); err != nil {
			return nil, err
		}
	}
	x := in[0].Type
	for i, name := range names {
		if err := checkComputeDType(n, "input "+name, in[i].Type.DType, FloatTypes); err != nil {
			return nil, err
		}
	}
	want := ir.Dim{Value: int64(groups)}
	if perChannel {
		want = ir.UnknownDim
	}
	if x.RankKnown {
		if len(x.Shape) < 2 {
			return nil, n.Errorf("X must have rank ≥ 2 ([N, C, …]), got %s", shapeText(x.Shape))
		}
		c := x.Shape[1]
		if c.Known() && c.Value%int64(groups) != 0 {
			return nil, n.Errorf("X has %d channels, not a multiple of num_groups %d", c.Value, groups)
		}
		if perChannel {
			want = c
		}
	}
	for i, name := range names[1:] {
		if err := checkVectorParam(n, name, in[1+i].Type, want); err != nil {
			return nil, err
		}
	}
	if !x.RankKnown {
		return []Value{UnknownRank(x.DType)}, nil
	}
	return []Value{Typed(x.DType, append(ir.Shape{}, x.Shape...))}, nil
}

// checkSameTypes fails unless the inputs at idx (named by names) have one
// element type.
func checkSameTypes(n *ir.Node, in []Value, names []string, idx ...int) error {
	first := idx[0]
	for _, i := range idx[1:] {
		if in[i].Type.DType != in[first].Type.DType {
			return n.Errorf("input %s has element type %v, %s has %v", names[i], in[i].Type.DType, names[first], in[first].Type.DType)
		}
	}
	return nil
}

// checkVectorParam fails unless a parameter's type, as far as known, is a
// 1-D tensor of want elements.
func checkVectorParam(n *ir.Node, name string, p ir.TypeInfo, want ir.Dim) error {
	if !p.RankKnown {
		return nil
	}
	if len(p.Shape) != 1 || (want.Known() && p.Shape[0].Known() && p.Shape[0].Value != want.Value) {
		return n.Errorf("input %s has shape %s, want [%s]", name, shapeText(p.Shape), want)
	}
	return nil
}

func runGroupNorm(ctx *Context, n *ir.Node, in []*ir.Tensor, perChannel bool) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 3); err != nil {
		return nil, err
	}
	if _, err := inferGroupNorm(n, constValues(in), perChannel); err != nil {
		return nil, err
	}
	a, _ := parseGroupNorm(n)
	x := in[0]
	c := x.Shape[1]
	scale, bias := floats64Of(in[1]), floats64Of(in[2])
	if !perChannel { // one value per group: repeat it over the group's channels
		scale, bias = repeatEach(scale, c/a.groups), repeatEach(bias, c/a.groups)
	}
	y, err := newOutput(ctx, x.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	groupNormRows(ctx, x, y, a.groups, scale, bias, a.epsilon)
	return []*ir.Tensor{y}, nil
}

// repeatEach returns v with each element repeated k times.
func repeatEach(v []float64, k int) []float64 {
	out := make([]float64, 0, len(v)*k)
	for _, e := range v {
		for range k {
			out = append(out, e)
		}
	}
	return out
}

// groupNormRows writes into y (X's type and shape) x of shape [N, C, …]
// normalized over each block of C/groups consecutive channels at every
// position after them, channel c then scaled by scale[c] and shifted by
// bias[c].
func groupNormRows(ctx *Context, x, y *ir.Tensor, groups int, scale, bias []float64, eps float64) {
	if x.Len() == 0 {
		return
	}
	per := x.Shape[1] / groups
	spatial := ShapeElems(x.Shape[2:])
	forEachRow(ctx, x, y, per*spatial,
		groupNormRow[float32](groups, per, spatial, scale, bias, eps),
		groupNormRow[float64](groups, per, spatial, scale, bias, eps))
}

// groupNormRow returns the row kernel of groupNormRows: row r is group
// r%groups of one sample, per channels of spatial elements each.
func groupNormRow[T float32 | float64](groups, per, spatial int, scale, bias []float64, eps float64) func(r int, y, x []T) {
	return func(r int, y, x []T) {
		mu, q := meanSquares(x)
		inv := 1 / math.Sqrt(q/float64(len(x))+eps)
		c0 := (r % groups) * per
		for c := range per {
			lo := c * spatial
			shiftScale(y[lo:lo+spatial], x[lo:lo+spatial], T(mu), T(inv*scale[c0+c]), T(bias[c0+c]))
		}
	}
}

// shiftScale writes (x - m)·a + b into y.
func shiftScale[T float32 | float64](y, x []T, m, a, b T) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = (v-m)*a + b
	}
}

// forEachRow calls a row kernel on each row of rowLen elements of x and the
// same row of y (of x's shape and float type), the rows split across ctx's
// threads: float32 and float64 rows in place (row32, row64), float16 and
// bfloat16 rows through float32 copies (row32).
func forEachRow(ctx *Context, x, y *ir.Tensor, rowLen int, row32 func(r int, y, x []float32), row64 func(r int, y, x []float64)) {
	if rowLen == 0 {
		return
	}
	rows := x.Len() / rowLen
	computeParallel(computeThreads(ctx), rows, max(1, 1<<14/rowLen), func(lo, hi int) {
		switch xs := x.Data.(type) {
		case []float32:
			ys := y.Data.([]float32)
			for r := lo; r < hi; r++ {
				row32(r, ys[r*rowLen:(r+1)*rowLen], xs[r*rowLen:(r+1)*rowLen])
			}
		case []float64:
			ys := y.Data.([]float64)
			for r := lo; r < hi; r++ {
				row64(r, ys[r*rowLen:(r+1)*rowLen], xs[r*rowLen:(r+1)*rowLen])
			}
		default:
			xb, yb := make([]float32, rowLen), make([]float32, rowLen)
			for r := lo; r < hi; r++ {
				readFloats(xb, x, r*rowLen)
				row32(r, yb, xb)
				writeFloats(y, r*rowLen, yb)
			}
		}
	})
}
