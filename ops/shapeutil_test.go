package ops

import (
	"reflect"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// Test helpers for the shape and data-movement ops (prefix mv).

func mvNode(op string, nIn, nOut int, attrs ...*ir.Attribute) *ir.Node {
	n := &ir.Node{Name: "n", OpType: op, Attrs: attrs}
	for i := 0; i < nIn; i++ {
		n.Inputs = append(n.Inputs, "i"+string(rune('0'+i)))
	}
	for i := 0; i < nOut; i++ {
		n.Outputs = append(n.Outputs, "o"+string(rune('0'+i)))
	}
	return n
}

func mvInt(name string, v int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v}
}

func mvInts(name string, v ...int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInts, Ints: v}
}

func mvI64(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }

func mvF32(shape []int, v ...float32) *ir.Tensor { return ir.FromSlice(shape, v) }

// mvIota returns a float32 tensor holding 0, 1, 2, ...
func mvIota(shape ...int) *ir.Tensor {
	d := make([]float32, shapeProd(shape))
	for i := range d {
		d[i] = float32(i)
	}
	return ir.FromSlice(shape, d)
}

// mvCall runs the op (nil entries in in are omitted inputs) and, when Run
// succeeds, checks that Infer over the same inputs (all Const) agrees with
// the result types and shapes.
func mvCall(t *testing.T, opset int, n *ir.Node, in ...*ir.Tensor) ([]*ir.Tensor, error) {
	t.Helper()
	s, err := Lookup(n.Domain, n.OpType, opset)
	if err != nil {
		t.Fatalf("lookup: %v", err)
	}
	if err := s.CheckArity(n); err != nil {
		t.Fatalf("arity: %v", err)
	}
	out, err := s.Run(&Context{Opset: opset, Threads: 2}, n, in)
	if err != nil {
		return nil, err
	}
	vals := make([]Value, len(in))
	for i, x := range in {
		if x != nil {
			vals[i] = Value{Type: Known(x.DType, x.Shape), Const: x}
		}
	}
	inf, err := s.Infer(n, opset, vals)
	if err != nil {
		t.Fatalf("Run succeeded but Infer failed: %v", err)
	}
	if len(inf) != len(out) {
		t.Fatalf("Infer gave %d outputs, Run %d", len(inf), len(out))
	}
	for i := range out {
		if err := out[i].Check(); err != nil {
			t.Fatalf("output %d malformed: %v", i, err)
		}
		if inf[i].Type.DType != out[i].DType {
			t.Errorf("output %d: Infer dtype %v, Run %v", i, inf[i].Type.DType, out[i].DType)
		}
		if inf[i].Type.RankKnown {
			if c, ok := inf[i].Type.Shape.Concrete(); ok && !reflect.DeepEqual(c, append([]int{}, out[i].Shape...)) {
				t.Errorf("output %d: Infer shape %v, Run %v", i, inf[i].Type.Shape, out[i].Shape)
			}
		}
	}
	return out, nil
}

// mvRun is mvCall that fails the test on error.
func mvRun(t *testing.T, opset int, n *ir.Node, in ...*ir.Tensor) []*ir.Tensor {
	t.Helper()
	out, err := mvCall(t, opset, n, in...)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return out
}

// mvErr checks that Run fails with a message containing want.
func mvErr(t *testing.T, opset int, n *ir.Node, want string, in ...*ir.Tensor) {
	t.Helper()
	s, err := Lookup(n.Domain, n.OpType, opset)
	if err != nil {
		t.Fatalf("lookup: %v", err)
	}
	_, err = s.Run(&Context{Opset: opset, Threads: 1}, n, in)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run error = %v, want one containing %q", err, want)
	}
}

// mvInfer runs Infer on the given values.
func mvInfer(t *testing.T, opset int, n *ir.Node, in ...Value) ([]Value, error) {
	t.Helper()
	s, err := Lookup(n.Domain, n.OpType, opset)
	if err != nil {
		t.Fatalf("lookup: %v", err)
	}
	return s.Infer(n, opset, in)
}

// mvConst makes a Value for a constant tensor.
func mvConst(x *ir.Tensor) Value { return Value{Type: Known(x.DType, x.Shape), Const: x} }

// mvShape builds a symbolic shape: ints are sizes, strings symbols, nil unknown.
func mvShape(dims ...any) ir.Shape {
	s := ir.Shape{}
	for _, d := range dims {
		switch v := d.(type) {
		case int:
			s = append(s, ir.Dim{Value: int64(v)})
		case string:
			s = append(s, ir.Dim{Param: v})
		default:
			s = append(s, ir.UnknownDim)
		}
	}
	return s
}

// mvWant checks shape and data of a result.
func mvWant(t *testing.T, got *ir.Tensor, shape []int, data any) {
	t.Helper()
	if got == nil {
		t.Fatalf("nil result")
	}
	gs := append([]int{}, got.Shape...)
	ws := append([]int{}, shape...)
	if !reflect.DeepEqual(gs, ws) {
		t.Fatalf("shape %v, want %v", got.Shape, shape)
	}
	if !reflect.DeepEqual(got.Data, data) {
		t.Fatalf("data %v, want %v", got.Data, data)
	}
}

func TestSymLiteral(t *testing.T) {
	for _, v := range []int64{0, 1, 64, -1, -7} {
		got, ok := SymInt(SymLiteral(v))
		if !ok || got != v {
			t.Errorf("SymInt(SymLiteral(%d)) = %d, %v", v, got, ok)
		}
	}
	if _, ok := SymInt(ir.Dim{Param: "batch"}); ok {
		t.Error("a symbol read as a literal")
	}
	if _, ok := SymInt(ir.UnknownDim); ok {
		t.Error("an unknown dim read as a literal")
	}
}

func TestSymProdDiv(t *testing.T) {
	cases := []struct {
		in, by ir.Shape
		want   ir.Dim
	}{
		{mvShape("batch", "seq", 64), mvShape("batch", 4, 16), ir.Dim{Param: "seq"}},
		{mvShape("batch", "seq", 64), mvShape("batch", "seq"), ir.Dim{Value: 64}},
		{mvShape("batch", "seq", 64), mvShape(3), ir.UnknownDim},
		{mvShape("batch", nil, 64), mvShape(64), ir.UnknownDim},
		{mvShape("b", "s", 8), mvShape(2), ir.UnknownDim},
	}
	for _, c := range cases {
		if got := productOf(c.in).div(productOf(c.by)); got != c.want {
			t.Errorf("%v / %v = %v, want %v", c.in, c.by, got, c.want)
		}
	}
}

func TestStridedCopyAllTypes(t *testing.T) {
	// A 2x3 -> 3x2 transpose for every backing type.
	srcs := []any{
		[]float32{0, 1, 2, 3, 4, 5}, []float64{0, 1, 2, 3, 4, 5}, []int64{0, 1, 2, 3, 4, 5},
		[]int32{0, 1, 2, 3, 4, 5}, []int16{0, 1, 2, 3, 4, 5}, []int8{0, 1, 2, 3, 4, 5},
		[]uint8{0, 1, 2, 3, 4, 5}, []uint16{0, 1, 2, 3, 4, 5}, []uint32{0, 1, 2, 3, 4, 5},
		[]uint64{0, 1, 2, 3, 4, 5}, []string{"0", "1", "2", "3", "4", "5"},
	}
	for _, s := range srcs {
		x := ir.FromSlice([]int{2, 3}, s)
		got, err := Transpose(nil, x, []int{1, 0})
		if err != nil {
			t.Fatal(err)
		}
		// expected order: 0 3 1 4 2 5
		w := reflect.MakeSlice(reflect.TypeOf(s), 6, 6)
		for i, j := range []int{0, 3, 1, 4, 2, 5} {
			w.Index(i).Set(reflect.ValueOf(s).Index(j))
		}
		mvWant(t, got, []int{3, 2}, w.Interface())
	}
	b := ir.FromSlice([]int{2, 2}, []bool{true, false, false, false})
	got, err := Transpose(nil, b, []int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	mvWant(t, got, []int{2, 2}, []bool{true, false, false, false})
}

// TestMovementOpsNeverPanic feeds every shape/movement op odd inputs and
// attributes: each call must return (a result or an error), never panic.
func TestMovementOpsNeverPanic(t *testing.T) {
	tensors := []*ir.Tensor{
		nil,
		ir.Scalar(float32(1)),
		ir.Scalar(int64(-1)),
		ir.FromSlice([]int{0}, []int64{}),
		mvI64(0),
		mvI64(1, -1),
		mvI64(-9223372036854775808, 9223372036854775807),
		mvI64(2, 0, 3),
		mvIota(2, 3),
		mvIota(1, 0, 2),
		ir.FromSlice([]int{2}, []int32{1, 5}),
		ir.FromSlice([]int{2}, []string{"a", "b"}),
		{DType: ir.Undefined, Shape: []int{0}},
		{DType: ir.Float, Shape: []int{3}, Data: []float32{1}},
	}
	attrSets := [][]*ir.Attribute{
		nil,
		{mvInt("axis", 1)},
		{mvInt("axis", -3)},
		{mvInt("axis", 1<<40)},
		{mvInts("axes", 0, 0)},
		{mvInts("axes", 5)},
		{mvInts("perm", 1, 0)},
		{mvInts("perm", 3, 3)},
		{mvInts("split", 1, 1)},
		{mvInt("num_outputs", 2)},
		{mvInts("starts", 0), mvInts("ends", -1)},
		{mvInt("start", -100), mvInt("end", 100)},
		{mvInt("upper", 0)},
		{mvInt("allowzero", 1)},
		{mvInts("axis", 1)},
	}
	opsets := []int{7, 11, 13, 18}
	ops := []string{"Shape", "Gather", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Reshape", "Flatten",
		"Transpose", "Expand", "Tile", "ConstantOfShape", "Identity", "Range", "Trilu"}
	calls := 0
	for _, op := range ops {
		for _, opset := range opsets {
			s, err := Lookup("", op, opset)
			if err != nil {
				continue
			}
			maxIn := s.MaxInputs
			if maxIn < 0 {
				maxIn = 3
			}
			for nIn := s.MinInputs; nIn <= maxIn; nIn++ {
				for _, attrs := range attrSets {
					for i := range tensors {
						for j := range tensors {
							in := make([]*ir.Tensor, nIn)
							vals := make([]Value, nIn)
							for k := range in {
								in[k] = tensors[(i+k*j)%len(tensors)]
								if k == 1 {
									in[k] = tensors[j]
								}
								if x := in[k]; x != nil {
									vals[k] = Value{Type: Known(x.DType, x.Shape), Const: x}
								}
							}
							n := mvNode(op, nIn, 2, attrs...)
							func() {
								defer func() {
									if r := recover(); r != nil {
										t.Fatalf("%s opset %d attrs %v inputs %v: panic %v", op, opset, attrs, in, r)
									}
								}()
								calls++
								_, _ = s.Run(&Context{Opset: opset, Threads: 2}, n, in)
								_, _ = s.Infer(n, opset, vals)
								_, _ = s.Infer(n, opset, make([]Value, nIn))
								sym := make([]Value, nIn)
								for k, v := range vals {
									if v.Present() {
										sym[k] = Typed(v.Type.DType, unknownDims(len(v.Type.Shape)))
										sym[k].Sym = mvShape("a", 2, nil)
									}
								}
								_, _ = s.Infer(n, opset, sym)
							}()
						}
					}
				}
			}
		}
	}
	if calls == 0 {
		t.Fatal("no calls made")
	}
	t.Logf("%d calls", calls)
}
