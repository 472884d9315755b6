package ops

import (
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Softmax and LogSoftmax. Before opset 13 the input is coerced to 2-D at
// axis (default 1) and each row of the flattened trailing block is
// normalized; from opset 13 only the axis (default -1) is. Version 11 only
// allows a negative axis (which attnrun also takes at 1). Both subtract the
// maximum first, so a row that is entirely -Inf gives NaN (-Inf - -Inf), as
// in the ONNX reference, ONNX Runtime and PyTorch.

func init() {
	for _, op := range []struct {
		name string
		log  bool
		doc  string
	}{{"Softmax", false, "exp(x - max) / sum along axis"}, {"LogSoftmax", true, "x - max - log(sum(exp(x - max))) along axis"}} {
		for _, r := range versions(1, 11, 13) {
			Register(&Schema{
				Domain: DomainONNX, OpType: op.name, Since: r[0], Until: r[1],
				MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: FloatTypes,
				Infer: inferRowOp(softmaxAxis), Run: softmaxRunner(op.log), RunInto: softmaxInto(op.log),
				Doc: op.doc,
			})
		}
	}
}

// softmaxAxis returns the normalized axis and the default for the opset.
func softmaxAxis(n *ir.Node, opset, rank int) (int, error) {
	def := int64(-1)
	if opset < 13 {
		def = 1
	}
	axis, err := n.AttrInt("axis", def)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	a, err := NormAxis(axis, rank)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	return a, nil
}

// inferRowOp infers an op working on rows along an axis (Softmax,
// LogSoftmax, Hardmax): the output has the float input's type and shape,
// once axis has accepted the node's axis for the opset.
func inferRowOp(axis func(n *ir.Node, opset, rank int) (int, error)) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := checkInferInputs(n, in, 1); err != nil {
			return nil, err
		}
		t := in[0].Type
		if err := checkComputeDType(n, "input", t.DType, FloatTypes); err != nil {
			return nil, err
		}
		if !t.RankKnown {
			return []Value{UnknownRank(t.DType)}, nil
		}
		if _, err := axis(n, opset, len(t.Shape)); err != nil {
			return nil, err
		}
		return []Value{Typed(t.DType, append(ir.Shape{}, t.Shape...))}, nil
	}
}

func softmaxRunner(log bool) RunFunc {
	into := softmaxInto(log)
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkComputeInputs(n, in, 1); err != nil {
			return nil, err
		}
		out := ir.NewTensor(in[0].DType, in[0].Shape)
		if err := into(ctx, n, in, []*ir.Tensor{out}); err != nil {
			return nil, err
		}
		return []*ir.Tensor{out}, nil
	}
}

// softmaxInto is the output-into form of Softmax and LogSoftmax.
func softmaxInto(log bool) RunIntoFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor, outs []*ir.Tensor) error {
		if err := checkComputeInputs(n, in, 1); err != nil {
			return err
		}
		x := in[0]
		if err := checkComputeDType(n, "input", x.DType, FloatTypes); err != nil {
			return err
		}
		if err := checkIntoOutput(n, outs, x.DType, x.Shape); err != nil {
			return err
		}
		opset := ctx.EffectiveOpset()
		axis, err := softmaxAxis(n, opset, x.Rank())
		if err != nil {
			return err
		}
		outer := int(ir.NumElements(x.Shape[:axis]))
		size, inner := x.Shape[axis], int(ir.NumElements(x.Shape[axis+1:]))
		if opset < 13 {
			size, inner = size*inner, 1
		}
		out := outs[0]
		if out.Len() == 0 {
			return nil
		}
		threads := computeThreads(ctx)
		block := size * inner
		minChunk := max(1, 1<<14/block)
		switch x.DType {
		case ir.Float, ir.Float16:
			xs, _ := float32View(x)
			ys := out.Float32s()
			if x.DType == ir.Float16 {
				ys = make([]float32, len(xs))
			}
			computeParallel(threads, outer, minChunk, func(lo, hi int) {
				for o := lo; o < hi; o++ {
					xb, yb := xs[o*block:(o+1)*block], ys[o*block:(o+1)*block]
					if inner == 1 {
						softmaxRow32(xb, yb, log)
					} else {
						softmaxStrided(xb, yb, size, inner, log, fastExp32)
					}
				}
			})
			if x.DType == ir.Float16 {
				float32ToHalf(out.Data.([]uint16), ys)
			}
		case ir.Double:
			xs, ys := x.Data.([]float64), out.Data.([]float64)
			computeParallel(threads, outer, minChunk, func(lo, hi int) {
				for o := lo; o < hi; o++ {
					softmaxStrided(xs[o*block:(o+1)*block], ys[o*block:(o+1)*block], size, inner, log, math.Exp)
				}
			})
		}
		return nil
	}
}

// SoftmaxRow32 replaces row by its softmax, exp(x - max) / sum, in place.
// A row that is all -Inf becomes NaN. It is the kernel Softmax uses for the
// last axis, exported for fused kernels.
func SoftmaxRow32(row []float32) { softmaxRow32(row, row, false) }

// softmaxRow32 writes the (log-)softmax of x into y (which may alias x).
func softmaxRow32(x, y []float32, log bool) {
	if len(x) == 0 {
		return
	}
	y = y[:len(x)]
	mx := x[0]
	for _, v := range x[1:] {
		if v > mx {
			mx = v
		}
	}
	// y holds exp(x - mx) first; LogSoftmax then overwrites it.
	s := expShiftSum32(y, x, mx)
	if log {
		ls := float32(math.Log(s))
		for i, v := range x {
			y[i] = (v - mx) - ls
		}
		return
	}
	inv := float32(1 / s)
	for i := range y {
		y[i] *= inv
	}
}

// expShiftSum32 sets y[i] = exp(x[i] - shift) and returns the sum, using
// the AVX2 kernel for whole groups of 8 where the CPU has it.
func expShiftSum32(y, x []float32, shift float32) float64 {
	var s float64
	done := 0
	if kernel.Available && len(x) >= 8 {
		done = len(x) &^ 7
		s = float64(kernel.ExpShiftSum8(&y[0], &x[0], done, shift))
	}
	for i := done; i < len(x); i++ {
		e := fastExp32(x[i] - shift)
		y[i] = e
		s += float64(e)
	}
	return s
}

// softmaxStrided normalizes x, laid out size×inner, along its first dim
// (each of the inner columns separately), writing y.
func softmaxStrided[T float32 | float64](x, y []T, size, inner int, log bool, exp func(T) T) {
	mx := make([]T, inner)
	copy(mx, x[:inner])
	for i := 1; i < size; i++ {
		for j, v := range x[i*inner : (i+1)*inner] {
			if v > mx[j] {
				mx[j] = v
			}
		}
	}
	sum := make([]float64, inner)
	for i := 0; i < size; i++ {
		yr := y[i*inner : (i+1)*inner]
		for j, v := range x[i*inner : (i+1)*inner] {
			e := exp(v - mx[j])
			if !log {
				yr[j] = e
			}
			sum[j] += float64(e)
		}
	}
	if log {
		ls := make([]T, inner)
		for j := range ls {
			ls[j] = T(math.Log(sum[j]))
		}
		for i := 0; i < size; i++ {
			yr := y[i*inner : (i+1)*inner]
			for j, v := range x[i*inner : (i+1)*inner] {
				yr[j] = (v - mx[j]) - ls[j]
			}
		}
		return
	}
	for j := range sum {
		sum[j] = 1 / sum[j]
	}
	for i := 0; i < size; i++ {
		yr := y[i*inner : (i+1)*inner]
		for j := range yr {
			yr[j] *= T(sum[j])
		}
	}
}

// fastExp32 is exp for float32 with a relative error of about 1e-7 (Cephes
// expf: range reduction by ln 2 and a degree-6 polynomial). It is several
// times faster than float32(math.Exp(float64(x))).
func fastExp32(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
		hiX   = 88.72283905206835 // exp overflows float32 above this
		loX   = -103.97208        // exp underflows to 0 below this
	)
	switch {
	case x != x:
		return x
	case x > hiX:
		return float32(math.Inf(1))
	case x < loX:
		return 0
	case x < -87.3:
		return float32(math.Exp(float64(x))) // subnormal results
	}
	t := x * log2e
	if t < 0 {
		t -= 0.5
	} else {
		t += 0.5
	}
	e := int32(t) // round to nearest: |r| ≤ ln2/2
	fn := float32(e)
	r := x - fn*ln2hi - fn*ln2lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	if e > 127 {
		return p * 2 * math.Float32frombits(uint32(e-1+127)<<23)
	}
	return p * math.Float32frombits(uint32(e+127)<<23)
}
