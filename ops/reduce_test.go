package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestReduce(t *testing.T) {
	// The ONNX backend tests' example input.
	data := func() *ir.Tensor { return cF32([]int{3, 2, 2}, 5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2) }
	axes := func(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }
	nan := float32(math.NaN())
	tests := []struct {
		name      string
		op        string
		opset     int
		attrs     []*ir.Attribute
		in        []*ir.Tensor
		wantShape []int
		want      []float64
	}{
		{"mean keepdims", "ReduceMean", 13, []*ir.Attribute{cAttrInts("axes", 1)}, []*ir.Tensor{data()}, []int{3, 1, 2}, []float64{12.5, 1.5, 35, 1.5, 57.5, 1.5}},
		{"mean opset 11", "ReduceMean", 11, []*ir.Attribute{cAttrInts("axes", 1)}, []*ir.Tensor{data()}, []int{3, 1, 2}, []float64{12.5, 1.5, 35, 1.5, 57.5, 1.5}},
		{"sum no keepdims", "ReduceSum", 11, []*ir.Attribute{cAttrInts("axes", 1), cAttrInt("keepdims", 0)}, []*ir.Tensor{data()}, []int{3, 2}, []float64{25, 3, 70, 3, 115, 3}},
		{"sum axes input", "ReduceSum", 13, []*ir.Attribute{cAttrInt("keepdims", 0)}, []*ir.Tensor{data(), axes(1)}, []int{3, 2}, []float64{25, 3, 70, 3, 115, 3}},
		{"sum all (no axes)", "ReduceSum", 13, nil, []*ir.Tensor{data()}, []int{1, 1, 1}, []float64{219}},
		{"sum empty axes", "ReduceSum", 13, nil, []*ir.Tensor{data(), axes()}, []int{1, 1, 1}, []float64{219}},
		{"sum empty axes noop", "ReduceSum", 13, []*ir.Attribute{cAttrInt("noop_with_empty_axes", 1)}, []*ir.Tensor{data(), axes()}, []int{3, 2, 2}, []float64{5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2}},
		{"sum all no keepdims", "ReduceSum", 7, []*ir.Attribute{cAttrInt("keepdims", 0)}, []*ir.Tensor{data()}, []int{}, []float64{219}},
		{"max all", "ReduceMax", 13, nil, []*ir.Tensor{data()}, []int{1, 1, 1}, []float64{60}},
		{"min negative axis", "ReduceMin", 13, []*ir.Attribute{cAttrInts("axes", -2)}, []*ir.Tensor{data()}, []int{3, 1, 2}, []float64{5, 1, 30, 1, 55, 1}},
		{"prod", "ReduceProd", 13, []*ir.Attribute{cAttrInts("axes", 1)}, []*ir.Tensor{data()}, []int{3, 1, 2}, []float64{100, 2, 1200, 2, 3300, 2}},
		{"sum square", "ReduceSumSquare", 13, []*ir.Attribute{cAttrInts("axes", 1), cAttrInt("keepdims", 0)}, []*ir.Tensor{data()}, []int{3, 2}, []float64{425, 5, 2500, 5, 6625, 5}},
		{"l1", "ReduceL1", 13, []*ir.Attribute{cAttrInts("axes", 1), cAttrInt("keepdims", 0)}, []*ir.Tensor{data()}, []int{3, 2}, []float64{25, 3, 70, 3, 115, 3}},
		{"l1 negative values", "ReduceL1", 18, nil, []*ir.Tensor{cF32([]int{2}, -3, 4), nil}, []int{1}, []float64{7}},
		{"l2", "ReduceL2", 13, []*ir.Attribute{cAttrInts("axes", 1), cAttrInt("keepdims", 0)}, []*ir.Tensor{data()}, []int{3, 2}, []float64{math.Sqrt(425), math.Sqrt(5), 50, math.Sqrt(5), math.Sqrt(6625), math.Sqrt(5)}},
		{"l2 last axis (F.normalize)", "ReduceL2", 18, nil, []*ir.Tensor{cF32([]int{2, 2}, -3, 4, 0, 0), axes(-1)}, []int{2, 1}, []float64{5, 0}},
		{"int32 l2 truncates", "ReduceL2", 13, nil, []*ir.Tensor{ir.FromSlice([]int{3}, []int32{3, 4, 1})}, []int{1}, []float64{5}},
		{"mean opset 18 axes input", "ReduceMean", 18, []*ir.Attribute{cAttrInt("keepdims", 0)}, []*ir.Tensor{data(), axes(0, -1)}, []int{2}, []float64{15.5, 21}},
		{"max opset 18 noop", "ReduceMax", 18, []*ir.Attribute{cAttrInt("noop_with_empty_axes", 1)}, []*ir.Tensor{cF32([]int{2}, 1, 2)}, []int{2}, []float64{1, 2}},
		{"max opset 18 no axes", "ReduceMax", 18, nil, []*ir.Tensor{cF32([]int{2}, 1, 2), nil}, []int{1}, []float64{2}},
		{"max NaN propagates", "ReduceMax", 13, []*ir.Attribute{cAttrInts("axes", 1)}, []*ir.Tensor{cF32([]int{2, 2}, 1, nan, nan, 1)}, []int{2, 1}, []float64{math.NaN(), math.NaN()}},
		{"min middle axis", "ReduceMin", 13, []*ir.Attribute{cAttrInts("axes", 0, 2), cAttrInt("keepdims", 0)}, []*ir.Tensor{data()}, []int{2}, []float64{1, 2}},
		{"int32 mean truncates", "ReduceMean", 13, []*ir.Attribute{cAttrInts("axes", 0)}, []*ir.Tensor{ir.FromSlice([]int{2, 2}, []int32{1, 5, 2, -8})}, []int{1, 2}, []float64{1, -1}},
		{"int64 max", "ReduceMax", 13, []*ir.Attribute{cAttrInts("axes", 1), cAttrInt("keepdims", 0)}, []*ir.Tensor{ir.FromSlice([]int{2, 3}, []int64{-5, -9, -7, 4, 8, 1})}, []int{2}, []float64{-5, 8}},
		{"float64 sum", "ReduceSum", 13, nil, []*ir.Tensor{ir.FromSlice([]int{3}, []float64{0.5, 0.25, 0.125})}, []int{1}, []float64{0.875}},
		{"empty sum", "ReduceSum", 11, []*ir.Attribute{cAttrInts("axes", 1)}, []*ir.Tensor{ir.NewTensor(ir.Float, []int{2, 0})}, []int{2, 1}, []float64{0, 0}},
		{"empty max", "ReduceMax", 11, []*ir.Attribute{cAttrInts("axes", 1), cAttrInt("keepdims", 0)}, []*ir.Tensor{ir.NewTensor(ir.Float, []int{2, 0})}, []int{2}, []float64{math.Inf(-1), math.Inf(-1)}},
		{"scalar", "ReduceSum", 11, nil, []*ir.Tensor{cF32(nil, 3)}, []int{}, []float64{3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := cRun(t, tc.opset, cNode(tc.op, len(tc.in), 1, tc.attrs...), tc.in...)
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, tc.name, out[0], tc.wantShape, tc.want, 1e-7)
		})
	}
}

func TestReduceFloat16(t *testing.T) {
	h := &ir.Tensor{DType: ir.Float16, Shape: []int{2, 2}, Data: float32sToHalf([]float32{1, 2, 3, 4})}
	out, err := cRun(t, 13, cNode("ReduceMean", 1, 1, cAttrInts("axes", 1)), h)
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "float16 mean", out[0], []int{2, 1}, []float64{1.5, 3.5}, 0)
}

func TestReduceErrors(t *testing.T) {
	x := ir.NewTensor(ir.Float, []int{2, 3})
	tests := []struct {
		name  string
		op    string
		opset int
		attrs []*ir.Attribute
		in    []*ir.Tensor
		want  string
	}{
		{"duplicate", "ReduceSum", 11, []*ir.Attribute{cAttrInts("axes", 1, -1)}, []*ir.Tensor{x}, "appears twice"},
		{"range", "ReduceMean", 13, []*ir.Attribute{cAttrInts("axes", 2)}, []*ir.Tensor{x}, "axis 2 is out of range for rank 2"},
		{"attr at 18", "ReduceMean", 18, []*ir.Attribute{cAttrInts("axes", 1)}, []*ir.Tensor{x}, "axes is an input from opset 18"},
		{"float axes", "ReduceSum", 13, nil, []*ir.Tensor{x, ir.FromSlice([]int{1}, []float32{1})}, "int64"},
		{"bool data", "ReduceMax", 13, nil, []*ir.Tensor{ir.FromSlice([]int{1}, []bool{true})}, "element type bool"},
	}
	for _, tc := range tests {
		s, err := Lookup("", tc.op, tc.opset)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Run(&Context{Opset: tc.opset}, cNode(tc.op, len(tc.in), 1, tc.attrs...), tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := Lookup("", "ReduceMean", 18); err != nil {
		t.Fatal(err)
	}
	if s, _ := Lookup("", "ReduceSum", 11); s.MaxInputs != 1 {
		t.Errorf("ReduceSum-11 takes %d inputs", s.MaxInputs)
	}
}

func TestReduceInferUnknownAxes(t *testing.T) {
	s, _ := Lookup("", "ReduceSum", 13)
	x := Typed(ir.Float, sym("b", 1, 8))
	axes := Typed(ir.Int64, sym(1)) // value unknown
	out, err := s.Infer(cNode("ReduceSum", 2, 1), 13, []Value{x, axes})
	if err != nil || out[0].Type.String() != "float32[?, 1, ?]" {
		t.Errorf("keepdims: %v, %v", out, err)
	}
	out, err = s.Infer(cNode("ReduceSum", 2, 1, cAttrInt("keepdims", 0)), 13, []Value{x, axes})
	if err != nil || out[0].Type.String() != "float32[?, ?]" {
		t.Errorf("no keepdims: %v, %v", out, err)
	}
	out, err = s.Infer(cNode("ReduceSum", 2, 1, cAttrInt("keepdims", 0)), 13,
		[]Value{x, {Type: Known(ir.Int64, []int{1}), Const: ir.FromSlice([]int{1}, []int64{-1})}})
	if err != nil || out[0].Type.String() != "float32[b, 1]" {
		t.Errorf("const axes: %v, %v", out, err)
	}
}

// TestReduceBool: ReduceMax and ReduceMin take bool from opset 20 (False <
// True: any and all; over no elements, False and True).
func TestReduceBool(t *testing.T) {
	x := ir.FromSlice([]int{2, 3}, []bool{true, false, false, false, false, false})
	for _, c := range []struct {
		op    string
		shape []int
		x     *ir.Tensor
		want  []bool
	}{
		{"ReduceMax", []int{2}, x, []bool{true, false}},
		{"ReduceMin", []int{2}, x, []bool{false, false}},
		{"ReduceMin", []int{2}, ir.FromSlice([]int{2, 3}, []bool{true, true, true, true, false, true}), []bool{true, false}},
		{"ReduceMax", []int{2}, ir.NewTensor(ir.Bool, []int{2, 0}), []bool{false, false}},
		{"ReduceMin", []int{2}, ir.NewTensor(ir.Bool, []int{2, 0}), []bool{true, true}},
	} {
		out := mvRun(t, 20, mvNode(c.op, 2, 1, mvInt("keepdims", 0)), c.x, mvI64(1))
		mvWant(t, out[0], c.shape, c.want)
	}
	mvErr(t, 18, mvNode("ReduceMax", 2, 1), "element type bool", x, mvI64(1))
}

// TestReduceRowsMatchesGeneric checks the row path (reduceRowsF32: the
// last axes reduced, on several threads) against the generic walk, for
// every sum-like kind, on rows of odd and even lengths, and that it leaves
// the other layouts to the walk.
func TestReduceRowsMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	cases := []struct {
		name  string
		shape []int
		flags []bool
		rows  bool // the row path takes it
	}{
		{"last axis, many rows (threads)", []int{64, 3, 64, 32}, []bool{false, false, false, true}, true},
		{"last two axes, odd length", []int{5, 7, 13}, []bool{false, true, true}, true},
		{"everything", []int{3, 5}, []bool{true, true}, true},
		{"a middle axis", []int{4, 6, 8}, []bool{false, true, false}, false},
		{"first and last axes", []int{4, 6, 8}, []bool{true, false, true}, false},
	}
	kinds := map[reduceKind]string{reduceSum: "sum", reduceMean: "mean", reduceSumSquare: "sumsquare", reduceL1: "l1", reduceL2: "l2", reduceMax: "max"}
	for _, c := range cases {
		x := make([]float32, ir.NumElements(c.shape))
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		p := newReducePlan(c.shape, c.flags)
		for kind, name := range kinds {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				want := make([]float32, p.outCount)
				reduceFinish(kind, p, reduceAccumulate[float32, float64](kind, x, p), want)
				got := make([]float32, p.outCount)
				took := reduceRowsF32(2, kind, x, p, got)
				if took != (c.rows && kind != reduceMax) {
					t.Fatalf("row path took it: %v", took)
				}
				if !took {
					return
				}
				for i := range want {
					if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*math.Abs(float64(want[i]))+1e-7 {
						t.Fatalf("output %d: %g, generic %g", i, got[i], want[i])
					}
				}
			})
		}
	}
}
