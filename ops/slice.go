package ops

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
)

// sliceVariant is what changes across Slice's opsets.
type sliceVariant struct {
	inputs bool // starts/ends/axes/steps are inputs (10), not attributes (1)
	neg    bool // negative axes allowed (11)
}

func init() {
	for _, r := range []struct {
		since, until int
		v            sliceVariant
	}{
		{1, 9, sliceVariant{}},
		{10, 10, sliceVariant{inputs: true}},
		{11, 12, sliceVariant{inputs: true, neg: true}},
		{13, MaxOpset, sliceVariant{inputs: true, neg: true}},
	} {
		v := r.v
		minIn, maxIn := 1, 1
		if v.inputs {
			minIn, maxIn = 3, 5
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Slice", Since: r.since, Until: r.until,
			MinInputs: minIn, MaxInputs: maxIn, TypeInput: 0, DTypes: anyTypesAt(r.since),
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferSlice(n, in, v) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runSlice(ctx, n, in, v)
			},
			Doc: "takes a strided window (steps may be negative) along some axes",
		})
	}
}

// sliceParams holds Slice's parameters; a nil list with its known flag false
// is not known before running.
type sliceParams struct {
	starts, ends, axes, steps        []int64
	startsOK, endsOK, axesOK, stepOK bool
	hasAxes, hasSteps                bool
}

// sliceAttrParams reads the opset-1 attributes.
func sliceAttrParams(n *ir.Node) (sliceParams, error) {
	var p sliceParams
	var ok bool
	var err error
	for _, f := range []struct {
		name string
		dst  *[]int64
	}{{"starts", &p.starts}, {"ends", &p.ends}} {
		if *f.dst, ok, err = n.AttrInts(f.name); err != nil {
			return p, n.Errorf("%w", err)
		} else if !ok {
			return p, n.Errorf("attribute %s is required", f.name)
		}
	}
	if p.axes, p.hasAxes, err = n.AttrInts("axes"); err != nil {
		return p, n.Errorf("%w", err)
	}
	p.startsOK, p.endsOK, p.axesOK, p.stepOK = true, true, true, true
	return p, nil
}

// ResolveSlice applies ONNX Slice's clamping for one axis of size dim and
// returns the first index and the element count (backends lowering Slice
// use it too).
func ResolveSlice(dim, start, end, step int64) (first, count int64) {
	if dim == 0 {
		return 0, 0
	}
	step = max(step, -math.MaxInt64) // so that -step cannot overflow
	if start < 0 {
		start += dim
	}
	if end < 0 {
		end += dim
	}
	if step > 0 {
		start = min(max(start, 0), dim)
		end = min(max(end, 0), dim)
		if end <= start {
			return start, 0
		}
		return start, (end-start-1)/step + 1
	}
	start = min(max(start, 0), dim-1)
	end = min(max(end, -1), dim-1)
	if start <= end {
		return start, 0
	}
	return start, (start-end-1)/(-step) + 1
}

// normalize checks list lengths, fills default axes and steps and normalizes
// axes against rank. It needs axesOK.
func (p *sliceParams) normalize(rank int, neg bool) ([]int, error) {
	k := -1
	if p.startsOK {
		k = len(p.starts)
	}
	if p.endsOK {
		if k >= 0 && len(p.ends) != k {
			return nil, fmt.Errorf("starts %v and ends %v differ in length", p.starts, p.ends)
		}
		k = len(p.ends)
	}
	if p.hasAxes {
		if k >= 0 && len(p.axes) != k {
			return nil, fmt.Errorf("axes %v and starts %v differ in length", p.axes, p.starts)
		}
		k = len(p.axes)
	}
	if k < 0 {
		return nil, nil
	}
	if p.hasSteps && p.stepOK {
		if len(p.steps) != k {
			return nil, fmt.Errorf("steps %v and starts %v differ in length", p.steps, p.starts)
		}
		for _, s := range p.steps {
			if s == 0 {
				return nil, fmt.Errorf("steps %v contain 0", p.steps)
			}
		}
	}
	if !p.hasSteps {
		p.steps = make([]int64, k)
		for i := range p.steps {
			p.steps[i] = 1
		}
	}
	if !p.hasAxes {
		if k > rank {
			return nil, fmt.Errorf("%d starts for rank %d", k, rank)
		}
		p.axes = make([]int64, k)
		for i := range p.axes {
			p.axes[i] = int64(i)
		}
	}
	return normAxes(p.axes, rank, neg)
}

// toEnd reports whether an end index certainly means "through the last element".
func toEnd(end int64) bool { return end >= math.MaxInt32 }

func inferSlice(n *ir.Node, in []Value, v sliceVariant) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	var p sliceParams
	var endSyms ir.Shape // ends known symbolically (e.g. [seq]), when not Const
	if !v.inputs {
		var err error
		if p, err = sliceAttrParams(n); err != nil {
			return nil, err
		}
	} else {
		if err := checkInferInputs(n, in, 3); err != nil {
			return nil, err
		}
		lists := []*[]int64{&p.starts, &p.ends, &p.axes, &p.steps}
		oks := []*bool{&p.startsOK, &p.endsOK, &p.axesOK, &p.stepOK}
		names := []string{"starts", "ends", "axes", "steps"}
		for i := range lists {
			val := inVal(in, i+1)
			if !val.Present() {
				*oks[i] = true
				continue
			}
			if err := checkIntInput(val, names[i]); err != nil {
				return nil, n.Errorf("%w", err)
			}
			var err error
			if *lists[i], *oks[i], err = constInts(val, names[i]); err != nil {
				return nil, n.Errorf("%w", err)
			}
			if sym, ok := SymOf(val); i == 1 && !*oks[i] && ok {
				endSyms = sym
				p.ends = make([]int64, len(sym))
				for k, d := range sym {
					p.ends[k], _ = SymInt(d)
				}
				p.endsOK = true
			}
			if i == 2 {
				p.hasAxes = true
			}
			if i == 3 {
				p.hasSteps = true
			}
		}
	}
	if !x.Type.RankKnown {
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	rank := len(x.Type.Shape)
	if !p.axesOK {
		return []Value{Typed(x.Type.DType, unknownDims(rank))}, nil
	}
	axes, err := p.normalize(rank, v.neg)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	out := copyShape(x.Type.Shape)
	if axes == nil || !p.startsOK || !p.endsOK || !p.stepOK {
		if axes == nil {
			return []Value{Typed(x.Type.DType, unknownDims(rank))}, nil
		}
		for _, a := range axes {
			out[a] = ir.UnknownDim
		}
		return []Value{Typed(x.Type.DType, out)}, nil
	}
	firsts := make([]int64, len(axes))
	for i, a := range axes {
		d := x.Type.Shape[a]
		if endSyms != nil {
			if _, lit := SymInt(endSyms[i]); !lit {
				// x[:s] with a symbolic bound s: the result has s elements. When
				// the axis is a known size, s is taken to fit in it (exporters
				// make such slices to cut a fixed buffer, e.g. a causal mask, to
				// the sequence length).
				out[a] = ir.UnknownDim
				if isSymbol(endSyms[i]) && p.starts[i] == 0 && p.steps[i] == 1 && (d.Known() || d == endSyms[i]) {
					out[a] = endSyms[i]
				}
				continue
			}
		}
		switch {
		case d.Known():
			f, c := ResolveSlice(d.Value, p.starts[i], p.ends[i], p.steps[i])
			firsts[i] = f
			out[a] = ir.Dim{Value: c}
		case p.starts[i] == 0 && p.steps[i] == 1 && toEnd(p.ends[i]):
			// the whole axis: keep the symbol
		default:
			out[a] = ir.UnknownDim
		}
	}
	if sym, ok := SymOf(x); ok && endSyms == nil && rank == 1 && len(axes) == 1 && out[0].Known() && x.Type.Shape[0] == (ir.Dim{Value: int64(len(sym))}) {
		picked := make(ir.Shape, out[0].Value)
		for j := range picked {
			picked[j] = sym[firsts[0]+int64(j)*p.steps[0]]
		}
		return []Value{symValue(x.Type.DType, picked, false)}, nil
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

func runSlice(ctx *Context, n *ir.Node, in []*ir.Tensor, v sliceVariant) ([]*ir.Tensor, error) {
	var p sliceParams
	if !v.inputs {
		if err := checkRunInputs(n, in, 1); err != nil {
			return nil, err
		}
		var err error
		if p, err = sliceAttrParams(n); err != nil {
			return nil, err
		}
	} else {
		if err := checkRunInputs(n, in, 3); err != nil {
			return nil, err
		}
		lists := []*[]int64{&p.starts, &p.ends, &p.axes, &p.steps}
		names := []string{"starts", "ends", "axes", "steps"}
		for i := range lists {
			t := inTensor(in, i+1)
			if t == nil {
				continue
			}
			var err error
			if *lists[i], err = intVector(t, names[i]); err != nil {
				return nil, n.Errorf("%w", err)
			}
			if i == 2 {
				p.hasAxes = true
			}
			if i == 3 {
				p.hasSteps = true
			}
		}
		p.startsOK, p.endsOK, p.axesOK, p.stepOK = true, true, true, true
	}
	x := in[0]
	axes, err := p.normalize(x.Rank(), v.neg)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	shape := append([]int{}, x.Shape...)
	strides := contiguousStrides(x.Shape)
	off := 0
	for i, a := range axes {
		f, c := ResolveSlice(int64(x.Shape[a]), p.starts[i], p.ends[i], p.steps[i])
		shape[a] = int(c)
		if c > 0 {
			off += int(f) * strides[a]
		}
		if c > 1 {
			strides[a] *= int(p.steps[i])
		}
	}
	out, err := stridedView(ctx, x, off, shape, strides)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{out}, nil
}
