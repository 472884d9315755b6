package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// Test plumbing for the compute op families.

func cAttrInt(name string, v int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v}
}

func cAttrFloat(name string, v float32) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrFloat, Float: v}
}

func cAttrInts(name string, v ...int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInts, Ints: v}
}

// cNode makes a node of op with one input name per given input (nil = an
// omitted optional input) and nOut outputs.
func cNode(op string, nIn, nOut int, attrs ...*ir.Attribute) *ir.Node {
	n := &ir.Node{Name: "n", OpType: op, Attrs: attrs}
	for i := 0; i < nIn; i++ {
		n.Inputs = append(n.Inputs, fmt.Sprintf("in%d", i))
	}
	for i := 0; i < nOut; i++ {
		n.Outputs = append(n.Outputs, fmt.Sprintf("out%d", i))
	}
	return n
}

// cRun looks the op up at opset, infers output types from the inputs'
// types (integer inputs are passed as constants too), runs it, and checks
// that the outputs match what inference promised.
func cRun(t *testing.T, opset int, n *ir.Node, in ...*ir.Tensor) ([]*ir.Tensor, error) {
	t.Helper()
	s, err := Lookup(n.Domain, n.OpType, opset)
	if err != nil {
		return nil, err
	}
	for i, x := range in {
		if x == nil {
			n.Inputs[i] = ""
		}
	}
	if err := s.CheckArity(n); err != nil {
		return nil, n.Errorf("%w", err)
	}
	vals := make([]Value, len(in))
	for i, x := range in {
		if x == nil {
			continue
		}
		vals[i] = Value{Type: Known(x.DType, x.Shape)}
		if x.DType == ir.Int64 {
			vals[i].Const = x
		}
	}
	types, ierr := s.Infer(n, opset, vals)
	outs, rerr := s.Run(&Context{Opset: opset, Threads: 2}, n, in)
	if (ierr == nil) != (rerr == nil) {
		t.Fatalf("Infer error %v but Run error %v", ierr, rerr)
	}
	if rerr != nil {
		return nil, rerr
	}
	if len(types) != len(outs) {
		t.Fatalf("Infer gave %d outputs, Run %d", len(types), len(outs))
	}
	for i, o := range outs {
		if err := o.Check(); err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
		ti := types[i].Type
		if ti.DType != o.DType {
			t.Fatalf("output %d: Infer says %v, Run gave %v", i, ti.DType, o.DType)
		}
		if c, ok := ti.Shape.Concrete(); !ti.RankKnown || !ok || !SameShape(c, o.Shape) {
			t.Fatalf("output %d: Infer says %v, Run gave shape %v", i, ti, o.Shape)
		}
	}
	return outs, nil
}

// cRand makes a random float32 tensor in [-2, 2).
func cRand(r *rand.Rand, shape ...int) *ir.Tensor {
	x := ir.NewTensor(ir.Float, shape)
	for i := range x.Float32s() {
		x.Float32s()[i] = r.Float32()*4 - 2
	}
	return x
}

// cF32 makes a float32 tensor.
func cF32(shape []int, v ...float32) *ir.Tensor { return ir.FromSlice(shape, v) }

// cClose fails unless got's float elements are within tol (absolute plus
// relative) of want, NaN matching NaN.
func cClose(t *testing.T, what string, got *ir.Tensor, wantShape []int, want []float64, tol float64) {
	t.Helper()
	if !SameShape(got.Shape, wantShape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, wantShape)
	}
	var g []float64
	switch d := got.Data.(type) {
	case []float32:
		for _, v := range d {
			g = append(g, float64(v))
		}
	case []float64:
		g = d
	case []uint16:
		for _, v := range d {
			g = append(g, float64(ir.Float16ToFloat32(v)))
		}
	case []int32:
		for _, v := range d {
			g = append(g, float64(v))
		}
	case []int64:
		for _, v := range d {
			g = append(g, float64(v))
		}
	default:
		t.Fatalf("%s: unexpected data %T", what, got.Data)
	}
	if len(g) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(g), len(want))
	}
	for i := range g {
		w := want[i]
		if math.IsNaN(w) != math.IsNaN(g[i]) || (!math.IsNaN(w) && math.Abs(g[i]-w) > tol*(1+math.Abs(w))) {
			t.Fatalf("%s: element %d = %v, want %v (got %v)", what, i, g[i], w, g)
		}
	}
}

// cF64s widens float32 data.
func cF64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func TestKernelSetName(t *testing.T) {
	for _, tc := range []struct {
		avx512, avx2, embedded bool
		want                   string
	}{
		{true, true, true, "avx512+embedded-broadcast"},
		{true, true, false, "avx512"},
		{false, true, false, "avx2+fma"},
		{false, false, false, "go"},
	} {
		if got := kernelSetName(tc.avx512, tc.avx2, tc.embedded); got != tc.want {
			t.Errorf("kernelSetName(%v, %v, %v) = %q, want %q", tc.avx512, tc.avx2, tc.embedded, got, tc.want)
		}
	}
}
