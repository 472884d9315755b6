package ops

import "github.com/attnrun/attnrun/ir"

func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "Trilu", Since: 14, Until: MaxOpset,
		MinInputs: 1, MaxInputs: 2, TypeInput: 0, DTypes: AllTypes,
		Infer: inferTrilu, Run: runTrilu,
		Doc: "keeps the upper or lower triangle of the last two axes (diagonal offset k)",
	})
}

func triluUpper(n *ir.Node) (bool, error) {
	u, err := n.AttrInt("upper", 1)
	if err != nil {
		return false, n.Errorf("%w", err)
	}
	return u != 0, nil
}

func inferTrilu(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	if _, err := triluUpper(n); err != nil {
		return nil, err
	}
	x := in[0]
	if k := inVal(in, 1); k.Present() {
		if k.Type.DType != ir.Int64 {
			return nil, n.Errorf("k must be int64, got %v", k.Type.DType)
		}
		if l, ok := vectorLen(k); ok && l != 1 {
			return nil, n.Errorf("k must be a scalar, got shape %v", k.Type.Shape)
		}
	}
	if x.Type.RankKnown && len(x.Type.Shape) < 2 {
		return nil, n.Errorf("input must have rank 2 or more, got %v", x.Type.Shape)
	}
	return []Value{{Type: x.Type}}, nil
}

func runTrilu(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	upper, err := triluUpper(n)
	if err != nil {
		return nil, err
	}
	x := in[0]
	if x.Rank() < 2 {
		return nil, n.Errorf("input must have rank 2 or more, got shape %v", x.Shape)
	}
	k := int64(0)
	if t := inTensor(in, 1); t != nil {
		if t.DType != ir.Int64 || t.Len() != 1 {
			return nil, n.Errorf("k must be an int64 scalar, got %v", t)
		}
		k = t.Int64s()[0]
	}
	r := x.Rank()
	rows, cols := x.Shape[r-2], x.Shape[r-1]
	// clamp k so that i+k cannot overflow; beyond ±(rows+cols) nothing changes
	lim := int64(rows + cols + 1)
	k = min(max(k, -lim), lim)
	out := x.Clone()
	kern, err := kernelsOf(out.Data)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if rows*cols > 0 {
		kern.trilu(out.Data, shapeProd(x.Shape[:r-2]), rows, cols, k, upper)
	}
	return []*ir.Tensor{out}, nil
}
