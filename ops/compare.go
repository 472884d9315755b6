package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// Comparisons: Equal, Less, Greater, LessOrEqual, GreaterOrEqual. Both
// inputs share one element type and broadcast; the output is bool. NaN
// compares unequal and unordered to everything, as in IEEE 754. Versions:
// Equal-11 takes every numeric type, Equal-19 strings too; Less and
// Greater-9 take integers; 13 and 16 (LessOrEqual, GreaterOrEqual) only add
// bfloat16. The opset-1 forms broadcast with attributes, which attnrun does
// not implement.

type cmpOp int

const (
	cmpEq cmpOp = iota
	cmpLt
	cmpGt
	cmpLe
	cmpGe
)

func init() {
	eq7 := []ir.DType{ir.Bool, ir.Int32, ir.Int64}
	eq19 := append(append([]ir.DType{}, numericBool...), ir.String)
	equalTypes := func(since int) []ir.DType {
		switch {
		case since >= 19:
			return eq19
		case since >= 11:
			return numericBool
		}
		return eq7
	}
	ordered := typesFrom(9, FloatTypes, NumericTypes)
	for _, c := range []struct {
		name   string
		op     cmpOp
		doc    string
		ranges []opRange
	}{
		{"Equal", cmpEq, "elementwise a == b with broadcasting (strings from opset 19)", typedVersions(equalTypes, 7, 11, 13, 19)},
		{"Less", cmpLt, "elementwise a < b with broadcasting", typedVersions(ordered, 7, 9, 13)},
		{"Greater", cmpGt, "elementwise a > b with broadcasting", typedVersions(ordered, 7, 9, 13)},
		{"LessOrEqual", cmpLe, "elementwise a <= b with broadcasting", typedVersions(always(NumericTypes), 12, 16)},
		{"GreaterOrEqual", cmpGe, "elementwise a >= b with broadcasting", typedVersions(always(NumericTypes), 12, 16)},
	} {
		for _, r := range c.ranges {
			Register(&Schema{
				OpType: c.name, Since: r.since, Until: r.until,
				MinInputs: 2, MaxInputs: 2, TypeInput: 0, DTypes: r.types,
				Infer: inferCompare(c.op, r.types),
				Run:   runCompare(c.op, r.types),
				Doc:   c.doc,
			})
		}
	}
}

func runCompare(op cmpOp, allowed []ir.DType) RunFunc {
	return func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
		_, shape, err := broadcastOperands(n, in, allowed)
		if err != nil {
			return nil, err
		}
		out, err := newOutput(ctx, ir.Bool, shape)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		if err := compare(computeThreads(ctx), op, out, in[0], in[1]); err != nil {
			return nil, n.Errorf("%w", err)
		}
		return []*ir.Tensor{out}, nil
	}
}

// compare fills the bool tensor o with a op b, numbers on up to threads
// threads.
func compare(threads int, op cmpOp, o, a, b *ir.Tensor) error {
	ob := o.Data.([]bool)
	switch ad := a.Data.(type) {
	case []float32:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]float32), b.Shape)
	case []float64:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]float64), b.Shape)
	case []int64:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]int64), b.Shape)
	case []int32:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]int32), b.Shape)
	case []int16:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]int16), b.Shape)
	case []int8:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]int8), b.Shape)
	case []uint8:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]uint8), b.Shape)
	case []uint16:
		if a.DType == ir.Float16 {
			return compareThreads(threads, op, ob, o.Shape, halfToFloat32(ad), a.Shape, halfToFloat32(b.Data.([]uint16)), b.Shape)
		}
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]uint16), b.Shape)
	case []uint32:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]uint32), b.Shape)
	case []uint64:
		return compareThreads(threads, op, ob, o.Shape, ad, a.Shape, b.Data.([]uint64), b.Shape)
	case []bool:
		if op != cmpEq {
			return fmt.Errorf("bool tensors can only be compared for equality")
		}
		return applyBinary(ob, o.Shape, ad, a.Shape, b.Data.([]bool), b.Shape,
			elemLoops(func(x, y bool) bool { return x == y }))
	case []string:
		if op != cmpEq {
			return fmt.Errorf("string tensors can only be compared for equality")
		}
		return applyBinary(ob, o.Shape, ad, a.Shape, b.Data.([]string), b.Shape,
			elemLoops(func(x, y string) bool { return x == y }))
	}
	return fmt.Errorf("cannot compare %v tensors", a.DType)
}

// compareThreads fills o with a op b on up to threads threads
// (applyBinaryThreads), with the comparison written out in each loop: a
// mask an export builds at run time compares S² elements (Greater of a
// Range with a column of positions, Equal with 0), where a call per
// element cost 2 ns of each.
func compareThreads[T numElem](threads int, op cmpOp, o []bool, oShape []int, a []T, aShape []int, b []T, bShape []int) error {
	var l binLoops[T, T, bool]
	switch op {
	case cmpEq:
		l = binLoops[T, T, bool]{vv: eqVV[T], vs: eqVS[T], sv: eqSV[T]}
	case cmpGt:
		l = binLoops[T, T, bool]{vv: gtVV[T], vs: gtVS[T], sv: gtSV[T]}
	case cmpLt:
		l = binLoops[T, T, bool]{vv: ltVV[T], vs: ltVS[T], sv: ltSV[T]}
	case cmpGe:
		l = binLoops[T, T, bool]{vv: geVV[T], vs: geVS[T], sv: geSV[T]}
	case cmpLe:
		l = binLoops[T, T, bool]{vv: leVV[T], vs: leVS[T], sv: leSV[T]}
	default:
		return fmt.Errorf("unknown comparison %d", op)
	}
	if threads <= 1 || len(o) < 2*binaryParallelMin {
		return applyBinary(o, oShape, a, aShape, b, bShape, l)
	}
	return applyBinaryThreads(threads, o, oShape, a, aShape, b, bShape, l)
}

// The comparisons' inner loops, the operator inline.

func eqVV[T numElem](o []bool, a, b []T) {
	a, b = a[:len(o)], b[:len(o)]
	for i := range o {
		o[i] = a[i] == b[i]
	}
}

func eqVS[T numElem](o []bool, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] == b
	}
}

func gtVV[T numElem](o []bool, a, b []T) {
	a, b = a[:len(o)], b[:len(o)]
	for i := range o {
		o[i] = a[i] > b[i]
	}
}

func gtVS[T numElem](o []bool, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] > b
	}
}

func ltVS[T numElem](o []bool, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] < b
	}
}

func geVV[T numElem](o []bool, a, b []T) {
	a, b = a[:len(o)], b[:len(o)]
	for i := range o {
		o[i] = a[i] >= b[i]
	}
}

func geVS[T numElem](o []bool, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] >= b
	}
}

func leVS[T numElem](o []bool, a []T, b T) {
	a = a[:len(o)]
	for i := range o {
		o[i] = a[i] <= b
	}
}

// The other forms are those above with the operands swapped.

func eqSV[T numElem](o []bool, a T, b []T) { eqVS(o, b, a) }
func gtSV[T numElem](o []bool, a T, b []T) { ltVS(o, b, a) }
func ltVV[T numElem](o []bool, a, b []T)   { gtVV(o, b, a) }
func ltSV[T numElem](o []bool, a T, b []T) { gtVS(o, b, a) }
func geSV[T numElem](o []bool, a T, b []T) { leVS(o, b, a) }
func leVV[T numElem](o []bool, a, b []T)   { geVV(o, b, a) }
func leSV[T numElem](o []bool, a T, b []T) { geVS(o, b, a) }

// inferCompare is the comparisons' Infer. An Equal of two shape vectors
// whose elements are known symbolically (Value.Sym) is decided where it
// can be: equal literals or the same symbol are equal; a symbol (a dim,
// never negative) differs from a negative literal. PyTorch's expand()
// exports Where(Equal(shape, -1), ones, shape); deciding the Equal keeps
// the shape symbolic through the Where.
func inferCompare(op cmpOp, allowed []ir.DType) InferFunc {
	infer := inferSameTypeBroadcast(allowed, ir.Bool)
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		out, err := infer(n, opset, in)
		if err != nil || op != cmpEq || out[0].Const != nil {
			return out, err
		}
		a, okA := SymOf(in[0])
		b, okB := SymOf(in[1])
		if !okA || !okB || !symVector(in[0]) || !symVector(in[1]) || (len(a) != len(b) && len(a) != 1 && len(b) != 1) {
			return out, nil
		}
		size := max(len(a), len(b))
		res := make([]bool, size)
		for i := range res {
			x, y := a[min(i, len(a)-1)], b[min(i, len(b)-1)]
			xv, xLit := SymInt(x)
			yv, yLit := SymInt(y)
			switch {
			case xLit && yLit:
				res[i] = xv == yv
			case isSymbol(x) && x == y:
				res[i] = true
			case (isSymbol(x) && yLit && yv < 0) || (isSymbol(y) && xLit && xv < 0):
				res[i] = false
			default:
				return out, nil
			}
		}
		var shape []int
		if len(in[0].Type.Shape) == 1 || len(in[1].Type.Shape) == 1 {
			shape = []int{size}
		}
		out[0].Const = ir.FromSlice(shape, res)
		return out, nil
	}
}

// symVector reports whether a value is a scalar or 1-D tensor of known
// rank (the forms Sym describes).
func symVector(v Value) bool { return v.Type.RankKnown && len(v.Type.Shape) <= 1 }
