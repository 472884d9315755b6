package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// naiveSoftmax computes (log-)softmax in float64 over the block of dims
// [axis, end) when coerce (opsets < 13) or over dim axis only.
func naiveSoftmax(x []float64, shape []int, axis int, coerce, log bool) []float64 {
	outer := int(ir.NumElements(shape[:axis]))
	size, inner := shape[axis], int(ir.NumElements(shape[axis+1:]))
	if coerce {
		size, inner = size*inner, 1
	}
	y := make([]float64, len(x))
	for o := 0; o < outer; o++ {
		for j := 0; j < inner; j++ {
			at := func(i int) int { return o*size*inner + i*inner + j }
			mx := math.Inf(-1)
			for i := 0; i < size; i++ {
				mx = math.Max(mx, x[at(i)])
			}
			var s float64
			for i := 0; i < size; i++ {
				s += math.Exp(x[at(i)] - mx)
			}
			for i := 0; i < size; i++ {
				if log {
					y[at(i)] = x[at(i)] - mx - math.Log(s)
				} else {
					y[at(i)] = math.Exp(x[at(i)]-mx) / s
				}
			}
		}
	}
	return y
}

func TestSoftmaxByHand(t *testing.T) {
	inf := float32(math.Inf(-1))
	nan := math.NaN()
	x3 := cF32([]int{1, 2, 2}, 1, 2, 3, 4)
	tests := []struct {
		name  string
		op    string
		opset int
		axis  *int64
		x     *ir.Tensor
		want  []float64
	}{
		{"row", "Softmax", 13, nil, cF32([]int{1, 3}, 1, 2, 3), []float64{0.09003057317038046, 0.24472847105479767, 0.6652409557748219}},
		{"log row", "LogSoftmax", 13, nil, cF32([]int{1, 3}, 1, 2, 3), []float64{-2.4076059644443806, -1.4076059644443806, -0.4076059644443806}},
		{"large numbers", "Softmax", 13, nil, cF32([]int{1, 2}, 1000, 1001), []float64{0.2689414213699951, 0.7310585786300049}},
		{"log large numbers", "LogSoftmax", 13, nil, cF32([]int{1, 2}, 1000, 1001), []float64{-1.3132616875182228, -0.3132616875182228}},
		{"all -inf row is NaN", "Softmax", 13, nil, cF32([]int{2, 2}, inf, inf, 0, inf), []float64{nan, nan, 1, 0}},
		{"log all -inf row is NaN", "LogSoftmax", 13, nil, cF32([]int{2, 2}, inf, inf, 0, inf), []float64{nan, nan, 0, math.Inf(-1)}},
		// The same 3-D input: opset 13 normalizes the last axis only;
		// opset 11 flattens from axis 1 on into one row of 4.
		{"3-D opset 13", "Softmax", 13, nil, x3, []float64{0.2689414213699951, 0.7310585786300049, 0.2689414213699951, 0.7310585786300049}},
		{"3-D opset 11", "Softmax", 11, nil, x3, []float64{0.03205860328008499, 0.08714431874203257, 0.23688281808991013, 0.6439142598879722}},
		{"3-D opset 13 axis 1", "Softmax", 13, ptr(int64(1)), x3, []float64{0.11920292202211755, 0.11920292202211755, 0.8807970779778823, 0.8807970779778823}},
		{"3-D opset 11 axis 2", "Softmax", 11, ptr(int64(2)), x3, []float64{0.2689414213699951, 0.7310585786300049, 0.2689414213699951, 0.7310585786300049}},
		{"3-D log opset 11", "LogSoftmax", 11, nil, x3, []float64{-3.4401896985611957, -2.4401896985611957, -1.4401896985611957, -0.4401896985611957}},
		{"1-D", "Softmax", 13, nil, cF32([]int{2}, 0, 0), []float64{0.5, 0.5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var attrs []*ir.Attribute
			if tc.axis != nil {
				attrs = append(attrs, cAttrInt("axis", *tc.axis))
			}
			out, err := cRun(t, tc.opset, cNode(tc.op, 1, 1, attrs...), tc.x)
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, tc.name, out[0], tc.x.Shape, tc.want, 2e-7)
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestSoftmaxVsNaive(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	shape := []int{3, 4, 5, 6}
	x := cRand(r, shape...)
	for i := range x.Float32s() {
		x.Float32s()[i] *= 10
	}
	xd := ir.FromSlice(shape, cF64s(x.Float32s()))
	for _, op := range []string{"Softmax", "LogSoftmax"} {
		for _, opset := range []int{7, 11, 13, 18} {
			for axis := int64(-4); axis < 4; axis++ {
				ax, _ := NormAxis(axis, 4)
				want := naiveSoftmax(cF64s(x.Float32s()), shape, ax, opset < 13, op == "LogSoftmax")
				for _, in := range []*ir.Tensor{x, xd} {
					out, err := cRun(t, opset, cNode(op, 1, 1, cAttrInt("axis", axis)), in)
					if err != nil {
						t.Fatal(err)
					}
					tol := 1e-6
					if in.DType == ir.Double {
						tol = 1e-12
					}
					cClose(t, op, out[0], shape, want, tol)
				}
			}
		}
	}
	// float16 goes through float32.
	h := &ir.Tensor{DType: ir.Float16, Shape: []int{2, 3}, Data: float32sToHalf([]float32{1, 2, 3, 0, 0, 0})}
	out, err := cRun(t, 13, cNode("Softmax", 1, 1), h)
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "float16", out[0], []int{2, 3}, []float64{0.0900, 0.2447, 0.6652, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-3)
}

func TestSoftmaxErrors(t *testing.T) {
	s, _ := Lookup("", "Softmax", 13)
	n := cNode("Softmax", 1, 1, cAttrInt("axis", 5))
	if _, err := s.Infer(n, 13, []Value{Typed(ir.Float, sym("b", 2, 3))}); err == nil || !strings.Contains(err.Error(), "axis 5 is out of range for rank 3") {
		t.Errorf("Infer: %v", err)
	}
	if _, err := s.Run(&Context{Opset: 13}, n, []*ir.Tensor{ir.NewTensor(ir.Float, []int{1, 2, 3})}); err == nil || !strings.Contains(err.Error(), "axis 5 is out of range for rank 3") {
		t.Errorf("Run: %v", err)
	}
	if _, err := s.Run(&Context{Opset: 13}, cNode("Softmax", 1, 1), []*ir.Tensor{ir.FromSlice([]int{2}, []int64{1, 2})}); err == nil {
		t.Error("Run took int64")
	}
	out, err := s.Infer(cNode("Softmax", 1, 1), 13, []Value{Typed(ir.Float, sym("b", "s", "s"))})
	if err != nil || out[0].Type.String() != "float32[b, s, s]" {
		t.Errorf("Infer symbolic: %v, %v", out, err)
	}
}

func TestFastExp32(t *testing.T) {
	worst := 0.0
	for x := float32(-87.3); x < 88.7; x += 0.0137 {
		got, want := float64(fastExp32(x)), math.Exp(float64(x))
		worst = math.Max(worst, math.Abs(got-want)/want)
	}
	if worst > 3e-7 {
		t.Errorf("worst relative error %g", worst)
	}
	special := []struct{ x, want float32 }{
		{0, 1}, {float32(math.Inf(-1)), 0}, {float32(math.Inf(1)), float32(math.Inf(1))}, {-200, 0}, {100, float32(math.Inf(1))},
		{88.72, float32(math.Exp(float64(float32(88.72))))}, {-100, float32(math.Exp(-100))}, {-87.5, float32(math.Exp(-87.5))},
	}
	for _, s := range special {
		if got := fastExp32(s.x); math.Abs(float64(got-s.want)) > 1e-6*math.Abs(float64(s.want)) && got != s.want {
			t.Errorf("exp(%g) = %g, want %g", s.x, got, s.want)
		}
	}
	if !math.IsNaN(float64(fastExp32(float32(math.NaN())))) {
		t.Error("exp(NaN) is not NaN")
	}
}

func BenchmarkSoftmaxRow(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	x := cRand(r, 512).Float32s()
	y := make([]float32, 512)
	for i := 0; i < b.N; i++ {
		softmaxRow32(x, y, false)
	}
}

// TestSoftmaxLongRows covers the vector exp path: rows longer than 8 with
// masked (-Inf) entries and an entirely masked row.
func TestSoftmaxLongRows(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	x := cRand(r, 3, 37)
	xs := x.Float32s()
	for i := range xs {
		if i%5 == 0 {
			xs[i] = float32(math.Inf(-1))
		}
		if i >= 74 {
			xs[i] = float32(math.Inf(-1))
		}
	}
	for _, op := range []string{"Softmax", "LogSoftmax"} {
		want := naiveSoftmax(cF64s(xs), x.Shape, 1, false, op == "LogSoftmax")
		out, err := cRun(t, 13, cNode(op, 1, 1), x)
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, op, out[0], x.Shape, want, 1e-6)
		got := out[0].Float32s()
		if op == "Softmax" && got[0] != 0 {
			t.Errorf("masked entry = %g, want exactly 0", got[0])
		}
		for _, v := range got[74:] {
			if !math.IsNaN(float64(v)) {
				t.Fatalf("%s of an all -Inf row: %v, want NaN", op, got[74:])
			}
		}
	}
}
