package ops

import (
	"fmt"
	"slices"
	"strings"

	"github.com/attnrun/attnrun/ir"
)

// Shared plumbing of the elementwise op families (binary.go, unary.go,
// compare.go, logical.go, where.go, cast.go, minmax.go).

// numElem is every Go element type of a numeric tensor (float16 excluded: its
// kernels go through float32).
type numElem interface {
	~float32 | ~float64 | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// floatElem is the Go float element types.
type floatElem interface{ ~float32 | ~float64 }

// intElem is the Go integer element types.
type intElem interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// signedElem is the signed Go integer element types.
type signedElem interface {
	~int8 | ~int16 | ~int32 | ~int64
}

// Type sets used by the elementwise schemas.
var (
	boolOnly    = []ir.DType{ir.Bool}
	signedTypes = []ir.DType{ir.Int8, ir.Int16, ir.Int32, ir.Int64}
	floatSigned = append(append([]ir.DType{}, FloatTypes...), signedTypes...)
	// arith7Types is what Add/Sub/Mul/Div take from opset 7 to 13.
	arith7Types = []ir.DType{ir.Float, ir.Double, ir.Float16, ir.Int32, ir.Int64, ir.Uint32, ir.Uint64}
	// numericBool is every numeric type plus bool.
	numericBool = append(append([]ir.DType{}, NumericTypes...), ir.Bool)
	// plainTypes is every type but string.
	plainTypes = numericBool
)

func withBool(ts []ir.DType) []ir.DType { return append(append([]ir.DType{}, ts...), ir.Bool) }

// typeList formats a type set for error messages.
func typeList(ts []ir.DType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, ", ")
}

// checkType fails unless dt is one of allowed.
func checkType(n *ir.Node, what string, dt ir.DType, allowed []ir.DType) error {
	if slices.Contains(allowed, dt) {
		return nil
	}
	return n.Errorf("%s has element type %v; this op takes %s", what, dt, typeList(allowed))
}

// needValues fails when fewer than k inputs are present in the first k slots.
func needValues(n *ir.Node, in []Value, k int) error {
	if len(in) < k {
		return n.Errorf("needs %d inputs, got %d", k, len(in))
	}
	for i := 0; i < k; i++ {
		if !in[i].Present() {
			return n.Errorf("input %d is missing", i)
		}
	}
	return nil
}

// sameValueTypes returns the common element type of the given inputs.
func sameValueTypes(n *ir.Node, vs []Value) (ir.DType, error) {
	dt := vs[0].Type.DType
	for _, v := range vs[1:] {
		if v.Type.DType != dt {
			return 0, n.Errorf("inputs have different element types %v and %v", dt, v.Type.DType)
		}
	}
	return dt, nil
}

// broadcastValue infers the broadcast output of vs with element type dt:
// unknown rank if any input's rank is unknown.
func broadcastValue(n *ir.Node, dt ir.DType, vs []Value) (Value, error) {
	shapes := make([]ir.Shape, len(vs))
	for i, v := range vs {
		if !v.Type.RankKnown {
			return UnknownRank(dt), nil
		}
		shapes[i] = v.Type.Shape
	}
	s, err := BroadcastDims(shapes...)
	if err != nil {
		return Value{}, n.Errorf("%w", err)
	}
	return Typed(dt, s), nil
}

// inferSameTypeBroadcast is the Infer of ops whose first k inputs (k = len(in)
// for variadic ops) share one element type from allowed and broadcast; the
// output has type out, or the inputs' type when out is Undefined.
func inferSameTypeBroadcast(allowed []ir.DType, out ir.DType) InferFunc {
	return func(n *ir.Node, opset int, in []Value) ([]Value, error) {
		if err := needValues(n, in, max(len(in), 1)); err != nil {
			return nil, err
		}
		dt, err := sameValueTypes(n, in)
		if err != nil {
			return nil, err
		}
		if err := checkType(n, "input", dt, allowed); err != nil {
			return nil, err
		}
		odt := out
		if odt == ir.Undefined {
			odt = dt
		}
		v, err := broadcastValue(n, odt, in)
		if err != nil {
			return nil, err
		}
		return []Value{v}, nil
	}
}

// checkTensors validates that in has at least k tensors, all present and
// consistent with their dtype and shape.
func checkTensors(n *ir.Node, in []*ir.Tensor, k int) error {
	if len(in) < k {
		return n.Errorf("needs %d inputs, got %d", k, len(in))
	}
	for i, t := range in {
		if t == nil {
			return n.Errorf("input %d is missing", i)
		}
		if err := t.Check(); err != nil {
			return n.Errorf("input %d: %w", i, err)
		}
	}
	return nil
}

// sameTensorTypes returns the common element type of ts.
func sameTensorTypes(n *ir.Node, ts []*ir.Tensor) (ir.DType, error) {
	dt := ts[0].DType
	for _, t := range ts[1:] {
		if t.DType != dt {
			return 0, n.Errorf("inputs have different element types %v and %v", dt, t.DType)
		}
	}
	return dt, nil
}

// broadcastOf returns the broadcast shape of ts.
func broadcastOf(n *ir.Node, ts ...*ir.Tensor) ([]int, error) {
	shapes := make([][]int, len(ts))
	for i, t := range ts {
		shapes[i] = t.Shape
	}
	s, err := BroadcastShapes(shapes...)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return s, nil
}

// maxElements bounds the outputs the reference kernels allocate (2^40).
const maxElements = 1 << 40

// newOutput allocates a zeroed output tensor after checking its size, from
// ctx.Alloc when the executor gives one.
func newOutput(ctx *Context, dt ir.DType, shape []int) (*ir.Tensor, error) {
	n := ir.NumElements(shape)
	if n < 0 || n > maxElements {
		return nil, fmt.Errorf("output shape %v is too large", shape)
	}
	if !dt.Known() {
		return nil, fmt.Errorf("cannot allocate a tensor of type %v", dt)
	}
	if ctx != nil && ctx.Alloc != nil {
		return ctx.Alloc(dt, shape), nil
	}
	return ir.NewTensor(dt, shape), nil
}

// halfToFloat32 converts float16 bit patterns to float32.
func halfToFloat32(h []uint16) []float32 {
	f := make([]float32, len(h))
	for i, v := range h {
		f[i] = ir.Float16ToFloat32(v)
	}
	return f
}

// float32ToHalf converts float32 values to float16 bit patterns in dst.
func float32ToHalf(dst []uint16, f []float32) {
	for i, v := range f {
		dst[i] = ir.Float32ToFloat16(v)
	}
}
