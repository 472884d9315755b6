package ops

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
)

// Mod: elementwise remainder of a divided by b with numpy broadcasting. With
// fmod 0 (the default) the remainder takes the divisor's sign, as Python's %
// and numpy's mod do; with fmod 1 it takes the dividend's, as C's fmod
// does. Float inputs need fmod 1 (the spec says so and ONNX Runtime refuses
// otherwise). An integer remainder by zero is an error rather than
// undefined behaviour; a float one is NaN. Mod-13 only adds bfloat16.

func init() {
	for _, r := range versions(10, 13) {
		Register(&Schema{
			OpType: "Mod", Since: r[0], Until: r[1], MinInputs: 2, MaxInputs: 2,
			TypeInput: 0, DTypes: NumericTypes,
			Infer: inferMod,
			Run:   runMod,
			Doc:   "elementwise remainder with broadcasting: sign of the divisor, or of the dividend with fmod=1 (floats need fmod=1)",
		})
	}
}

// modFmod reads the fmod attribute and checks it against the element type.
func modFmod(n *ir.Node, dt ir.DType) (bool, error) {
	f, err := n.AttrInt("fmod", 0)
	if err != nil {
		return false, n.Errorf("%w", err)
	}
	if f != 0 && f != 1 {
		return false, n.Errorf("fmod must be 0 or 1, got %d", f)
	}
	if f == 0 && dt.IsFloat() {
		return false, n.Errorf("fmod must be 1 for %v inputs", dt)
	}
	return f == 1, nil
}

func inferMod(n *ir.Node, opset int, in []Value) ([]Value, error) {
	out, err := inferSameTypeBroadcast(NumericTypes, ir.Undefined)(n, opset, in)
	if err != nil {
		return nil, err
	}
	if _, err := modFmod(n, in[0].Type.DType); err != nil {
		return nil, err
	}
	return out, nil
}

func runMod(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	dt, shape, err := broadcastOperands(n, in, NumericTypes)
	if err != nil {
		return nil, err
	}
	fmod, err := modFmod(n, dt)
	if err != nil {
		return nil, err
	}
	out, err := newOutput(ctx, dt, shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	a, b := in[0], in[1]
	switch dt {
	case ir.Float:
		err = applyBinary(out.Data.([]float32), shape, a.Data.([]float32), a.Shape, b.Data.([]float32), b.Shape, elemLoops(fmodFloat[float32]))
	case ir.Double:
		err = applyBinary(out.Data.([]float64), shape, a.Data.([]float64), a.Shape, b.Data.([]float64), b.Shape, elemLoops(fmodFloat[float64]))
	case ir.Float16:
		of := make([]float32, out.Len())
		err = applyBinary(of, shape, halfToFloat32s(a.Data.([]uint16)), a.Shape, halfToFloat32s(b.Data.([]uint16)), b.Shape, elemLoops(fmodFloat[float32]))
		float32ToHalf(out.Data.([]uint16), of)
	case ir.Int8:
		err = modInts(out.Data.([]int8), shape, a.Data.([]int8), a.Shape, b.Data.([]int8), b.Shape, fmod)
	case ir.Int16:
		err = modInts(out.Data.([]int16), shape, a.Data.([]int16), a.Shape, b.Data.([]int16), b.Shape, fmod)
	case ir.Int32:
		err = modInts(out.Data.([]int32), shape, a.Data.([]int32), a.Shape, b.Data.([]int32), b.Shape, fmod)
	case ir.Int64:
		err = modInts(out.Data.([]int64), shape, a.Data.([]int64), a.Shape, b.Data.([]int64), b.Shape, fmod)
	case ir.Uint8:
		err = modInts(out.Data.([]uint8), shape, a.Data.([]uint8), a.Shape, b.Data.([]uint8), b.Shape, fmod)
	case ir.Uint16:
		err = modInts(out.Data.([]uint16), shape, a.Data.([]uint16), a.Shape, b.Data.([]uint16), b.Shape, fmod)
	case ir.Uint32:
		err = modInts(out.Data.([]uint32), shape, a.Data.([]uint32), a.Shape, b.Data.([]uint32), b.Shape, fmod)
	case ir.Uint64:
		err = modInts(out.Data.([]uint64), shape, a.Data.([]uint64), a.Shape, b.Data.([]uint64), b.Shape, fmod)
	default:
		err = fmt.Errorf("unsupported element type %v", dt)
	}
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{out}, nil
}

// fmodFloat is C's fmod: the remainder with the dividend's sign (exact, so
// computing in float64 and rounding back loses nothing).
func fmodFloat[T floatElem](a, b T) T { return T(math.Mod(float64(a), float64(b))) }

// modInts computes the integer remainder after checking the divisors for
// zero: truncated (Go's %, the dividend's sign) with fmod, floored (the
// divisor's sign) without.
func modInts[T intElem](o []T, oShape []int, a []T, aShape []int, b []T, bShape []int, fmod bool) error {
	for _, v := range b {
		if v == 0 {
			return fmt.Errorf("integer remainder by zero")
		}
	}
	f := func(x, y T) T { return x % y }
	if !fmod {
		f = func(x, y T) T {
			r := x % y
			if r != 0 && (r < 0) != (y < 0) {
				r += y
			}
			return r
		}
	}
	return applyBinary(o, oShape, a, aShape, b, bShape, elemLoops(f))
}
