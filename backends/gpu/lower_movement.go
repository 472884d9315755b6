package gpu

// Lowering data movement to device kernels: strided copies for Transpose,
// Expand, Tile, Concat, Split, Slice, Gather, Pad, Trilu and the fills of
// ConstantOfShape.

import (
	"encoding/binary"
	"fmt"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// copyKernel emits one strided copy over shape from in (at byte offset
// inOff, element strides sin) to out (outOff, sout).
func (l *lowerer) copyKernel(dt ir.DType, out string, outOff int64, in string, inOff int64, shape, sin, sout []int) error {
	cnt := ir.NumElements(shape)
	if cnt == 0 {
		return nil
	}
	kname, err := elemKernel("copy", dt)
	if err != nil {
		return l.node.Errorf("%w", err)
	}
	sh, st := coalesce(shape, sin, sout)
	if err := l.stridedOK(sh); err != nil {
		return err
	}
	l.emit(kernel(kname, "PCopy", cnt, copyParams(cnt, out, outOff, in, inOff, sh, st[0], st[1])))
	return nil
}

// unaryMove reads input 0 and allocates output 0 of a data movement op.
func (l *lowerer) unaryMove(n *ir.Node) (in, out string, inShape, outShape []int, err error) {
	if in, err = l.in(n, 0); err != nil {
		return
	}
	if out, err = l.out(n, 0); err != nil {
		return
	}
	if inShape, err = l.shape(in); err != nil {
		return
	}
	outShape, err = l.shape(n.Outputs[0])
	return
}

func (l *lowerer) transpose(n *ir.Node) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	perm := make([]int, len(s))
	if p, ok, err := n.AttrInts("perm"); err != nil {
		return n.Errorf("%w", err)
	} else if ok {
		if len(p) != len(s) {
			return n.Errorf("perm %v for rank %d", p, len(s))
		}
		for i, v := range p {
			perm[i] = int(v)
		}
	} else {
		for i := range perm {
			perm[i] = len(s) - 1 - i
		}
	}
	cs := contiguous(s)
	sin := make([]int, len(s))
	for d, p := range perm {
		if p < 0 || p >= len(s) {
			return n.Errorf("perm %v is out of range", perm)
		}
		sin[d] = cs[p]
	}
	return l.copyKernel(l.dtype(in), out, 0, in, 0, o, sin, contiguous(o))
}

func (l *lowerer) expand(n *ir.Node) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	sin, err := ops.BroadcastStrides(o, s)
	if err != nil {
		return n.Errorf("%w", err)
	}
	return l.copyKernel(l.dtype(in), out, 0, in, 0, o, sin, contiguous(o))
}

func (l *lowerer) tile(n *ir.Node) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	if len(s) != len(o) {
		return n.Errorf("input rank %d, output rank %d", len(s), len(o))
	}
	if ir.NumElements(o) == 0 {
		return nil
	}
	// Output dim i of size r·s[i] is walked as [r, s[i]]: the repeat reads
	// the input again (stride 0), the inner index steps through it.
	cs, co := contiguous(s), contiguous(o)
	var shape, sin, sout []int
	for i := range s {
		r := o[i] / s[i]
		shape = append(shape, r, s[i])
		sin = append(sin, 0, cs[i])
		sout = append(sout, co[i]*s[i], co[i])
	}
	return l.copyKernel(l.dtype(in), out, 0, in, 0, shape, sin, sout)
}

func (l *lowerer) concat(n *ir.Node) error {
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	o, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	axis, err := axisAttr(n, 0, len(o))
	if err != nil {
		return err
	}
	co := contiguous(o)
	esz := int64(l.dtype(n.Outputs[0]).Size())
	pos := 0
	for i := range n.Inputs {
		if n.Inputs[i] == "" {
			continue
		}
		in, err := l.in(n, i)
		if err != nil {
			return err
		}
		s, err := l.shape(in)
		if err != nil {
			return err
		}
		if err := l.copyKernel(l.dtype(in), out, int64(pos*co[axis])*esz, in, 0, s, contiguous(s), co); err != nil {
			return err
		}
		pos += s[axis]
	}
	return nil
}

func (l *lowerer) split(n *ir.Node) error {
	in, err := l.in(n, 0)
	if err != nil {
		return err
	}
	s, err := l.shape(in)
	if err != nil {
		return err
	}
	axis, err := axisAttr(n, 0, len(s))
	if err != nil {
		return err
	}
	cs := contiguous(s)
	esz := int64(l.dtype(in).Size())
	pos := 0
	for i := range n.Outputs {
		if n.Outputs[i] == "" {
			continue
		}
		o, err := l.shape(n.Outputs[i])
		if err != nil {
			return err
		}
		out, err := l.out(n, i)
		if err != nil {
			return err
		}
		if err := l.copyKernel(l.dtype(in), out, 0, in, int64(pos*cs[axis])*esz, o, cs, contiguous(o)); err != nil {
			return err
		}
		pos += o[axis]
	}
	return nil
}

// constInts reads a constant integer input (Slice's starts, ...); absent
// inputs give nil, false.
func (l *lowerer) constInts(n *ir.Node, i int) ([]int64, bool, error) {
	name := n.Input(i)
	if name == "" {
		return nil, false, nil
	}
	c := l.types[name].Const
	if c == nil {
		return nil, false, n.Errorf("input %d (%q) must be known before running on the gpu backend", i, name)
	}
	v, err := c.AsInt64s()
	if err != nil {
		return nil, false, n.Errorf("input %d: %w", i, err)
	}
	return v, true, nil
}

func (l *lowerer) slice(n *ir.Node, opset int) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	var starts, ends, axes, steps []int64
	var hasAxes, hasSteps bool
	if opset < 10 {
		var ok bool
		if starts, ok, err = n.AttrInts("starts"); err != nil || !ok {
			return n.Errorf("attribute starts: missing or invalid (%v)", err)
		}
		if ends, ok, err = n.AttrInts("ends"); err != nil || !ok {
			return n.Errorf("attribute ends: missing or invalid (%v)", err)
		}
		if axes, hasAxes, err = n.AttrInts("axes"); err != nil {
			return n.Errorf("%w", err)
		}
	} else {
		if starts, _, err = l.constInts(n, 1); err != nil {
			return err
		}
		if ends, _, err = l.constInts(n, 2); err != nil {
			return err
		}
		if axes, hasAxes, err = l.constInts(n, 3); err != nil {
			return err
		}
		if steps, hasSteps, err = l.constInts(n, 4); err != nil {
			return err
		}
	}
	firsts, stepOf, err := sliceWindow(s, starts, ends, axes, steps, hasAxes, hasSteps)
	if err != nil {
		return n.Errorf("%w", err)
	}
	cs := contiguous(s)
	sin := make([]int, len(s))
	off := int64(0)
	for d := range s {
		sin[d] = cs[d] * int(stepOf[d])
		off += firsts[d] * int64(cs[d])
	}
	if ir.NumElements(o) == 0 {
		return nil
	}
	return l.copyKernel(l.dtype(in), out, 0, in, off*int64(l.dtype(in).Size()), o, sin, contiguous(o))
}

// sliceWindow resolves Slice's parameters against a concrete shape: the
// first index and the step along every dim (ONNX clamping rules).
func sliceWindow(shape []int, starts, ends, axes, steps []int64, hasAxes, hasSteps bool) (firsts, stepOf []int64, err error) {
	k := len(starts)
	if len(ends) != k || (hasAxes && len(axes) != k) || (hasSteps && len(steps) != k) {
		return nil, nil, fmt.Errorf("starts %v, ends %v, axes %v, steps %v differ in length", starts, ends, axes, steps)
	}
	firsts = make([]int64, len(shape))
	stepOf = make([]int64, len(shape))
	for d := range stepOf {
		stepOf[d] = 1
	}
	for i := 0; i < k; i++ {
		ax := int64(i)
		if hasAxes {
			ax = axes[i]
		}
		a, err := ops.NormAxis(ax, len(shape))
		if err != nil {
			return nil, nil, err
		}
		step := int64(1)
		if hasSteps {
			step = steps[i]
		}
		if step == 0 {
			return nil, nil, fmt.Errorf("steps %v contain 0", steps)
		}
		firsts[a], _ = ops.ResolveSlice(int64(shape[a]), starts[i], ends[i], step)
		stepOf[a] = step
	}
	return firsts, stepOf, nil
}

func (l *lowerer) gather(n *ir.Node) error {
	data, err := l.in(n, 0)
	if err != nil {
		return err
	}
	idx, err := l.in(n, 1)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	s, _ := l.shape(data)
	is, _ := l.shape(idx)
	axis, err := axisAttr(n, 0, len(s))
	if err != nil {
		return err
	}
	idt := l.dtype(idx)
	if idt != ir.Int64 && idt != ir.Int32 {
		return n.Errorf("indices are %v, want int32 or int64", idt)
	}
	kname, err := elemKernel("gather", l.dtype(data))
	if err != nil {
		return n.Errorf("%w", err)
	}
	outer, inner := ir.NumElements(s[:axis]), ir.NumElements(s[axis+1:])
	nidx := ir.NumElements(is)
	cnt := outer * nidx * inner
	if cnt == 0 {
		return nil
	}
	l.pl.usesErr = true
	l.emit(kernel(kname, "PGather", cnt, gatherParams(cnt, out, data, idx, idt == ir.Int64, outer, int64(s[axis]), nidx, inner, errFlagVal)))
	return nil
}

func (l *lowerer) constantOfShape(n *ir.Node) error {
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	o, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	dt := l.dtype(n.Outputs[0])
	val := ir.Scalar(float32(0))
	if a := n.Attr("value"); a != nil && a.Tensor != nil {
		val = a.Tensor
	}
	if val.Len() != 1 || val.DType != dt {
		return n.Errorf("value attribute %v does not give one %v element", val, dt)
	}
	return l.fill(n, out, o, val)
}

// fill emits a kernel setting every element of out (of shape o) to val's
// one element.
func (l *lowerer) fill(n *ir.Node, out string, o []int, val *ir.Tensor) error {
	raw, err := tensorBytes(val)
	if err != nil {
		return n.Errorf("%w", err)
	}
	var word [8]byte
	copy(word[:], raw)
	kname, err := elemKernel("fill", val.DType)
	if err != nil {
		return n.Errorf("%w", err)
	}
	if cnt := ir.NumElements(o); cnt > 0 {
		l.emit(kernel(kname, "PFill", cnt, fillParams(cnt, out, binary.LittleEndian.Uint64(word[:]))))
	}
	return nil
}

// pad lowers Pad in constant mode (opset 11 on: pads, constant_value and
// axes are inputs, known before running): a fill of the output with the
// constant, then a strided copy of the kept part of the input (negative pads
// crop). The other modes are refused.
func (l *lowerer) pad(n *ir.Node) error {
	mode, err := n.AttrString("mode", "constant")
	if err != nil {
		return n.Errorf("%w", err)
	}
	if mode != "constant" {
		return n.Errorf("Pad mode %q is not supported on the gpu backend (only constant)", mode)
	}
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	pads, _, err := l.constInts(n, 1)
	if err != nil {
		return err
	}
	axes, hasAxes, err := l.constInts(n, 3)
	if err != nil {
		return err
	}
	if !hasAxes {
		axes = make([]int64, len(s))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	if len(pads) != 2*len(axes) {
		return n.Errorf("pads has %d values for %d axes", len(pads), len(axes))
	}
	begin := make([]int, len(s))
	for i, a := range axes {
		ax, err := ops.NormAxis(a, len(s))
		if err != nil {
			return n.Errorf("%w", err)
		}
		begin[ax] = int(pads[i])
	}
	dt := l.dtype(in)
	val := ir.NewTensor(dt, []int{1})
	if c := n.Input(2); c != "" {
		if val = l.types[c].Const; val == nil || val.Len() != 1 {
			return n.Errorf("constant_value must be a scalar known before running on the gpu backend")
		}
	}
	if err := l.fill(n, out, o, val); err != nil {
		return err
	}
	// The kept region: input index j maps to output index j + begin.
	cs, co := contiguous(s), contiguous(o)
	esz := int64(dt.Size())
	region := make([]int, len(s))
	var inOff, outOff int64
	for d := range s {
		from := max(0, -begin[d]) // first input index kept
		to := max(0, begin[d])    // where it lands
		region[d] = max(0, min(s[d]-from, o[d]-to))
		inOff += int64(from*cs[d]) * esz
		outOff += int64(to*co[d]) * esz
	}
	return l.copyKernel(dt, out, outOff, in, inOff, region, cs, co)
}

func (l *lowerer) trilu(n *ir.Node) error {
	in, out, s, _, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	if len(s) < 2 {
		return n.Errorf("input must have rank 2 or more, got %v", s)
	}
	upper, err := n.AttrInt("upper", 1)
	if err != nil {
		return n.Errorf("%w", err)
	}
	k := int64(0)
	if n.Input(1) != "" {
		v, _, err := l.constInts(n, 1)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return n.Errorf("k must be a scalar")
		}
		k = v[0]
	}
	kname, err := elemKernel("trilu", l.dtype(in))
	if err != nil {
		return n.Errorf("%w", err)
	}
	cnt := ir.NumElements(s)
	if cnt > 0 {
		l.emit(kernel(kname, "PTrilu", cnt, triluParams(cnt, int64(s[len(s)-2]), int64(s[len(s)-1]), k, upper != 0, out, in)))
	}
	return nil
}
