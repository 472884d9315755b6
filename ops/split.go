package ops

import "github.com/attnrun/attnrun/ir"

// splitVariant is what changes across Split's opsets.
type splitVariant struct {
	neg        bool // negative axis allowed (11)
	splitInput bool // split sizes come from input 1, not an attribute (13)
	numOutputs bool // num_outputs attribute (18)
}

func init() {
	for _, r := range []struct {
		since, until int
		v            splitVariant
	}{
		{2, 10, splitVariant{}},
		{11, 12, splitVariant{neg: true}},
		{13, 17, splitVariant{neg: true, splitInput: true}},
		{18, MaxOpset, splitVariant{neg: true, splitInput: true, numOutputs: true}},
	} {
		v := r.v
		maxIn := 1
		if v.splitInput {
			maxIn = 2
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Split", Since: r.since, Until: r.until,
			MinInputs: 1, MaxInputs: maxIn, TypeInput: 0, DTypes: anyTypesAt(r.since),
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferSplit(n, in, v) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runSplit(ctx, n, in, v)
			},
			Doc: "cuts a tensor into parts along an axis",
		})
	}
}

// splitAxis reads the axis attribute (default 0).
func splitAxis(n *ir.Node, rank int, v splitVariant) (int, error) {
	a, err := n.AttrInt("axis", 0)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	if a < 0 && !v.neg {
		return 0, n.Errorf("negative axis %d needs opset 11 or later", a)
	}
	ax, err := NormAxis(a, rank)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	return ax, nil
}

// splitSizes decides the part sizes for a dim of size dim (-1 when unknown).
// split is the explicit list (nil when absent). It returns nil sizes when
// they cannot be known yet.
func splitSizes(n *ir.Node, dim int64, split []int64, hasSplit bool, v splitVariant) ([]int64, error) {
	nOut := int64(len(n.Outputs))
	if nOut == 0 {
		return nil, n.Errorf("has no outputs")
	}
	num, err := n.AttrInt("num_outputs", 0)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	hasNum := v.numOutputs && n.Attr("num_outputs") != nil
	if hasNum {
		if hasSplit {
			return nil, n.Errorf("takes either the split input or the num_outputs attribute, not both")
		}
		if num != nOut {
			return nil, n.Errorf("num_outputs is %d but the node has %d outputs", num, nOut)
		}
	}
	if hasSplit {
		if int64(len(split)) != nOut {
			return nil, n.Errorf("split %v has %d sizes for %d outputs", split, len(split), nOut)
		}
		sum := int64(0)
		for _, s := range split {
			if s < 0 {
				return nil, n.Errorf("split %v has a negative size", split)
			}
			sum += s
		}
		if dim >= 0 && sum != dim {
			return nil, n.Errorf("split %v sums to %d, but the axis has size %d", split, sum, dim)
		}
		return split, nil
	}
	if dim < 0 {
		return nil, nil
	}
	sizes := make([]int64, nOut)
	if hasNum {
		chunk := (dim + nOut - 1) / nOut
		for i := range sizes {
			sizes[i] = min(chunk, max(dim-chunk*int64(i), 0))
		}
		return sizes, nil
	}
	if dim%nOut != 0 {
		return nil, n.Errorf("cannot split an axis of size %d into %d equal parts", dim, nOut)
	}
	for i := range sizes {
		sizes[i] = dim / nOut
	}
	return sizes, nil
}

func inferSplit(n *ir.Node, in []Value, v splitVariant) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var split []int64
	hasSplit, splitKnown := false, true
	if v.splitInput {
		if s := inVal(in, 1); s.Present() {
			if s.Type.DType != ir.Int64 {
				return nil, n.Errorf("split must be int64, got %v", s.Type.DType)
			}
			hasSplit = true
			var err error
			split, splitKnown, err = constInts(s, "split")
			if err != nil {
				return nil, n.Errorf("%w", err)
			}
		}
	} else {
		var err error
		split, hasSplit, err = n.AttrInts("split")
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	outs := make([]Value, len(n.Outputs))
	if !x.Type.RankKnown {
		for i := range outs {
			outs[i] = UnknownRank(x.Type.DType)
		}
		if splitKnown {
			if _, err := splitSizes(n, -1, split, hasSplit, v); err != nil {
				return nil, err
			}
		}
		return outs, nil
	}
	axis, err := splitAxis(n, len(x.Type.Shape), v)
	if err != nil {
		return nil, err
	}
	d := x.Type.Shape[axis]
	dim := int64(-1)
	if d.Known() {
		dim = d.Value
	}
	var sizes []int64
	if splitKnown {
		if sizes, err = splitSizes(n, dim, split, hasSplit, v); err != nil {
			return nil, err
		}
	}
	sym, hasSym := SymOf(x)
	off := int64(0)
	for i := range outs {
		s := copyShape(x.Type.Shape)
		switch {
		case sizes != nil:
			s[axis] = ir.Dim{Value: sizes[i]}
		case len(outs) == 1:
		default:
			s[axis] = ir.UnknownDim
		}
		outs[i] = Typed(x.Type.DType, s)
		if sizes != nil && hasSym && len(s) == 1 && int64(len(sym)) == dim {
			outs[i] = symValue(x.Type.DType, sym[off:off+sizes[i]], false)
		}
		if sizes != nil {
			off += sizes[i]
		}
	}
	return outs, nil
}

func runSplit(ctx *Context, n *ir.Node, in []*ir.Tensor, v splitVariant) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var split []int64
	var hasSplit bool
	var err error
	if v.splitInput {
		if t := inTensor(in, 1); t != nil {
			hasSplit = true
			if split, err = intVector(t, "split"); err != nil {
				return nil, n.Errorf("%w", err)
			}
		}
	} else if split, hasSplit, err = n.AttrInts("split"); err != nil {
		return nil, n.Errorf("%w", err)
	}
	axis, err := splitAxis(n, x.Rank(), v)
	if err != nil {
		return nil, err
	}
	dim := x.Shape[axis]
	sizes, err := splitSizes(n, int64(dim), split, hasSplit, v)
	if err != nil {
		return nil, err
	}
	outer, inner := shapeProd(x.Shape[:axis]), shapeProd(x.Shape[axis+1:])
	outs := make([]*ir.Tensor, len(sizes))
	off := 0
	for i, s := range sizes {
		shape := append([]int{}, x.Shape...)
		shape[axis] = int(s)
		t, err := stridedView(ctx, x, off*inner, []int{outer, int(s) * inner}, []int{dim * inner, 1})
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		t.Shape = shape
		outs[i] = t
		off += int(s)
	}
	return outs, nil
}
