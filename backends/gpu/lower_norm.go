package gpu

// Lowering Softmax, the normalizations (LayerNormalization,
// RMSNormalization) and rotary embeddings to row kernels.

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

func (l *lowerer) softmax(n *ir.Node, opset int) error {
	in, out, s, _, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	if l.dtype(in) != ir.Float {
		return n.Errorf("Softmax on %v is not supported on the gpu backend", l.dtype(in))
	}
	def := int64(-1)
	if opset < 13 {
		def = 1
	}
	axis, err := axisAttr(n, def, len(s))
	if err != nil {
		return err
	}
	rows, cols, inner := softmaxGeometry(s, axis, opset)
	if rows == 0 || cols == 0 {
		return nil
	}
	k := &launch{kernel: "softmax_f32", params: "PSoftmax", fields: softmaxParams(out, in, rows, cols, inner).fields}
	k.grid = [3]uint32{uint32(min(rows, maxGridX)), 1, 1}
	k.block = [3]uint32{rowBlock(cols), 1, 1}
	l.emit(k)
	return nil
}

// softmaxGeometry gives the softmax rows, row length and element spacing:
// before opset 13 the input is coerced to 2-D at axis; from 13 on it is
// one axis.
func softmaxGeometry(s []int, axis, opset int) (rows, cols, inner int64) {
	if opset < 13 {
		return ir.NumElements(s[:axis]), ir.NumElements(s[axis:]), 1
	}
	outer, inner := ir.NumElements(s[:axis]), ir.NumElements(s[axis+1:])
	return outer * inner, int64(s[axis]), inner
}

// normArgs reads a normalization's input, output, shape, axis and epsilon
// (LayerNormalization, RMSNormalization).
func (l *lowerer) normArgs(n *ir.Node) (in, out string, s []int, axis int, eps float32, err error) {
	if in, out, s, _, err = l.unaryMove(n); err != nil {
		return
	}
	if axis, err = axisAttr(n, -1, len(s)); err != nil {
		return in, out, s, 0, 0, err
	}
	if eps, err = n.AttrFloat("epsilon", 1e-5); err != nil {
		return in, out, s, 0, 0, n.Errorf("%w", err)
	}
	return in, out, s, axis, eps, nil
}

// emitRows launches a one-block-per-row kernel over rows of cols elements.
func (l *lowerer) emitRows(name, params string, pb *paramBuilder, rows, cols int64) {
	k := &launch{kernel: name, params: params, fields: pb.fields}
	k.grid = [3]uint32{uint32(min(rows, maxGridX)), 1, 1}
	k.block = [3]uint32{rowBlock(cols), 1, 1}
	l.emit(k)
}

func (l *lowerer) layerNorm(n *ir.Node) error {
	in, out, s, axis, eps, err := l.normArgs(n)
	if err != nil {
		return err
	}
	rows, cols := ir.NumElements(s[:axis]), ir.NumElements(s[axis:])
	param := func(i int) (string, int64, error) {
		if n.Input(i) == "" {
			return "", 0, nil
		}
		v, err := l.in(n, i)
		if err != nil {
			return "", 0, err
		}
		ps, _ := l.shape(v)
		cnt := ir.NumElements(ps)
		if cnt != 1 && cnt != cols {
			return "", 0, n.Errorf("input %d of shape %v: the gpu kernel takes 1 or %d elements", i, ps, cols)
		}
		return v, cnt, nil
	}
	scale, scaleN, err := param(1)
	if err != nil {
		return err
	}
	bias, biasN, err := param(2)
	if err != nil {
		return err
	}
	var stats [2]string
	for i := 1; i <= 2 && i < len(n.Outputs); i++ {
		if stats[i-1], err = l.out(n, i); err != nil {
			return err
		}
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	l.emitRows("layernorm_f32", "PLayerNorm", layerNormParams(out, in, scale, bias, stats[0], stats[1], rows, cols, scaleN, biasN, float64(eps)), rows, cols)
	return nil
}

// rmsNorm lowers RMSNormalization to rmsnorm_f32. The scale is read as a
// pattern over X's trailing dims it covers: the input itself when it
// already has that shape, else (a constant) expanded on the host.
func (l *lowerer) rmsNorm(n *ir.Node) error {
	in, out, s, axis, eps, err := l.normArgs(n)
	if err != nil {
		return err
	}
	scale, err := l.in(n, 1)
	if err != nil {
		return err
	}
	if l.dtype(scale) != ir.Float {
		return n.Errorf("scale is %v; the gpu kernel takes float32", l.dtype(scale))
	}
	ss, _ := l.shape(scale)
	if len(ss) > len(s) {
		return n.Errorf("scale %v does not broadcast to X %v", ss, s)
	}
	k := min(axis, len(s)-len(ss))
	pattern := s[k:]
	if !ops.SameShape(ss, pattern) {
		c := l.types[scale].Const
		if c == nil {
			return n.Errorf("scale %v is computed at run time and broadcasts over X %v: the gpu kernel takes it only as X's trailing dims or as a constant", ss, s)
		}
		st, err := ops.BroadcastStrides(pattern, ss)
		if err != nil {
			return n.Errorf("scale %v does not broadcast to X %v", ss, s)
		}
		exp := ir.NewTensor(ir.Float, pattern)
		src, dst := c.Float32s(), exp.Float32s()
		for e := range dst {
			off, rem := 0, e
			for d := len(pattern) - 1; d >= 0; d-- {
				off += (rem % pattern[d]) * st[d]
				rem /= pattern[d]
			}
			dst[e] = src[off]
		}
		if scale, err = l.read(l.hostConst(scale+"#rms-expanded", exp)); err != nil {
			return err
		}
	}
	rows, cols := ir.NumElements(s[:axis]), ir.NumElements(s[axis:])
	if rows == 0 || cols == 0 {
		return nil
	}
	l.emitRows("rmsnorm_f32", "PRMSNorm", rmsNormParams(out, in, scale, rows, cols, ir.NumElements(pattern), float64(eps)), rows, cols)
	return nil
}

// rotary lowers RotaryEmbedding to rotary_f32; the shapes were checked by
// the op's inference.
func (l *lowerer) rotary(n *ir.Node) error {
	in, out, s, _, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	var names [3]string
	for i := 1; i <= 2 || (i == 3 && n.Input(3) != ""); i++ {
		if names[i-1], err = l.in(n, i); err != nil {
			return err
		}
	}
	for _, x := range []string{in, names[0], names[1]} {
		if l.dtype(x) != ir.Float {
			return n.Errorf("%q is %v; the gpu kernel takes float32", x, l.dtype(x))
		}
	}
	il, _ := n.AttrInt("interleaved", 0)
	rd, _ := n.AttrInt("rotary_embedding_dim", 0)
	a := rotaryArgs{out: out, in: in, cos: names[0], sin: names[1], pos: names[2], interleaved: il == 1}
	switch len(s) {
	case 4: // [B, H, S, D]
		a.s, a.h, a.d = int64(s[2]), int64(s[1]), int64(s[3])
		a.hStr, a.sStr, a.bStr = a.s*a.d, a.d, a.h*a.s*a.d
	case 3: // [B, S, H·D]
		nh, _ := n.AttrInt("num_heads", 0)
		if nh <= 0 || int64(s[2])%nh != 0 {
			return n.Errorf("3-D input %v needs num_heads dividing its last dim", s)
		}
		a.s, a.h, a.d = int64(s[1]), nh, int64(s[2])/nh
		a.hStr, a.sStr, a.bStr = a.d, int64(s[2]), a.s*int64(s[2])
	default:
		return n.Errorf("input %v must be 3-D or 4-D", s)
	}
	a.rd = rd
	if a.rd == 0 {
		a.rd = a.d
	}
	cs, _ := l.shape(names[0])
	if names[2] != "" {
		a.cacheRows = int64(cs[0])
		a.err = errFlagVal
		l.pl.usesErr = true
	} else {
		a.cacheRows = int64(s[0]) * a.s
	}
	a.n = ir.NumElements(s)
	if a.n == 0 {
		return nil
	}
	l.emit(kernel("rotary_f32", "PRotary", a.n, rotaryParams(a)))
	return nil
}
