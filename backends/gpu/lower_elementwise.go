package gpu

// Lowering elementwise nodes to device kernels: broadcasting binary ops,
// unary ops, Cast, Dropout (inference: identity and its mask) and Where.

import (
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

func (l *lowerer) binary(n *ir.Node, op int64) error {
	a, err := l.in(n, 0)
	if err != nil {
		return err
	}
	dt := l.dtype(a)
	if n.OpType == "Pow" {
		if e := n.Input(1); l.dtype(e) != ir.Float {
			c := l.types[e].Const
			if c == nil {
				return n.Errorf("Pow with a %v exponent computed at run time is not supported on the gpu backend", l.dtype(e))
			}
			f, err := ops.CastTensor(c, ir.Float)
			if err != nil {
				return n.Errorf("converting the exponent: %w", err)
			}
			l.hostConst("#pow-exp:"+e, f)
			n = &ir.Node{Name: n.Name, OpType: n.OpType, Inputs: []string{n.Inputs[0], "#pow-exp:" + e}, Outputs: n.Outputs}
		}
	}
	b, err := l.in(n, 1)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	oShape, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	as, _ := l.shape(a)
	bs, _ := l.shape(b)
	sa, err := ops.BroadcastStrides(oShape, as)
	if err != nil {
		return n.Errorf("%w", err)
	}
	sb, err := ops.BroadcastStrides(oShape, bs)
	if err != nil {
		return n.Errorf("%w", err)
	}
	var kname string
	switch dt {
	case ir.Float:
		kname = "binary_f32"
	case ir.Int64:
		kname = "binary_i64"
	case ir.Int32:
		kname = "binary_i32"
	case ir.Bool:
		kname = "binary_u8"
		if op != binAdd && op != binAnd && op != binOr && op != binXor && op != binEq {
			return n.Errorf("%s on bool is not supported on the gpu backend", n.OpType)
		}
	default:
		return n.Errorf("%s on %v is not supported on the gpu backend", n.OpType, dt)
	}
	if op == binPow && dt != ir.Float {
		return n.Errorf("Pow on %v is not supported on the gpu backend", dt)
	}
	if l.dtype(b) != dt {
		return n.Errorf("operands are %v and %v", dt, l.dtype(b))
	}
	cnt := ir.NumElements(oShape)
	if cnt == 0 {
		return nil
	}
	shape, st := coalesce(oShape, sa, sb)
	if err := l.stridedOK(shape); err != nil {
		return err
	}
	l.emit(kernel(kname, "PBinary", cnt, binaryParams(op, cnt, out, a, b, shape, st[0], st[1])))
	return nil
}

func (l *lowerer) unary(n *ir.Node, op int64) error {
	x, err := l.in(n, 0)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	var kname string
	switch dt := l.dtype(x); {
	case dt == ir.Float && op != unNot:
		kname = "unary_f32"
	case dt == ir.Int64 && (op == unNeg || op == unAbs || op == unRelu):
		kname = "unary_i64"
	case dt == ir.Bool && op == unNot:
		kname = "unary_u8"
	default:
		return n.Errorf("%s on %v is not supported on the gpu backend", n.OpType, dt)
	}
	s, _ := l.shape(x)
	if cnt := ir.NumElements(s); cnt > 0 {
		l.emit(kernel(kname, "PUnary", cnt, unaryParams(op, cnt, out, x)))
	}
	return nil
}

func (l *lowerer) cast(n *ir.Node) error {
	x := n.Input(0)
	from, to := l.dtype(x), l.dtype(n.Outputs[0])
	if from == to {
		return l.aliasOut(n)
	}
	ok := func(d ir.DType) bool {
		for _, t := range castTypes {
			if t == d {
				return true
			}
		}
		return false
	}
	if !ok(from) || !ok(to) {
		return n.Errorf("Cast from %v to %v is not supported on the gpu backend", from, to)
	}
	x, err := l.in(n, 0)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	s, _ := l.shape(x)
	if cnt := ir.NumElements(s); cnt > 0 {
		l.emit(kernel("cast_any", "PCast", cnt, castParams(cnt, from, to, out, x)))
	}
	return nil
}

func (l *lowerer) dropout(n *ir.Node) error {
	if tm := n.Input(2); tm != "" {
		c := l.types[tm].Const
		if c == nil {
			return n.Errorf("training_mode must be a constant on the gpu backend")
		}
		if b := c.Bools(); len(b) == 1 && b[0] {
			ratio := 0.5
			if r := n.Input(1); r != "" {
				rc := l.types[r].Const
				if rc == nil || rc.Len() != 1 {
					return n.Errorf("ratio must be a constant scalar on the gpu backend")
				}
				f, err := ops.CastTensor(rc, ir.Double)
				if err != nil {
					return n.Errorf("%w", err)
				}
				ratio = f.Data.([]float64)[0]
			}
			if ratio != 0 {
				return n.Errorf("training mode with ratio %g is not supported (attnrun runs inference only)", ratio)
			}
		}
	}
	if err := l.aliasOut(n); err != nil {
		return err
	}
	if len(n.Outputs) < 2 || n.Outputs[1] == "" {
		return nil
	}
	mask, err := l.out(n, 1)
	if err != nil {
		return err
	}
	s, _ := l.shape(n.Outputs[1])
	var bits uint64 = 1
	kname := "fill_1"
	if dt := l.dtype(n.Outputs[1]); dt == ir.Float {
		bits, kname = uint64(math.Float32bits(1)), "fill_4"
	} else if dt != ir.Bool {
		return n.Errorf("a %v mask output is not supported on the gpu backend", dt)
	}
	if cnt := ir.NumElements(s); cnt > 0 {
		l.emit(kernel(kname, "PFill", cnt, fillParams(cnt, mask, bits)))
	}
	return nil
}

func (l *lowerer) where(n *ir.Node) error {
	var names [3]string
	for i := range names {
		v, err := l.in(n, i)
		if err != nil {
			return err
		}
		names[i] = v
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	if l.dtype(names[0]) != ir.Bool {
		return n.Errorf("condition is %v, want bool", l.dtype(names[0]))
	}
	oShape, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	var st [3][]int
	for i, v := range names {
		s, _ := l.shape(v)
		if st[i], err = ops.BroadcastStrides(oShape, s); err != nil {
			return n.Errorf("%w", err)
		}
	}
	kname, err := elemKernel("where", l.dtype(names[1]))
	if err != nil {
		return n.Errorf("%w", err)
	}
	cnt := ir.NumElements(oShape)
	if cnt == 0 {
		return nil
	}
	shape, cs := coalesce(oShape, st[0], st[1], st[2])
	if err := l.stridedOK(shape); err != nil {
		return err
	}
	l.emit(kernel(kname, "PWhere", cnt, whereParams(cnt, out, names[0], names[1], names[2], shape, cs[0], cs[1], cs[2])))
	return nil
}
