package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestCompare(t *testing.T) {
	nan := float32(math.NaN())
	b := func(shape []int, v ...bool) *ir.Tensor { return ewT(shape, v) }
	x := ewT([]int{4}, []float32{1, 2, nan, 4})
	y := ewT([]int{4}, []float32{1, 3, nan, 3})
	ewRunCases(t, []ewCase{
		{name: "equal float", op: "Equal", in: []*ir.Tensor{x, y}, want: b([]int{4}, true, false, false, false)},
		{name: "less float", op: "Less", in: []*ir.Tensor{x, y}, want: b([]int{4}, false, true, false, false)},
		{name: "greater float", op: "Greater", in: []*ir.Tensor{x, y}, want: b([]int{4}, false, false, false, true)},
		{name: "less or equal", op: "LessOrEqual", in: []*ir.Tensor{x, y}, want: b([]int{4}, true, true, false, false)},
		{name: "greater or equal", op: "GreaterOrEqual", in: []*ir.Tensor{x, y}, want: b([]int{4}, true, false, false, true)},
		{name: "equal int64 broadcast [2,1]==[3]", op: "Equal",
			in:   []*ir.Tensor{ewT([]int{2, 1}, []int64{1, 2}), ewT([]int{3}, []int64{1, 2, 1})},
			want: b([]int{2, 3}, true, false, true, false, true, false)},
		{name: "equal bool", op: "Equal",
			in:   []*ir.Tensor{b([]int{4}, true, true, false, false), b([]int{4}, true, false, true, false)},
			want: b([]int{4}, true, false, false, true)},
		{name: "equal scalar int32 opset 7", op: "Equal", opset: 7,
			in:   []*ir.Tensor{ewT([]int{3}, []int32{0, 5, 0}), ir.Scalar(int32(0))},
			want: b([]int{3}, true, false, true)},
		{name: "equal float at opset 10", op: "Equal", opset: 10, in: []*ir.Tensor{x, y}, wantErr: "element type float32"},
		{name: "equal string at opset 19", op: "Equal", opset: 19,
			in:   []*ir.Tensor{ewT([]int{3}, []string{"a", "b", ""}), ewT([]int{1}, []string{"b"})},
			want: b([]int{3}, false, true, false)},
		{name: "equal string at opset 18", op: "Equal", opset: 18,
			in: []*ir.Tensor{ewT([]int{1}, []string{"a"}), ewT([]int{1}, []string{"b"})}, wantErr: "element type string"},
		{name: "equal float16", op: "Equal",
			in: []*ir.Tensor{ewF16([]int{2}, 1, 0), ewF16([]int{2}, 1, float32(math.Copysign(0, -1)))}, want: b([]int{2}, true, true)},
		{name: "less uint64", op: "Less",
			in:   []*ir.Tensor{ewT([]int{2}, []uint64{math.MaxUint64, 1}), ir.FromSlice([]int{1}, []uint64{2})},
			want: b([]int{2}, false, true)},
		{name: "less int at opset 8", op: "Less", opset: 8,
			in: []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []int32{2})}, wantErr: "element type int32"},
		{name: "less bool", op: "Less",
			in: []*ir.Tensor{b([]int{1}, true), b([]int{1}, false)}, wantErr: "element type bool"},
		{name: "greater empty", op: "Greater",
			in: []*ir.Tensor{ewT([]int{0}, []float64{}), ir.Scalar(1.0)}, want: ewT([]int{0}, []bool{})},
		{name: "mismatch", op: "Equal",
			in: []*ir.Tensor{ewT([]int{1}, []int32{1}), ewT([]int{1}, []int64{1})}, wantErr: "inputs have different element types int32 and int64"},
	})
}

func TestCompareInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "bool output", op: "Equal", in: []Value{ewTyped(ir.Int64, "batch", 1), ewTyped(ir.Int64, 1, "seq")},
			want: ewTyped(ir.Bool, "batch", "seq")},
		{name: "unknown rank", op: "Less", in: []Value{UnknownRank(ir.Float), ewTyped(ir.Float)}, want: UnknownRank(ir.Bool)},
		{name: "ge before 12", op: "GreaterOrEqual", opset: 11, in: []Value{ewTyped(ir.Float), ewTyped(ir.Float)},
			wantErr: "unsupported opset version"},
	})
}

// TestCompareThreads checks the written-out comparison loops on every
// operand form (same shape, scalar either side, a row against a column)
// against Go's operators element by element, NaNs included, on one thread
// and on three (outputs long enough to split).
func TestCompareThreads(t *testing.T) {
	r := rand.New(rand.NewSource(17))
	n := 2*binaryParallelMin + 37
	vals := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			switch r.Intn(10) {
			case 0:
				v[i] = float32(math.NaN())
			case 1:
				v[i] = 0.5
			default:
				v[i] = float32(r.Intn(5)) / 2
			}
		}
		return v
	}
	ops := []struct {
		op   cmpOp
		name string
		f    func(x, y float32) bool
	}{
		{cmpEq, "Equal", func(x, y float32) bool { return x == y }},
		{cmpGt, "Greater", func(x, y float32) bool { return x > y }},
		{cmpLt, "Less", func(x, y float32) bool { return x < y }},
		{cmpGe, "GreaterOrEqual", func(x, y float32) bool { return x >= y }},
		{cmpLe, "LessOrEqual", func(x, y float32) bool { return x <= y }},
	}
	rows := n / 181
	forms := []struct {
		name           string
		aShape, bShape []int
	}{
		{"same shape", []int{n}, []int{n}},
		{"scalar b", []int{n}, []int{1}},
		{"scalar a", []int{1}, []int{n}},
		{"row against column", []int{1, 181}, []int{rows, 1}},
	}
	for _, o := range ops {
		for _, fm := range forms {
			a, b := vals(shapeProd(fm.aShape)), vals(shapeProd(fm.bShape))
			oShape := []int{n}
			if len(fm.aShape) == 2 {
				oShape = []int{rows, 181}
			}
			for _, threads := range []int{1, 3} {
				got := make([]bool, shapeProd(oShape))
				if err := compareThreads(threads, o.op, got, oShape, a, fm.aShape, b, fm.bShape); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					ai, bi := i%len(a), i%len(b)
					if len(fm.aShape) == 2 {
						ai, bi = i%181, i/181
					}
					if want := o.f(a[ai], b[bi]); got[i] != want {
						t.Fatalf("%s, %s, %d threads: element %d = %v, want %v (%g, %g)", o.name, fm.name, threads, i, got[i], want, a[ai], b[bi])
					}
				}
			}
		}
	}
}
