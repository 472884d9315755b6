package ops

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
)

// Binary arithmetic: Add, Sub, Mul, Div (numpy broadcasting from opset 7)
// and Pow.
//
// attnrun extension: Add also takes two bool tensors and computes their
// logical or. ONNX does not allow bool for Add, but PyTorch exports
// `bool_tensor + bool_tensor` (seed 000's causal mask plus padding mask) as
// Add, meaning or; ONNX Runtime refuses such models, attnrun runs them.
//
// Integer Div truncates toward zero as C does; an integer division by zero
// is an error rather than undefined behaviour.

type arithOp int

const (
	opAdd arithOp = iota
	opSub
	opMul
	opDiv
)

var arithNames = [...]string{"Add", "Sub", "Mul", "Div"}

func init() {
	// Types by opset: 7 (and 13, which only adds bfloat16) take
	// float16/float/double/int32/int64/uint32/uint64; 14 adds the 8- and
	// 16-bit integers. Versions 1 and 6 broadcast the old way (attributes
	// broadcast and axis), which attnrun does not implement.
	for op, name := range arithNames {
		t7, t14 := arith7Types, NumericTypes
		if arithOp(op) == opAdd {
			t7, t14 = withBool(t7), withBool(t14)
		}
		for _, r := range []struct {
			since, until int
			types        []ir.DType
		}{{7, 12, t7}, {13, 13, t7}, {14, MaxOpset, t14}} {
			doc := fmt.Sprintf("elementwise %s with numpy broadcasting", name)
			if arithOp(op) == opAdd {
				doc += " (bool + bool = logical or: an attnrun extension)"
			}
			Register(&Schema{
				OpType: name, Since: r.since, Until: r.until,
				MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: r.types,
				Infer: inferSameTypeBroadcast(r.types, ir.Undefined),
				Run:   runArith(arithOp(op), r.types),
				Doc:   doc,
			})
		}
	}
	// Pow: 12 lets the exponent have another (numeric) type and the base be
	// int32/int64; 13 and 15 only add bfloat16 (base, then exponent).
	powBase12 := append(append([]ir.DType{}, FloatTypes...), ir.Int32, ir.Int64)
	Register(&Schema{
		OpType: "Pow", Since: 7, Until: 11, MinInputs: 2, MaxInputs: 2,
		TypeInput: 0, DTypes: FloatTypes,
		Infer: inferSameTypeBroadcast(FloatTypes, ir.Undefined),
		Run:   runPow(FloatTypes, nil),
		Doc:   "elementwise power, base and exponent of one float type",
	})
	for _, r := range versions(12, 13, 15) {
		Register(&Schema{
			OpType: "Pow", Since: r[0], Until: r[1], MinInputs: 2, MaxInputs: 2,
			TypeInput: 0, DTypes: powBase12,
			Infer: inferPow(powBase12, NumericTypes),
			Run:   runPow(powBase12, NumericTypes),
			Doc:   "elementwise power; the output has the base's type",
		})
	}
}

// broadcastOperands checks the two inputs of a broadcasting binary op
// (present, well formed, one element type among allowed) and returns that
// type and the broadcast output shape.
func broadcastOperands(n *ir.Node, in []*ir.Tensor, allowed []ir.DType) (ir.DType, []int, error) {
	if err := checkTensors(n, in, 2); err != nil {
		return 0, nil, err
	}
	dt, err := sameTensorTypes(n, in[:2])
	if err != nil {
		return 0, nil, err
	}
	if err := checkType(n, "input", dt, allowed); err != nil {
		return 0, nil, err
	}
	shape, err := broadcastOf(n, in[0], in[1])
	if err != nil {
		return 0, nil, err
	}
	return dt, shape, nil
}

func runArith(op arithOp, allowed []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		dt, shape, err := broadcastOperands(n, in, allowed)
		if err != nil {
			return nil, err
		}
		out, err := newOutput(ctx, dt, shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		if err := arith(op, out, in[0], in[1], computeThreads(ctx)); err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

// arith computes o = a op b; o already has the broadcast shape. float32
// runs on up to threads threads (arithFloat32); the other types on one.
func arith(op arithOp, o, a, b *ir.Tensor, threads int) error {
	switch o.DType {
	case ir.Float:
		return arithFloat32(op, o.Data.([]float32), o.Shape, a.Data.([]float32), a.Shape, b.Data.([]float32), b.Shape, threads)
	case ir.Double:
		return arithT(op, o.Data.([]float64), o.Shape, a.Data.([]float64), a.Shape, b.Data.([]float64), b.Shape)
	case ir.Float16:
		of := make([]float32, len(o.Data.([]uint16)))
		err := arithT(op, of, o.Shape, halfToFloat32(a.Data.([]uint16)), a.Shape, halfToFloat32(b.Data.([]uint16)), b.Shape)
		float32ToHalf(o.Data.([]uint16), of)
		return err
	case ir.Int64:
		return intArith(op, o.Data.([]int64), o.Shape, a.Data.([]int64), a.Shape, b.Data.([]int64), b.Shape)
	case ir.Int32:
		return intArith(op, o.Data.([]int32), o.Shape, a.Data.([]int32), a.Shape, b.Data.([]int32), b.Shape)
	case ir.Int16:
		return intArith(op, o.Data.([]int16), o.Shape, a.Data.([]int16), a.Shape, b.Data.([]int16), b.Shape)
	case ir.Int8:
		return intArith(op, o.Data.([]int8), o.Shape, a.Data.([]int8), a.Shape, b.Data.([]int8), b.Shape)
	case ir.Uint64:
		return intArith(op, o.Data.([]uint64), o.Shape, a.Data.([]uint64), a.Shape, b.Data.([]uint64), b.Shape)
	case ir.Uint32:
		return intArith(op, o.Data.([]uint32), o.Shape, a.Data.([]uint32), a.Shape, b.Data.([]uint32), b.Shape)
	case ir.Uint16:
		return intArith(op, o.Data.([]uint16), o.Shape, a.Data.([]uint16), a.Shape, b.Data.([]uint16), b.Shape)
	case ir.Uint8:
		return intArith(op, o.Data.([]uint8), o.Shape, a.Data.([]uint8), a.Shape, b.Data.([]uint8), b.Shape)
	case ir.Bool:
		if op != opAdd {
			return fmt.Errorf("%s does not take bool", arithNames[op])
		}
		return applyBinary(o.Data.([]bool), o.Shape, a.Data.([]bool), a.Shape, b.Data.([]bool), b.Shape,
			elemLoops(func(x, y bool) bool { return x || y }))
	}
	return fmt.Errorf("%s does not take %v", arithNames[op], o.DType)
}

// intArith is arithT after checking integer divisors for zero (Go would
// panic; ONNX leaves it undefined).
func intArith[T intElem](op arithOp, o []T, oShape []int, a []T, aShape []int, b []T, bShape []int) error {
	if op == opDiv {
		for _, v := range b {
			if v == 0 {
				return fmt.Errorf("integer division by zero")
			}
		}
	}
	return arithT(op, o, oShape, a, aShape, b, bShape)
}

func arithT[T numElem](op arithOp, o []T, oShape []int, a []T, aShape []int, b []T, bShape []int) error {
	loops := arithLoops[T]()
	if op < 0 || int(op) >= len(loops) {
		return fmt.Errorf("unknown arithmetic op %d", op)
	}
	return applyBinary(o, oShape, a, aShape, b, bShape, loops[op])
}

// arithLoops returns each arithmetic op's Go loops for element type T,
// indexed by arithOp.
func arithLoops[T numElem]() [4]binLoops[T, T, T] {
	return [...]binLoops[T, T, T]{
		opAdd: {vv: addVV[T], vs: addVS[T], sv: addSV[T]},
		opSub: {vv: subVV[T], vs: subVS[T], sv: subSV[T]},
		opMul: {vv: mulVV[T], vs: mulVS[T], sv: mulSV[T]},
		opDiv: {vv: divVV[T], vs: divVS[T], sv: divSV[T]},
	}
}

// The arithmetic inner loops, written out so that the operator is inlined.

func addVV[T numElem](o, a, b []T) {
	a, b = a[:len(o)], b[:len(o)]
	for i := range o {
		o[i] = a[i] + b[i]
	}
}

func addVS[T numElem](o, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] + b
	}
}

func addSV[T numElem](o []T, a T, b []T) {
	b = b[:len(o)]
	for i := range o {
		o[i] = a + b[i]
	}
}

func subVV[T numElem](o, a, b []T) {
	a, b = a[:len(o)], b[:len(o)]
	for i := range o {
		o[i] = a[i] - b[i]
	}
}

func subVS[T numElem](o, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] - b
	}
}

func subSV[T numElem](o []T, a T, b []T) {
	b = b[:len(o)]
	for i := range o {
		o[i] = a - b[i]
	}
}

func mulVV[T numElem](o, a, b []T) {
	a, b = a[:len(o)], b[:len(o)]
	for i := range o {
		o[i] = a[i] * b[i]
	}
}

func mulVS[T numElem](o, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] * b
	}
}

func mulSV[T numElem](o []T, a T, b []T) {
	b = b[:len(o)]
	for i := range o {
		o[i] = a * b[i]
	}
}

func divVV[T numElem](o, a, b []T) {
	a, b = a[:len(o)], b[:len(o)]
	for i := range o {
		o[i] = a[i] / b[i]
	}
}

func divVS[T numElem](o, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] / b
	}
}

func divSV[T numElem](o []T, a T, b []T) {
	b = b[:len(o)]
	for i := range o {
		o[i] = a / b[i]
	}
}

// inferPow checks Pow-12+ types: the base from baseTypes, the exponent
// from expTypes (any numeric type, independent of the base); the output
// has the base's type.
func inferPow(baseTypes, expTypes []ir.DType) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := needValues(n, in, 2); err != nil {
			return nil, err
		}
		if err := checkType(n, "base (input 0)", in[0].Type.DType, baseTypes); err != nil {
			return nil, err
		}
		if err := checkType(n, "exponent (input 1)", in[1].Type.DType, expTypes); err != nil {
			return nil, err
		}
		v, err := broadcastValue(n, in[0].Type.DType, in[:2])
		if err != nil {
			return nil, err
		}
		return []Value{v}, nil
	}
}

// runPow runs Pow. expTypes nil means the exponent must have the base's type
// (Pow-7).
func runPow(baseTypes, expTypes []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		if err := checkTensors(n, in, 2); err != nil {
			return nil, err
		}
		x, y := in[0], in[1]
		if err := checkType(n, "base (input 0)", x.DType, baseTypes); err != nil {
			return nil, err
		}
		if expTypes == nil {
			if _, err := sameTensorTypes(n, in[:2]); err != nil {
				return nil, err
			}
		} else if err := checkType(n, "exponent (input 1)", y.DType, expTypes); err != nil {
			return nil, err
		}
		shape, err := broadcastOf(n, x, y)
		if err != nil {
			return nil, err
		}
		out, err := newOutput(ctx, x.DType, shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		e, err := toFloat64s(y)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		switch x.DType {
		case ir.Float:
			err = applyBinary(out.Data.([]float32), shape, x.Data.([]float32), x.Shape, e, y.Shape, powFloatLoops[float32]())
		case ir.Double:
			err = applyBinary(out.Data.([]float64), shape, x.Data.([]float64), x.Shape, e, y.Shape, powFloatLoops[float64]())
		case ir.Float16:
			of := make([]float32, len(out.Data.([]uint16)))
			err = applyBinary(of, shape, halfToFloat32(x.Data.([]uint16)), x.Shape, e, y.Shape, powFloatLoops[float32]())
			float32ToHalf(out.Data.([]uint16), of)
		case ir.Int32:
			err = applyBinary(out.Data.([]int32), shape, x.Data.([]int32), x.Shape, e, y.Shape, elemLoops(powInt[int32]))
		case ir.Int64:
			err = applyBinary(out.Data.([]int64), shape, x.Data.([]int64), x.Shape, e, y.Shape, elemLoops(powInt[int64]))
		default:
			err = fmt.Errorf("base (input 0) has element type %v, which Pow does not take", x.DType)
		}
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

// powFloatLoops computes float powers in float64; a scalar exponent of 2
// or 1 (common in exported LayerNorm/variance code) takes an exact fast path,
// and float32 bases with another small integer exponent (GPT-2's gelu_new
// x³ outside the fused Gelu, 1/x, 1/x²) multiply in float64 instead of
// calling math.Pow: 20 ns an element otherwise.
func powFloatLoops[T floatElem]() binLoops[T, float64, T] {
	f := func(a T, b float64) T { return T(math.Pow(float64(a), b)) }
	l := elemLoops(f)
	var zero T
	_, float32Base := any(zero).(float32)
	l.vs = func(o, a []T, b float64) {
		a = a[:len(o)]
		switch {
		case b == 2:
			for i := range o {
				o[i] = a[i] * a[i]
			}
		case b == 1:
			copy(o, a)
		case float32Base && b == math.Trunc(b) && math.Abs(b) <= maxPowMulExp:
			powSmallInt(o, a, int(b))
		default:
			for i := range o {
				o[i] = T(math.Pow(float64(a[i]), b))
			}
		}
	}
	return l
}

// maxPowMulExp bounds the integer exponents powSmallInt takes: float32's
// largest finite value to the 4th power still fits a float64.
const maxPowMulExp = 4

// powSmallInt sets o[i] = a[i]^n for float32 elements and |n| ≤ 4 by
// products in float64, where x² is exact and x³, x⁴ are rounded once
// before the rounding to float32, as math.Pow's float64 result is; 1/p for
// n < 0 keeps IEEE's signed zeros and infinities (pow(-0, -1) = -Inf,
// pow(-Inf, -3) = -0), and n = 0 gives 1 even for NaN, as pow does.
func powSmallInt[T floatElem](o, a []T, n int) {
	k := n
	if k < 0 {
		k = -k
	}
	for i := range o {
		x := float64(a[i])
		p := 1.0
		for range k {
			p *= x
		}
		if n < 0 {
			p = 1 / p
		}
		o[i] = T(p)
	}
}

// powInt raises an integer base to an exponent: exactly (wrapping like C
// on overflow) for non-negative integral exponents, otherwise through
// float64 truncated toward zero (so 2^-1 = 0, (-1)^-1 = -1, 0^-1 = 0).
func powInt[T int32 | int64](a T, b float64) T {
	if b >= 0 && b == math.Trunc(b) && b < 1<<62 {
		e := uint64(b)
		r, x := T(1), a
		for e > 0 {
			if e&1 == 1 {
				r *= x
			}
			x *= x
			e >>= 1
		}
		return r
	}
	p := math.Pow(float64(a), b)
	if math.IsNaN(p) || math.IsInf(p, 0) {
		return 0
	}
	return T(p)
}

// toFloat64s converts a numeric tensor's elements to float64.
func toFloat64s(t *ir.Tensor) ([]float64, error) {
	switch d := t.Data.(type) {
	case []float64:
		return d, nil
	case []float32:
		return convertSlice[float32, float64](d), nil
	case []int64:
		return convertSlice[int64, float64](d), nil
	case []int32:
		return convertSlice[int32, float64](d), nil
	case []int16:
		return convertSlice[int16, float64](d), nil
	case []int8:
		return convertSlice[int8, float64](d), nil
	case []uint8:
		return convertSlice[uint8, float64](d), nil
	case []uint16:
		if t.DType == ir.Float16 {
			f := make([]float64, len(d))
			for i, v := range d {
				f[i] = float64(ir.Float16ToFloat32(v))
			}
			return f, nil
		}
		return convertSlice[uint16, float64](d), nil
	case []uint32:
		return convertSlice[uint32, float64](d), nil
	case []uint64:
		return convertSlice[uint64, float64](d), nil
	}
	return nil, fmt.Errorf("expected a numeric tensor, got %v", t.DType)
}

// convertSlice converts numeric elements with Go conversion rules.
func convertSlice[S, D numElem](s []S) []D {
	d := make([]D, len(s))
	for i, v := range s {
		d[i] = D(v)
	}
	return d
}

// Output-into forms of Add, Sub, Mul and Div for executors with a memory
// plan (see RunIntoFunc). The result may overwrite either operand when that
// operand has the output's shape: element i of the output depends only on
// element i of such an operand.
func init() {
	for op, name := range arithNames {
		for _, s := range registered(DomainONNX, name) {
			s.RunInto, s.InPlace = runArithInto(arithOp(op), s.DTypes), []int{0, 1}
		}
	}
}

func runArithInto(op arithOp, allowed []ir.DType) RunIntoFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
		dt, shape, err := broadcastOperands(n, in, allowed)
		if err != nil {
			return err
		}
		if err := checkIntoOutput(n, out, dt, shape); err != nil {
			return err
		}
		if err := arith(op, out[0], in[0], in[1], computeThreads(ctx)); err != nil {
			return n.Errorf("%w", err)
		}
		return nil
	}
}
