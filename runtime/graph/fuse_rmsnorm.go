package graph

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// RMSNorm rewrite.
//
// RMSNormalization is an ONNX op from opset 23. LLaMA-style models
// (transformers' LlamaRMSNorm, and Mistral's, Qwen's, T5's layer norm)
// compute it by hand, so every export up to opset 22 holds a chain:
//
//	v = ReduceMean(Pow(x, 2), axes)     (or Mul(x, x)); axes: the last k, keepdims=1
//	s = Sqrt(Add(v, eps))               (either operand order of the Add)
//	y = Mul(x, Div(1, s))               (or Reciprocal(s), or Div(x, s); either order)
//	y = Cast(y, float)                  (zero or more no-op Casts: .to(dtype) in fp32)
//	y = Mul(scale, y)                   (either order; scale a float32 constant)
//
// Every such float32 chain whose intermediates nothing else reads (x may
// have other readers), with a scale that broadcasts to the normalized
// dims, becomes one RMSNormalization step (opset 23, axis = -k): one pass
// for the mean of squares and one writing the row instead of six to eight
// full-size steps. Options.NoFuse turns it off.

// fuseRMSNorms rewrites pl.steps in place and records the rewrites in
// pl.fusions.
func (p *Program) fuseRMSNorms(pl *plan, types map[string]ops.Value) {
	p.fuseNormChains(pl, types, "RMSNormalization", 23, func(f *fuser, i int) (*ir.Node, []int, bool) {
		m, ok := f.matchRMSNorm(i)
		if !ok {
			return nil, nil, false
		}
		return normNode(f.pl.steps[i].node, "RMSNormalization", "RMS norm", []string{m.x, m.scale}, m.out, m.k, m.eps), m.steps, true
	})
}

// rmsNormMatch is one exported RMS norm: its input, scale, output,
// epsilon, the number k of trailing axes it normalizes, and the steps it
// replaces.
type rmsNormMatch struct {
	x, scale, out string
	eps           float32
	k             int
	steps         []int
}

// matchRMSNorm matches the RMS norm chain starting at step i, the square
// of x.
func (f *fuser) matchRMSNorm(i int) (rmsNormMatch, bool) {
	var m rmsNormMatch
	sq := f.pl.steps[i].node
	if f.removed[i] || !f.isSquare(sq) {
		return m, false
	}
	m.x = sq.Inputs[0]
	if !f.isFloat32(m.x) {
		return m, false
	}
	xt := f.types[m.x].Type
	sqrt, k, eps, steps, ok := f.meanSquareRoot(sq, len(xt.Shape))
	if !ok {
		return m, false
	}
	m.k, m.eps, m.steps = k, eps, append([]int{i}, steps...)
	y, steps, ok := f.rmsScaled(sqrt.Outputs[0], m.x)
	if !ok {
		return m, false
	}
	m.steps = append(m.steps, steps...)
	// No-op Casts (float32 to float32), then the scale.
	for {
		ci, ok := f.consumer(y)
		if !ok {
			return m, false
		}
		c := f.pl.steps[ci].node
		if c.OpType != "Cast" || !isDefaultDomain(c) || len(c.Outputs) != 1 || c.Outputs[0] == "" {
			break
		}
		if to, err := c.AttrInt("to", 0); err != nil || ir.DType(to) != ir.Float {
			return m, false
		}
		m.steps, y = append(m.steps, ci), c.Outputs[0]
	}
	mi, mul, ok := f.lnStep(y, "Mul")
	if !ok {
		return m, false
	}
	if m.scale, ok = f.otherOperand(mul, func(c string) bool { return c == y }); !ok || !f.floatConst(m.scale) {
		return m, false
	}
	if !broadcastsWithin(f.types[m.scale].Const.Shape, xt, m.k) {
		return m, false
	}
	m.steps, m.out = append(m.steps, mi), mul.Outputs[0]
	if !sameType(f.types[m.out].Type, xt) {
		return m, false
	}
	return m, true
}

// rmsScaled follows s = sqrt(mean + eps) to x / s in its three export
// forms: Mul(x, Div(1, s)), Mul(x, Reciprocal(s)) (either order of the
// Mul), Div(x, s). It returns x / s and the steps it read.
func (f *fuser) rmsScaled(s, x string) (string, []int, bool) {
	ri, ok := f.consumer(s)
	if !ok {
		return "", nil, false
	}
	n := f.pl.steps[ri].node
	if !isDefaultDomain(n) || len(n.Outputs) != 1 || n.Outputs[0] == "" {
		return "", nil, false
	}
	switch {
	case n.OpType == "Div" && len(n.Inputs) == 2 && n.Inputs[0] == x && n.Inputs[1] == s:
		return n.Outputs[0], []int{ri}, true
	case n.OpType == "Div" && len(n.Inputs) == 2 && n.Inputs[1] == s && f.scalarNear(n.Inputs[0], 1):
	case n.OpType == "Reciprocal" && len(n.Inputs) == 1:
	default:
		return "", nil, false
	}
	mi, mul, ok := f.lnStep(n.Outputs[0], "Mul")
	if !ok {
		return "", nil, false
	}
	if other, ok := f.otherOperand(mul, func(c string) bool { return c == n.Outputs[0] }); !ok || other != x {
		return "", nil, false
	}
	return mul.Outputs[0], []int{ri, mi}, true
}

// broadcastsWithin reports whether a tensor of shape s broadcasts to the
// last k dims of x (dims before them 1), as RMSNormalization's scale must.
func broadcastsWithin(s []int, x ir.TypeInfo, k int) bool {
	xd, ok := x.Shape.Concrete()
	if !ok || len(s) > len(xd) {
		return false
	}
	for i, d := range s {
		j := len(s) - 1 - i // position from the right
		switch {
		case d == 1:
		case j >= k || d != xd[len(xd)-1-j]:
			return false
		}
	}
	return true
}
