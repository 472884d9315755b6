package ops

import (
	"fmt"
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Unary elementwise math: Sqrt, Neg, Erf, Abs, Exp, Log, Reciprocal, Relu,
// Sigmoid, Tanh, Ceil, Floor, Sin, Cos, Round, Sign, Softplus, and the
// activations with float attributes Elu, LeakyRelu and HardSigmoid. Float
// functions are evaluated in float64 and rounded to the tensor's type
// (float16 goes through float32), except Erf and Gelu on float32, whose
// vectorized float32 kernels (erf.go) are within a few ulp. The opset-1 forms take float types and
// carry the legacy consumed_inputs attribute (an optimization hint, ignored);
// 6 widens Abs, Neg and Relu to integers (14 for Relu); 13, 16 (LeakyRelu)
// and 22 (Sin, Cos, Elu, HardSigmoid, Softplus, Round) only add bfloat16,
// which these kernels do not take.

// unaryOp describes one unary op.
type unaryOp struct {
	name string
	doc  string
	// ranges are the registered opset ranges with their types.
	ranges []opRange
	// float computes the op on a float value.
	float func(float64) float64
	// direct, when set, is the kernel for every type the op takes: a loop
	// with the operator inlined (Neg, Abs, Relu). Otherwise floats use
	// float and integers (Erf) go through float64.
	direct func(o, a *ir.Tensor) error
	// param, when set, builds the float function from the node's
	// attributes (Elu's alpha...); it replaces float.
	param func(n *ir.Node) (func(float64) float64, error)
	// f32, when set, gives the vectorized float32 kernel for the node's
	// attributes (nil when they have none): float32 tensors take it
	// instead of float or param (Erf, Gelu; erf.go).
	f32 func(n *ir.Node) func(dst, src []float32, threads int)
}

// opRange is an opset range and the types it takes.
type opRange struct {
	since, until int
	types        []ir.DType
}

// typedVersions returns the ranges of versions(since...), each with the
// types typesAt gives for its first opset.
func typedVersions(typesAt func(since int) []ir.DType, since ...int) []opRange {
	var out []opRange
	for _, r := range versions(since...) {
		out = append(out, opRange{r[0], r[1], typesAt(r[0])})
	}
	return out
}

// always is a typesAt giving ts for every version.
func always(ts []ir.DType) func(int) []ir.DType { return func(int) []ir.DType { return ts } }

// typesFrom is a typesAt giving before for versions before opset v and
// after from v on.
func typesFrom(v int, before, after []ir.DType) func(int) []ir.DType {
	return func(since int) []ir.DType {
		if since < v {
			return before
		}
		return after
	}
}

var unaryOps = []unaryOp{
	{name: "Sqrt", doc: "elementwise square root", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: math.Sqrt},
	{name: "Neg", doc: "elementwise negation", ranges: typedVersions(typesFrom(6, FloatTypes, floatSigned), 1, 6, 13), direct: negTensor},
	{name: "Erf", doc: "elementwise error function", ranges: typedVersions(always(NumericTypes), 9, 13), float: math.Erf, f32: erfKernel},
	{name: "Abs", doc: "elementwise absolute value", ranges: typedVersions(typesFrom(6, FloatTypes, NumericTypes), 1, 6, 13), direct: absTensor},
	{name: "Exp", doc: "elementwise e^x", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: math.Exp},
	{name: "Log", doc: "elementwise natural logarithm", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: math.Log},
	{name: "Reciprocal", doc: "elementwise 1/x", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: func(x float64) float64 { return 1 / x }},
	{name: "Relu", doc: "elementwise max(x, 0)", ranges: typedVersions(typesFrom(14, FloatTypes, floatSigned), 1, 6, 13, 14), direct: reluTensor, f32: reluKernel},
	{name: "Sigmoid", doc: "elementwise logistic function 1/(1+e^-x)", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: sigmoid, f32: sigmoidKernel},
	{name: "Tanh", doc: "elementwise hyperbolic tangent", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: math.Tanh, f32: tanhKernel},
	{name: "Ceil", doc: "elementwise ceiling (round toward +inf)", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: math.Ceil},
	{name: "Floor", doc: "elementwise floor (round toward -inf)", ranges: typedVersions(always(FloatTypes), 1, 6, 13), float: math.Floor},
	{name: "Sin", doc: "elementwise sine", ranges: typedVersions(always(FloatTypes), 7, 22), float: math.Sin, f32: sinKernel},
	{name: "Cos", doc: "elementwise cosine", ranges: typedVersions(always(FloatTypes), 7, 22), float: math.Cos, f32: cosKernel},
	{name: "Round", doc: "elementwise round to nearest, halves to even", ranges: typedVersions(always(FloatTypes), 11, 22), float: math.RoundToEven},
	{name: "Sign", doc: "elementwise sign: -1, 0 or 1 (NaN stays NaN)", ranges: typedVersions(always(NumericTypes), 9, 13), direct: signTensor},
	{name: "Softplus", doc: "elementwise log(exp(x) + 1)", ranges: typedVersions(always(FloatTypes), 1, 22), float: softplus},
	{name: "Elu", doc: "elementwise x for x ≥ 0, alpha*(exp(x)-1) below (alpha default 1)", ranges: typedVersions(always(FloatTypes), 1, 6, 22), param: eluParam},
	{name: "LeakyRelu", doc: "elementwise x for x ≥ 0, alpha*x below (alpha default 0.01)", ranges: typedVersions(always(FloatTypes), 1, 6, 16), param: leakyReluParam},
	{name: "HardSigmoid", doc: "elementwise max(0, min(1, alpha*x + beta)) (alpha 0.2, beta 0.5 by default)", ranges: typedVersions(always(FloatTypes), 1, 6, 22), param: hardSigmoidParam},
	{name: "Gelu", doc: "elementwise x·Φ(x) = x/2·(1+erf(x/√2)), or with approximate=\"tanh\" x/2·(1+tanh(√(2/π)(x+0.044715x³)))", ranges: typedVersions(always(FloatTypes), 20), param: geluParam, f32: geluKernel},
}

func init() {
	for i := range unaryOps {
		u := &unaryOps[i]
		for _, r := range u.ranges {
			infer := inferUnary(r.types)
			if u.param != nil {
				infer = inferParamUnary(u.param, infer)
			}
			Register(&Schema{
				OpType: u.name, Since: r.since, Until: r.until,
				MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: r.types,
				Infer: infer,
				Run:   u.run(r.types),
				Doc:   u.doc,
			})
		}
	}
}

// sigmoid is 1/(1+e^-x), evaluated without overflow for large |x|.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// softplus is log(exp(x) + 1), evaluated without overflow for large x.
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// floatAttr reads an optional float attribute as float64.
func floatAttr(n *ir.Node, name string, def float32) (float64, error) {
	v, err := n.AttrFloat(name, def)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	return float64(v), nil
}

// eluParam builds Elu's function from alpha (default 1).
func eluParam(n *ir.Node) (func(float64) float64, error) {
	alpha, err := floatAttr(n, "alpha", 1)
	if err != nil {
		return nil, err
	}
	return func(x float64) float64 {
		if x < 0 {
			return alpha * math.Expm1(x)
		}
		return x
	}, nil
}

// geluParam builds Gelu's function from approximate ("none", the default,
// or "tanh").
func geluParam(n *ir.Node) (func(float64) float64, error) {
	mode, err := n.AttrString("approximate", "none")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	switch mode {
	case "none":
		return func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }, nil
	case "tanh":
		c := math.Sqrt(2 / math.Pi)
		return func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(c*(x+0.044715*x*x*x))) }, nil
	}
	return nil, n.Errorf("approximate = %q is not none or tanh", mode)
}

// erfKernel is Erf's float32 kernel.
func erfKernel(*ir.Node) func(dst, src []float32, threads int) { return erfSlice }

// geluKernel is Gelu's float32 kernel: geluSlice for approximate "none",
// geluTanhSlice for "tanh" on AVX-512 (nil elsewhere, and for a bad
// value, which geluParam reports).
func geluKernel(n *ir.Node) func(dst, src []float32, threads int) {
	switch mode, err := n.AttrString("approximate", "none"); {
	case err != nil:
		return nil
	case mode == "none":
		return geluSlice
	case mode == "tanh" && kernel.AVX512:
		return geluTanhSlice
	}
	return nil
}

// geluTanhSlice sets dst[i] = x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))),
// x = src[i], on up to threads threads, in one pass of kernel.GeluTanh16
// (x·σ(2u) = x/(1 + e^(-2u)), the same value). It replaced three passes
// (the argument and the product in Go, kernel.Tanh16 between them): at
// [512, 3072], GPT-2's MLP at S=512, 1.22 ms a run on 2 threads before.
func geluTanhSlice(dst, src []float32, threads int) {
	vecUnarySlice(dst, src, threads, kernel.GeluTanh16)
}

// leakyReluParam builds LeakyRelu's function from alpha (default 0.01).
func leakyReluParam(n *ir.Node) (func(float64) float64, error) {
	alpha, err := floatAttr(n, "alpha", 0.01)
	if err != nil {
		return nil, err
	}
	return func(x float64) float64 {
		if x < 0 {
			return alpha * x
		}
		return x
	}, nil
}

// hardSigmoidParam builds HardSigmoid's function from alpha (default 0.2)
// and beta (default 0.5). NaN stays NaN.
func hardSigmoidParam(n *ir.Node) (func(float64) float64, error) {
	alpha, err := floatAttr(n, "alpha", 0.2)
	if err != nil {
		return nil, err
	}
	beta, err := floatAttr(n, "beta", 0.5)
	if err != nil {
		return nil, err
	}
	return func(x float64) float64 {
		y := alpha*x + beta
		switch {
		case y < 0:
			return 0
		case y > 1:
			return 1
		}
		return y
	}, nil
}

// inferParamUnary checks the attributes of an op with a param function,
// then infers as infer does.
func inferParamUnary(param func(n *ir.Node) (func(float64) float64, error), infer InferFunc) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if _, err := param(n); err != nil {
			return nil, err
		}
		return infer(n, opset, in)
	}
}

// inferUnary is the Infer of a same-type, same-shape op of one input.
func inferUnary(allowed []ir.DType) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := needValues(n, in, 1); err != nil {
			return nil, err
		}
		if err := checkType(n, "input", in[0].Type.DType, allowed); err != nil {
			return nil, err
		}
		t := in[0].Type
		t.Shape = slices.Clone(t.Shape)
		return []Value{{Type: t}}, nil
	}
}

func (u *unaryOp) run(allowed []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 1); err != nil {
			return nil, err
		}
		x := in[0]
		if err := checkType(n, "input", x.DType, allowed); err != nil {
			return nil, err
		}
		out, err := newOutput(ctx, x.DType, x.Shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		var f32 func(dst, src []float32, threads int)
		if u.f32 != nil && x.DType == ir.Float {
			f32 = u.f32(n)
		}
		switch {
		case f32 != nil:
			if u.param != nil { // the attributes' errors, as the float64 path reports them
				if _, err := u.param(n); err != nil {
					return nil, err
				}
			}
			f32(out.Float32s(), x.Float32s(), computeThreads(ctx))
		case u.direct != nil:
			err = u.direct(out, x)
		case u.param != nil:
			var f func(float64) float64
			if f, err = u.param(n); err != nil {
				return nil, err
			}
			err = unaryFloat(f, out, x, computeThreads(ctx))
		default:
			err = unaryFloat(u.float, out, x, computeThreads(ctx))
		}
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

// unaryFloatChunk is how many float32 elements one task of unaryFloat
// takes: float64 math functions cost 5–20 ns an element, so a large
// tensor (a rotary embedding's Cos and Sin) splits over the threads.
const unaryFloatChunk = 1 << 11

// unaryFloat applies f elementwise, float32 tensors on up to threads
// threads; integer tensors go through float64 and back (truncating).
func unaryFloat(f func(float64) float64, o, x *ir.Tensor, threads int) error {
	switch a := x.Data.(type) {
	case []float32:
		dst := o.Data.([]float32)
		parallelFor(threads, (len(dst)+unaryFloatChunk-1)/unaryFloatChunk, func(t int) {
			lo, hi := t*unaryFloatChunk, min(len(dst), (t+1)*unaryFloatChunk)
			mapSlice(dst[lo:hi], a[lo:hi], func(v float32) float32 { return float32(f(float64(v))) })
		})
	case []float64:
		mapSlice(o.Data.([]float64), a, f)
	case []uint16:
		if x.DType == ir.Float16 {
			mapSlice(o.Data.([]uint16), a, func(v uint16) uint16 {
				return ir.Float32ToFloat16(float32(f(float64(ir.Float16ToFloat32(v)))))
			})
			return nil
		}
		mapSlice(o.Data.([]uint16), a, viaFloat[uint16](f))
	case []int64:
		mapSlice(o.Data.([]int64), a, viaFloat[int64](f))
	case []int32:
		mapSlice(o.Data.([]int32), a, viaFloat[int32](f))
	case []int16:
		mapSlice(o.Data.([]int16), a, viaFloat[int16](f))
	case []int8:
		mapSlice(o.Data.([]int8), a, viaFloat[int8](f))
	case []uint8:
		mapSlice(o.Data.([]uint8), a, viaFloat[uint8](f))
	case []uint32:
		mapSlice(o.Data.([]uint32), a, viaFloat[uint32](f))
	case []uint64:
		mapSlice(o.Data.([]uint64), a, viaFloat[uint64](f))
	default:
		return fmt.Errorf("unsupported element type %v", x.DType)
	}
	return nil
}

func viaFloat[T intElem](f func(float64) float64) func(T) T {
	return func(v T) T { return T(f(float64(v))) }
}

// mapSlice sets o[i] = f(a[i]).
func mapSlice[A, O any](o []O, a []A, f func(A) O) {
	a = a[:len(o)]
	for i := range o {
		o[i] = f(a[i])
	}
}

// negTensor negates floats and signed integers (integers wrap: -MinInt = MinInt).
func negTensor(o, x *ir.Tensor) error {
	switch a := x.Data.(type) {
	case []float32:
		negLoop(o.Data.([]float32), a)
	case []float64:
		negLoop(o.Data.([]float64), a)
	case []int64:
		negLoop(o.Data.([]int64), a)
	case []int32:
		negLoop(o.Data.([]int32), a)
	case []int16:
		negLoop(o.Data.([]int16), a)
	case []int8:
		negLoop(o.Data.([]int8), a)
	case []uint16:
		if x.DType != ir.Float16 {
			return fmt.Errorf("unsupported element type %v", x.DType)
		}
		od := o.Data.([]uint16)
		for i, v := range a {
			od[i] = v ^ 0x8000 // flip the sign bit
		}
	default:
		return fmt.Errorf("unsupported element type %v", x.DType)
	}
	return nil
}

func negLoop[T signedElem | floatElem](o, a []T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = -a[i]
	}
}

// absTensor takes the absolute value of any numeric type.
func absTensor(o, x *ir.Tensor) error {
	switch a := x.Data.(type) {
	case []float32:
		mapSlice(o.Data.([]float32), a, func(v float32) float32 {
			return math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
		})
	case []float64:
		mapSlice(o.Data.([]float64), a, math.Abs)
	case []int64:
		absLoop(o.Data.([]int64), a)
	case []int32:
		absLoop(o.Data.([]int32), a)
	case []int16:
		absLoop(o.Data.([]int16), a)
	case []int8:
		absLoop(o.Data.([]int8), a)
	case []uint16:
		if x.DType == ir.Float16 {
			mapSlice(o.Data.([]uint16), a, func(v uint16) uint16 { return v &^ 0x8000 })
			return nil
		}
		copy(o.Data.([]uint16), a)
	case []uint8:
		copy(o.Data.([]uint8), a)
	case []uint32:
		copy(o.Data.([]uint32), a)
	case []uint64:
		copy(o.Data.([]uint64), a)
	default:
		return fmt.Errorf("unsupported element type %v", x.DType)
	}
	return nil
}

func absLoop[T signedElem](o, a []T) {
	a = a[:len(o)]
	for i := range o {
		if v := a[i]; v < 0 {
			o[i] = -v
		} else {
			o[i] = v
		}
	}
}

// reluTensor computes max(x, 0) for floats and signed integers; NaN stays NaN.
func reluTensor(o, x *ir.Tensor) error {
	switch a := x.Data.(type) {
	case []float32:
		reluLoop(o.Data.([]float32), a)
	case []float64:
		reluLoop(o.Data.([]float64), a)
	case []int64:
		reluLoop(o.Data.([]int64), a)
	case []int32:
		reluLoop(o.Data.([]int32), a)
	case []int16:
		reluLoop(o.Data.([]int16), a)
	case []int8:
		reluLoop(o.Data.([]int8), a)
	case []uint16:
		if x.DType != ir.Float16 {
			return fmt.Errorf("unsupported element type %v", x.DType)
		}
		mapSlice(o.Data.([]uint16), a, func(v uint16) uint16 {
			if v&0x8000 != 0 && v&0x7fff != 0 && v&0x7fff <= 0x7c00 { // negative, not NaN
				return 0
			}
			return v
		})
	default:
		return fmt.Errorf("unsupported element type %v", x.DType)
	}
	return nil
}

// reluKernel is Relu's float32 kernel.
func reluKernel(*ir.Node) func(dst, src []float32, threads int) { return reluSlice }

// reluChunk is the elements of one task of reluSlice.
const reluChunk = 1 << 15

// reluSlice sets dst[i] = max(src[i], 0) on up to threads threads, with
// AVX-512 where the CPU has it.
func reluSlice(dst, src []float32, threads int) {
	src = src[:len(dst)]
	tasks := (len(dst) + reluChunk - 1) / reluChunk
	parallelFor(threads, tasks, func(t int) {
		lo, hi := t*reluChunk, min(len(dst), (t+1)*reluChunk)
		reluSerial(dst[lo:hi], src[lo:hi])
	})
}

// reluSerial is reluSlice on the calling goroutine.
func reluSerial(dst, src []float32) {
	lo := 0
	if v := len(dst) / 16 * 16; kernel.AVX512 && v > 0 {
		kernel.Relu16(&dst[0], &src[0], v)
		lo = v
	}
	reluLoop(dst[lo:], src[lo:len(dst)])
}

// reluLoop is branch-free (the builtin max, which keeps NaN): on the
// activations of a Linear layer, about half negative at random, a branch
// per element mispredicted often enough to make a 128×3072 Relu 9× slower.
func reluLoop[T signedElem | floatElem](o, a []T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = max(a[i], 0)
	}
}

// signTensor computes the sign (-1, 0 or 1) of any numeric type; NaN stays
// NaN and -0 gives +0, as numpy's sign does.
func signTensor(o, x *ir.Tensor) error {
	switch a := x.Data.(type) {
	case []float32:
		signLoop(o.Data.([]float32), a)
	case []float64:
		signLoop(o.Data.([]float64), a)
	case []int64:
		signLoop(o.Data.([]int64), a)
	case []int32:
		signLoop(o.Data.([]int32), a)
	case []int16:
		signLoop(o.Data.([]int16), a)
	case []int8:
		signLoop(o.Data.([]int8), a)
	case []uint16:
		if x.DType == ir.Float16 {
			mapSlice(o.Data.([]uint16), a, func(v uint16) uint16 {
				switch {
				case v&0x7fff == 0: // ±0
					return 0
				case v&0x7fff > 0x7c00: // NaN
					return v
				case v&0x8000 != 0:
					return 0xbc00 // -1
				}
				return 0x3c00 // 1
			})
			return nil
		}
		signLoop(o.Data.([]uint16), a)
	case []uint8:
		signLoop(o.Data.([]uint8), a)
	case []uint32:
		signLoop(o.Data.([]uint32), a)
	case []uint64:
		signLoop(o.Data.([]uint64), a)
	default:
		return fmt.Errorf("unsupported element type %v", x.DType)
	}
	return nil
}

func signLoop[T numElem](o, a []T) {
	a = a[:len(o)]
	var one T = 1
	for i := range o {
		switch v := a[i]; {
		case v > 0:
			o[i] = one
		case v < 0: // signed types only
			o[i] = -one
		case v != v: // NaN
			o[i] = v
		default: // ±0
			o[i] = 0
		}
	}
}
