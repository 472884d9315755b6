package ops

import (
	"math/rand/v2"

	"github.com/attnrun/attnrun/ir"
)

// Dropout in inference: Y = X, and the optional mask output is all true
// (all ones of X's type before opset 10, bool after). From opset 12 ratio
// and training_mode are inputs. In training mode with a non-zero ratio,
// element i is kept when u_i >= ratio, where u is numpy's legacy
// RandomState(seed).uniform(0, 1, X.shape) stream (MT19937), and kept
// elements are scaled by 1/(1-ratio): with the seed attribute set, the
// output is exactly what ONNX's reference implementation computes. Without
// a seed, the seed is random. Dropout-22 only adds types (bfloat16, float8)
// that these kernels do not take, and rewords ratio's doc (an omitted ratio
// is 0.5, as attnrun always read it).

func init() {
	for _, r := range versions(7, 10, 12, 13, 22) {
		maxIn := 1
		if r[0] >= 12 {
			maxIn = 3
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "Dropout", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: maxIn, TypeInput: 0, DTypes: FloatTypes,
			Infer: inferDropout, Run: runDropout,
			Doc: "inference: identity (mask all true); training mode: numpy-seeded random mask, kept values scaled by 1/(1-ratio)",
		})
	}
}

// dropoutMaskType is the mask's element type at an opset.
func dropoutMaskType(opset int, x ir.DType) ir.DType {
	if opset < 10 {
		return x
	}
	return ir.Bool
}

func checkDropoutNode(n *ir.Node) error {
	if len(n.Outputs) > 2 {
		return n.Errorf("has %d outputs, at most 2 (output, mask)", len(n.Outputs))
	}
	return nil
}

func inferDropout(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	if err := checkDropoutNode(n); err != nil {
		return nil, err
	}
	x := in[0].Type
	if err := checkComputeDType(n, "input", x.DType, FloatTypes); err != nil {
		return nil, err
	}
	if len(in) > 1 && in[1].Present() {
		if !in[1].Type.DType.IsFloat() {
			return nil, n.Errorf("ratio must be a float scalar, got %v", in[1].Type.DType)
		}
	}
	if len(in) > 2 && in[2].Present() && in[2].Type.DType != ir.Bool {
		return nil, n.Errorf("training_mode must be a bool scalar, got %v", in[2].Type.DType)
	}
	outs := []Value{{Type: x}}
	if len(n.Outputs) > 1 {
		m := x
		m.DType = dropoutMaskType(opset, x.DType)
		outs = append(outs, Value{Type: m})
	}
	return outs, nil
}

func runDropout(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 1); err != nil {
		return nil, err
	}
	if err := checkDropoutNode(n); err != nil {
		return nil, err
	}
	x := in[0]
	if err := checkComputeDType(n, "input", x.DType, FloatTypes); err != nil {
		return nil, err
	}
	opset := ctx.EffectiveOpset()
	if len(in) > 2 && in[2] != nil {
		tm := in[2]
		if tm.DType != ir.Bool || tm.Len() != 1 {
			return nil, n.Errorf("training_mode must be a bool scalar, got %v of shape %v", tm.DType, tm.Shape)
		}
		if tm.Bools()[0] {
			ratio := 0.5
			if in[1] != nil {
				r, ok := dropoutScalar(in[1])
				if !ok {
					return nil, n.Errorf("ratio must be a float scalar, got %v of shape %v", in[1].DType, in[1].Shape)
				}
				ratio = r
			}
			if ratio != 0 {
				return trainingDropout(n, x, ratio)
			}
		}
	}
	outs := []*ir.Tensor{x.Clone()}
	if len(n.Outputs) > 1 {
		mt := dropoutMaskType(opset, x.DType)
		mask, err := newOutput(ctx, mt, x.Shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		switch d := mask.Data.(type) {
		case []bool:
			for i := range d {
				d[i] = true
			}
		case []float32:
			for i := range d {
				d[i] = 1
			}
		case []float64:
			for i := range d {
				d[i] = 1
			}
		case []uint16: // float16
			one := ir.Float32ToFloat16(1)
			for i := range d {
				d[i] = one
			}
		}
		outs = append(outs, mask)
	}
	return outs, nil
}

// dropoutScalar reads a one-element float tensor.
func dropoutScalar(t *ir.Tensor) (float64, bool) {
	if t.Len() != 1 {
		return 0, false
	}
	switch d := t.Data.(type) {
	case []float32:
		return float64(d[0]), true
	case []float64:
		return d[0], true
	case []uint16:
		if t.DType == ir.Float16 {
			return float64(ir.Float16ToFloat32(d[0])), true
		}
	}
	return 0, false
}

// trainingDropout zeroes each element with probability ratio and scales the
// rest by 1/(1-ratio), drawing numpy-compatible uniforms from the node's
// seed attribute (random when absent). It returns the output and the bool
// mask of kept elements.
func trainingDropout(n *ir.Node, x *ir.Tensor, ratio float64) ([]*ir.Tensor, error) {
	if !(ratio > 0 && ratio < 1) {
		return nil, n.Errorf("ratio must be in [0, 1) in training mode, got %g", ratio)
	}
	seed := rand.Uint32()
	if n.Attr("seed") != nil {
		s, err := n.AttrInt("seed", 0)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		seed = uint32(s)
	}
	rng := newMT19937(seed)
	mask := ir.NewTensor(ir.Bool, x.Shape)
	keep := mask.Data.([]bool)
	for i := range keep {
		keep[i] = rng.float64() >= ratio
	}
	y := ir.NewTensor(x.DType, x.Shape)
	scale := 1 / (1 - ratio)
	switch d := x.Data.(type) {
	case []float32:
		o, sc := y.Data.([]float32), float32(scale)
		for i, v := range d {
			if keep[i] {
				o[i] = v * sc
			}
		}
	case []float64:
		o := y.Data.([]float64)
		for i, v := range d {
			if keep[i] {
				o[i] = v * scale
			}
		}
	case []uint16:
		o, sc := y.Data.([]uint16), float32(scale)
		for i, v := range d {
			if keep[i] {
				o[i] = ir.Float32ToFloat16(ir.Float16ToFloat32(v) * sc)
			}
		}
	default:
		return nil, n.Errorf("training mode takes float tensors, got %v", x.DType)
	}
	outs := []*ir.Tensor{y}
	if len(n.Outputs) > 1 {
		outs = append(outs, mask)
	}
	return outs, nil
}

// mt19937 is the Mersenne Twister as numpy's legacy RandomState seeds and
// draws it, so that seeded dropout masks match ONNX's reference outputs.
type mt19937 struct {
	state [624]uint32
	pos   int
}

// newMT19937 seeds the generator like numpy's RandomState(seed) with an
// integer seed (MT19937's init_genrand).
func newMT19937(seed uint32) *mt19937 {
	m := &mt19937{pos: 624}
	m.state[0] = seed
	for i := 1; i < 624; i++ {
		p := m.state[i-1]
		m.state[i] = 1812433253*(p^(p>>30)) + uint32(i)
	}
	return m
}

func (m *mt19937) uint32() uint32 {
	if m.pos >= 624 {
		for k := 0; k < 624; k++ {
			y := m.state[k]&0x80000000 | m.state[(k+1)%624]&0x7fffffff
			v := m.state[(k+397)%624] ^ y>>1
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			m.state[k] = v
		}
		m.pos = 0
	}
	y := m.state[m.pos]
	m.pos++
	y ^= y >> 11
	y ^= y << 7 & 0x9d2c5680
	y ^= y << 15 & 0xefc60000
	y ^= y >> 18
	return y
}

// float64 is numpy's random_sample: a uniform double in [0, 1) from 53
// random bits.
func (m *mt19937) float64() float64 {
	a, b := m.uint32()>>5, m.uint32()>>6
	return (float64(a)*67108864 + float64(b)) / 9007199254740992
}
