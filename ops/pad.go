package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// Pad adds (or, with negative counts, removes) elements at the start and end
// of axes. Modes: constant (constant_value, default 0, "" or false), reflect
// (mirrored on the edge element, which is not repeated: numpy's "reflect",
// extended periodically when the pad is wider than the axis), edge (the edge
// element repeated) and, from opset 19, wrap (the axis repeated as on a
// torus). pads lists every begin count, then every end count. Versions: 1
// (attribute paddings) and 2 (attribute pads, float attribute value) take
// float types; 11 moves pads and constant_value to inputs and takes numeric
// types; 13 adds bool, string and bfloat16; 18 adds the axes input (pads
// then only cover those axes); 19 adds wrap; 21, 23, 24 and 25 add the narrow
// types (anyTypesAt). Negative pads crop, as ONNX Runtime does (numpy, and
// so ONNX's reference, refuses them); a reflect, edge or wrap pad of an
// empty axis is an error.

func init() {
	for _, r := range versions(1, 2, 11, 13, 18, 19, 21, 23, 24, 25) {
		v := padVariant{since: r[0]}
		types := anyTypesAt(r[0])
		minIn, maxIn := 1, 1
		switch {
		case r[0] < 11:
			types = FloatTypes
		case r[0] < 13:
			types = NumericTypes
		}
		if r[0] >= 11 {
			minIn, maxIn = 2, 3
		}
		if r[0] >= 18 {
			maxIn = 4
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Pad", Since: r[0], Until: r[1],
			MinInputs: minIn, MaxInputs: maxIn, TypeInput: 0, DTypes: types, NarrowInputs: []int{2},
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferPad(n, in, v) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runPad(ctx, n, in, v)
			},
			Doc: "pads (or crops) axes: constant, reflect, edge, or (from opset 19) wrap",
		})
	}
}

// padVariant is the Pad version: its first opset.
type padVariant struct{ since int }

// padMode reads and checks attribute mode.
func padMode(n *ir.Node, v padVariant) (string, error) {
	mode, err := n.AttrString("mode", "constant")
	if err != nil {
		return "", n.Errorf("%w", err)
	}
	switch mode {
	case "constant", "reflect", "edge":
		return mode, nil
	case "wrap":
		if v.since >= 19 {
			return mode, nil
		}
		return "", n.Errorf("mode wrap needs opset 19 or later (this node runs Pad-%d)", v.since)
	}
	return "", n.Errorf("mode %q is not constant, reflect, edge or wrap", mode)
}

// padAttrPads reads the pads of Pad-1 (attribute paddings) and Pad-2
// (attribute pads).
func padAttrPads(n *ir.Node, v padVariant) ([]int64, error) {
	name := "pads"
	if v.since < 2 {
		name = "paddings"
	}
	p, ok, err := n.AttrInts(name)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if !ok {
		return nil, n.Errorf("missing required attribute %q", name)
	}
	return p, nil
}

// padWidths turns pads (and axes) into per-axis begin and end counts for an
// input of the given rank.
func padWidths(pads []int64, axes []int64, rank int) (begin, end []int64, err error) {
	if axes == nil {
		axes = make([]int64, rank)
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	if len(pads) != 2*len(axes) {
		return nil, nil, fmt.Errorf("pads has %d values, want 2 × %d (one begin and one end per axis)", len(pads), len(axes))
	}
	norm, err := normAxes(axes, rank, true)
	if err != nil {
		return nil, nil, err
	}
	begin, end = make([]int64, rank), make([]int64, rank)
	for i, a := range norm {
		begin[a], end[a] = pads[i], pads[len(axes)+i]
	}
	return begin, end, nil
}

// padInputs reads pads and axes (Pad-11 on) as constants when they are.
func padInputs(n *ir.Node, in []Value, v padVariant) (pads, axes []int64, known bool, err error) {
	if v.since < 11 {
		pads, err = padAttrPads(n, v)
		return pads, nil, err == nil, err
	}
	p := in[1]
	if p.Type.DType != ir.Int64 {
		return nil, nil, false, n.Errorf("pads must be int64, got %v", p.Type.DType)
	}
	pads, pk, err := constInts(p, "pads")
	if err != nil {
		return nil, nil, false, n.Errorf("%w", err)
	}
	known = pk
	if a := inVal(in, 3); a.Present() {
		if a.Type.DType != ir.Int64 && a.Type.DType != ir.Int32 {
			return nil, nil, false, n.Errorf("axes must be int32 or int64, got %v", a.Type.DType)
		}
		var ak bool
		if axes, ak, err = constInts(a, "axes"); err != nil {
			return nil, nil, false, n.Errorf("%w", err)
		}
		known = known && ak
		if axes == nil && ak {
			axes = []int64{}
		}
	}
	return pads, axes, known, nil
}

func inferPad(n *ir.Node, in []Value, v padVariant) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if _, err := padMode(n, v); err != nil {
		return nil, err
	}
	if c := inVal(in, 2); c.Present() && c.Type.DType != x.Type.DType {
		return nil, n.Errorf("constant_value is %v, data is %v", c.Type.DType, x.Type.DType)
	}
	pads, axes, known, err := padInputs(n, in, v)
	if err != nil {
		return nil, err
	}
	if !x.Type.RankKnown {
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	rank := len(x.Type.Shape)
	if !known {
		return []Value{Typed(x.Type.DType, unknownDims(rank))}, nil
	}
	begin, end, err := padWidths(pads, axes, rank)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	out := copyShape(x.Type.Shape)
	for i, d := range out {
		if begin[i] == 0 && end[i] == 0 {
			continue
		}
		if !d.Known() {
			out[i] = ir.UnknownDim
			continue
		}
		size := d.Value + begin[i] + end[i]
		if size < 0 {
			return nil, n.Errorf("pads %d and %d would give axis %d of size %d a negative size", begin[i], end[i], i, d.Value)
		}
		out[i] = ir.Dim{Value: size}
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

// padSource maps an output position o along an axis of size d, padded by
// begin before, to the input position it copies (-1 for a constant).
func padSource(o, begin, d int64, mode string) int64 {
	s := o - begin
	if s >= 0 && s < d {
		return s
	}
	switch mode {
	case "edge":
		return min(max(s, 0), d-1)
	case "wrap":
		return ((s % d) + d) % d
	case "reflect":
		if d == 1 {
			return 0
		}
		p := 2 * (d - 1) // the mirrored sequence repeats with this period
		m := ((s % p) + p) % p
		if m >= d {
			m = p - m
		}
		return m
	}
	return -1
}

func runPad(ctx *Context, n *ir.Node, in []*ir.Tensor, v padVariant) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	mode, err := padMode(n, v)
	if err != nil {
		return nil, err
	}
	vals := make([]Value, len(in))
	for i, t := range in {
		if t != nil {
			vals[i] = Value{Type: Known(t.DType, t.Shape), Const: t}
		}
	}
	if v.since >= 11 && in[1] == nil {
		return nil, n.Errorf("input 1 (pads) is missing")
	}
	pads, axes, _, err := padInputs(n, vals, v)
	if err != nil {
		return nil, err
	}
	begin, end, err := padWidths(pads, axes, x.Rank())
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	fill, err := padFill(n, in, x, v)
	if err != nil {
		return nil, err
	}
	k, err := kernelsOf(x.Data)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	shape := append([]int{}, x.Shape...)
	for i, d := range x.Shape {
		size := int64(d) + begin[i] + end[i]
		if size < 0 {
			return nil, n.Errorf("pads %d and %d would give axis %d of size %d a negative size", begin[i], end[i], i, d)
		}
		if d == 0 && size > 0 && mode != "constant" {
			return nil, n.Errorf("cannot %s-pad axis %d of size 0", mode, i)
		}
		shape[i] = int(size)
	}
	if _, err := checkedElements(shape); err != nil {
		return nil, n.Errorf("%w", err)
	}
	// One pass per padded axis, each a row gather with constant rows.
	cur := x
	for a := range x.Shape {
		if begin[a] == 0 && end[a] == 0 {
			continue
		}
		d := int64(cur.Shape[a])
		idx := make([]int, shape[a])
		for o := range idx {
			idx[o] = int(padSource(int64(o), begin[a], d, mode))
		}
		next := append([]int{}, cur.Shape...)
		next[a] = shape[a]
		out := ir.NewTensor(x.DType, next)
		if out.Len() > 0 {
			k.padRows(out.Data, cur.Data, shapeProd(cur.Shape[:a]), int(d), shapeProd(cur.Shape[a+1:]), idx, fill)
		}
		cur = out
	}
	if cur == x {
		cur = x.Clone()
	}
	return []*ir.Tensor{cur}, nil
}

// padFill returns the constant as a one-element backing slice of x's type
// (nil for the zero value).
func padFill(n *ir.Node, in []*ir.Tensor, x *ir.Tensor, v padVariant) (any, error) {
	if v.since < 11 {
		val, err := n.AttrFloat("value", 0)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		c, err := CastTensor(ir.Scalar(val), x.DType)
		if err != nil {
			return nil, n.Errorf("value: %w", err)
		}
		return c.Data, nil
	}
	c := inTensor(in, 2)
	if c == nil {
		return nil, nil
	}
	if c.DType != x.DType {
		return nil, n.Errorf("constant_value is %v, data is %v", c.DType, x.DType)
	}
	if c.Len() != 1 {
		return nil, n.Errorf("constant_value must be a scalar, got shape %v", c.Shape)
	}
	return c.Data, nil
}
