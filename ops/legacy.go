package ops

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// The versions before opset 7 that differ from 7 in more than types:
//
//   - Add, Sub, Mul, Div (1 and 6), Pow, And, Or, Xor, Equal, Greater and
//     Less (1) broadcast the second input against the first only with
//     attribute broadcast=1 (default 0: the shapes must be equal), and then
//     B's shape must be a contiguous run of A's dims starting at attribute
//     axis (by default ending with A's last dim), or B must be a scalar or
//     hold one element. The output has A's shape. attnrun aligns B to A's
//     rank and runs the opset-7 kernel.
//   - Gemm (1 and 6) broadcasts C to [M, N] only with broadcast=1; without
//     it C must be [M, N].
//   - Dropout (1 and 6) is the identity when is_test is set, and otherwise
//     drops elements at random with probability ratio (default 0.5),
//     scaling the others by 1/(1-ratio), with a mask of the input's type.
//
// Opset 1's consumed_inputs attribute is a legacy optimization hint and is
// ignored.

func init() {
	for _, op := range []struct {
		name     string
		versions []int // the legacy versions: each ends where the next starts, the last at 6
		types    func(since int) []ir.DType
	}{
		{"Add", []int{1, 6}, typesFrom(6, FloatTypes, arith7Types)},
		{"Sub", []int{1, 6}, typesFrom(6, FloatTypes, arith7Types)},
		{"Mul", []int{1, 6}, typesFrom(6, FloatTypes, arith7Types)},
		{"Div", []int{1, 6}, typesFrom(6, FloatTypes, arith7Types)},
		{"Pow", []int{1}, always(FloatTypes)},
		{"And", []int{1}, always(boolOnly)},
		{"Or", []int{1}, always(boolOnly)},
		{"Xor", []int{1}, always(boolOnly)},
		{"Equal", []int{1}, always([]ir.DType{ir.Bool, ir.Int32, ir.Int64})},
		{"Greater", []int{1}, always(FloatTypes)},
		{"Less", []int{1}, always(FloatTypes)},
	} {
		for i, since := range op.versions {
			until := 6
			if i+1 < len(op.versions) {
				until = op.versions[i+1] - 1
			}
			types := op.types(since)
			Register(&Schema{
				Domain: DomainONNX, OpType: op.name, Since: since, Until: until,
				MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: types,
				Infer: legacyBroadcastInfer(op.name, types),
				Run:   legacyBroadcastRun(op.name, types),
				Doc:   "as from opset 7, but B broadcasts only with attributes broadcast and axis",
			})
		}
	}
	for _, op := range []*Schema{
		{OpType: "Gemm", MinInputs: 3, MaxInputs: 3, Infer: inferLegacyGemm, Run: runLegacyGemm,
			Doc: "as from opset 7, but C broadcasts only with attribute broadcast"},
		{OpType: "Dropout", MinInputs: 1, MaxInputs: 1, Infer: inferDropout, Run: runLegacyDropout,
			Doc: "identity with is_test set; otherwise random dropout by attribute ratio (default 0.5)"},
	} {
		for _, r := range [][2]int{{1, 5}, {6, 6}} { // versions 1 and 6 differ only in consumed_inputs
			s := *op
			s.Domain, s.Since, s.Until, s.TypeInput, s.DTypes = DomainONNX, r[0], r[1], 0, FloatTypes
			Register(&s)
		}
	}
}

// legacyAlign returns the shape B takes against A's (of rank rank) under
// the node's broadcast and axis attributes: B's dims at [axis,
// axis+len(b)), ones elsewhere; or b itself when broadcast is 0.
func legacyAlign(n *ir.Node, rank int, b ir.Shape) (ir.Shape, bool, error) {
	bc, err := n.AttrInt("broadcast", 0)
	if err != nil {
		return nil, false, n.Errorf("%w", err)
	}
	if bc == 0 {
		return b, false, nil
	}
	axis := int64(rank - len(b))
	if n.Attr("axis") != nil {
		if axis, err = n.AttrInt("axis", 0); err != nil {
			return nil, false, n.Errorf("%w", err)
		}
		if axis < 0 {
			axis += int64(rank)
		}
	}
	if axis < 0 || axis+int64(len(b)) > int64(rank) {
		return nil, false, n.Errorf("B of shape %s does not fit A's rank %d at axis %d", shapeText(b), rank, axis)
	}
	out := make(ir.Shape, rank)
	for i := range out {
		out[i] = ir.Dim{Value: 1}
	}
	copy(out[axis:], b)
	return out, true, nil
}

// legacyShapes checks B against A: equal shapes without broadcast; with it,
// B's aligned dims must be 1 or A's (B of one element always fits).
func legacyShapes(n *ir.Node, a, b ir.Shape, bcast bool) error {
	if c, ok := b.Concrete(); ok && ir.NumElements(c) == 1 && bcast {
		return nil
	}
	if len(a) != len(b) {
		return n.Errorf("B has shape %s, A %s: before opset 7 they must be equal unless broadcast=1", shapeText(b), shapeText(a))
	}
	for i := range a {
		bv, bk := SymInt(b[i])
		if bcast && bk && bv == 1 {
			continue
		}
		if av, ak := SymInt(a[i]); ak && bk && av != bv {
			return n.Errorf("B has shape %s, which does not match A %s at dim %d", shapeText(b), shapeText(a), i)
		}
	}
	return nil
}

// opset7 is the opset-7 schema of a legacy op (registered by its own file;
// looked up when a node runs, after every init).
func opset7(name string) *Schema {
	s, err := Lookup(DomainONNX, name, 7)
	if err != nil {
		panic(err) // every legacy op has an opset-7 version
	}
	return s
}

func legacyBroadcastInfer(name string, types []ir.DType) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		modern := opset7(name).Infer
		if err := checkInferInputs(n, in, 2); err != nil {
			return nil, err
		}
		if err := checkType(n, "input", in[0].Type.DType, types); err != nil {
			return nil, err
		}
		a, b := in[0], in[1]
		if !a.Type.RankKnown || !b.Type.RankKnown {
			return modern(n, 7, in)
		}
		shape, bcast, err := legacyAlign(n, len(a.Type.Shape), b.Type.Shape)
		if err != nil {
			return nil, err
		}
		if err := legacyShapes(n, a.Type.Shape, shape, bcast); err != nil {
			return nil, err
		}
		b.Type.Shape = shape
		if b.Const.Released() {
			b.Const = nil // a weight held by reference: no data to view
		} else if b.Const != nil {
			if c, ok := shape.Concrete(); ok {
				b.Const = &ir.Tensor{DType: b.Const.DType, Shape: c, Data: b.Const.Data}
			}
		}
		b.Sym = nil
		return modern(n, 7, []Value{a, b})
	}
}

func legacyBroadcastRun(name string, types []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		modern := opset7(name).Run
		if err := checkTensors(n, in, 2); err != nil {
			return nil, err
		}
		if err := checkType(n, "input", in[0].DType, types); err != nil {
			return nil, err
		}
		a, b := in[0], in[1]
		shape, bcast, err := legacyAlign(n, a.Rank(), ir.ShapeOf(b.Shape))
		if err != nil {
			return nil, err
		}
		if err := legacyShapes(n, ir.ShapeOf(a.Shape), shape, bcast); err != nil {
			return nil, err
		}
		dims, _ := shape.Concrete()
		if ir.NumElements(dims) != int64(b.Len()) { // one element: B's rank may exceed A's
			dims = []int{}
		}
		return modern(&Context{Opset: 7, Threads: computeThreads(ctx), Alloc: allocOf(ctx)}, n,
			[]*ir.Tensor{a, {DType: b.DType, Shape: dims, Data: b.Data}})
	}
}

// allocOf returns ctx's allocator (nil without a context).
func allocOf(ctx *Context) func(ir.DType, []int) *ir.Tensor {
	if ctx == nil {
		return nil
	}
	return ctx.Alloc
}

// legacyGemmC checks C against Gemm's output type [M, N] without broadcast.
func legacyGemmC(n *ir.Node, c ir.Shape, out ir.Shape) error {
	bc, err := n.AttrInt("broadcast", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	if bc != 0 {
		return nil
	}
	cc, ok1 := c.Concrete()
	oc, ok2 := out.Concrete()
	if ok1 && ok2 && !slices.Equal(cc, oc) {
		return n.Errorf("C has shape %v, the product %v: before opset 7 C must have the product's shape unless broadcast=1", cc, oc)
	}
	return nil
}

func inferLegacyGemm(n *ir.Node, opset int, in []Value) ([]Value, error) {
	out, err := inferGemm(n, 6, in)
	if err != nil {
		return nil, err
	}
	if in[2].Type.RankKnown && out[0].Type.RankKnown {
		if err := legacyGemmC(n, in[2].Type.Shape, out[0].Type.Shape); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func runLegacyGemm(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 3); err != nil {
		return nil, err
	}
	if _, err := inferLegacyGemm(n, 6, constValues(in)); err != nil {
		return nil, err
	}
	return runGemm(&Context{Opset: 7, Threads: computeThreads(ctx), Alloc: allocOf(ctx)}, n, in)
}

func runLegacyDropout(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	test, err := n.AttrInt("is_test", 0)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	ratio, err := n.AttrFloat("ratio", 0.5)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if test != 0 || ratio == 0 {
		return runDropout(&Context{Opset: 6, Threads: computeThreads(ctx), Alloc: allocOf(ctx)}, n, in)
	}
	if err := checkComputeInputs(n, in, 1); err != nil {
		return nil, err
	}
	if err := checkComputeDType(n, "input", in[0].DType, FloatTypes); err != nil {
		return nil, err
	}
	outs, err := trainingDropout(n, in[0], float64(ratio))
	if err != nil {
		return nil, err
	}
	if len(outs) > 1 { // the mask has the input's type before opset 10
		if outs[1], err = CastTensor(outs[1], in[0].DType); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	return outs, nil
}

// Tile-1 repeats the input tiles times along axis (two scalar inputs, read
// as integers: the spec gives them the input's float type in one place and
// int64 in another). Split-1 takes the part sizes from attribute split or
// from an optional second input (of the data's float type, read as
// integers); axis defaults to 0.

func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "Tile", Since: 1, Until: 5,
		MinInputs: 3, MaxInputs: 3, TypeInput: 0, DTypes: FloatTypes,
		Infer: inferTile1, Run: runTile1,
		Doc: "repeats a tensor tiles times along one axis (inputs tiles and axis)",
	})
	Register(&Schema{
		Domain: DomainONNX, OpType: "Split", Since: 1, Until: 1,
		MinInputs: 1, MaxInputs: 2, TypeInput: 0, DTypes: FloatTypes,
		Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) {
			n2, err := split1Node(n, inVal(in, 1).Const)
			if err != nil {
				return nil, err
			}
			return inferSplit(n2, in[:1], splitVariant{})
		},
		Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
			n2, err := split1Node(n, inTensor(in, 1))
			if err != nil {
				return nil, err
			}
			return runSplit(ctx, n2, in[:1], splitVariant{})
		},
		Doc: "cuts a tensor into parts along an axis (sizes from attribute split or input 2)",
	})
}

// scalarInt reads a one-element numeric tensor as an integer.
func scalarInt(t *ir.Tensor, what string) (int64, error) {
	if t.Len() != 1 {
		return 0, fmt.Errorf("%s must hold one element, got shape %v", what, t.Shape)
	}
	v, err := floatValues(t)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if v[0] != math.Trunc(v[0]) {
		return 0, fmt.Errorf("%s = %g is not an integer", what, v[0])
	}
	return int64(v[0]), nil
}

// tile1Repeats builds Tile-6's repeats vector from Tile-1's tiles and axis.
func tile1Repeats(n *ir.Node, rank int, tiles, axis *ir.Tensor) (*ir.Tensor, error) {
	t, err := scalarInt(tiles, "tiles")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	a, err := scalarInt(axis, "axis")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	ax, err := NormAxis(a, rank)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	reps := make([]int64, rank)
	for i := range reps {
		reps[i] = 1
	}
	reps[ax] = t
	return ir.FromSlice([]int{rank}, reps), nil
}

func inferTile1(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 3); err != nil {
		return nil, err
	}
	x := in[0]
	if !x.Type.RankKnown || in[1].Const == nil || in[2].Const == nil {
		return []Value{{Type: ir.TypeInfo{DType: x.Type.DType, RankKnown: x.Type.RankKnown, Shape: unknownDims(len(x.Type.Shape))}}}, nil
	}
	reps, err := tile1Repeats(n, len(x.Type.Shape), in[1].Const, in[2].Const)
	if err != nil {
		return nil, err
	}
	return inferTile(n, 6, []Value{x, constValue(reps)})
}

func runTile1(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 3); err != nil {
		return nil, err
	}
	reps, err := tile1Repeats(n, in[0].Rank(), in[1], in[2])
	if err != nil {
		return nil, err
	}
	return runTile(ctx, n, []*ir.Tensor{in[0], reps})
}

// split1Node returns Split-1's node with its sizes as attribute split (from
// input 2 when given), for Split-2's kernel.
func split1Node(n *ir.Node, sizes *ir.Tensor) (*ir.Node, error) {
	if sizes == nil {
		return n, nil
	}
	v, err := floatValues(sizes)
	if err != nil {
		return nil, n.Errorf("split: %w", err)
	}
	ints := make([]int64, len(v))
	for i, x := range v {
		if x != math.Trunc(x) {
			return nil, n.Errorf("split %v holds a non-integer", v)
		}
		ints[i] = int64(x)
	}
	c := *n
	c.Inputs = n.Inputs[:1]
	c.Attrs = append([]*ir.Attribute{{Name: "split", Type: ir.AttrInts, Ints: ints}}, withoutAttr(n.Attrs, "split")...)
	return &c, nil
}

// withoutAttr returns attrs less the one named name.
func withoutAttr(attrs []*ir.Attribute, name string) []*ir.Attribute {
	var out []*ir.Attribute
	for _, a := range attrs {
		if a.Name != name {
			out = append(out, a)
		}
	}
	return out
}
