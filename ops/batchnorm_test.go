package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// naiveBatchNorm is inference batch normalization element by element in
// float64: channel c of element i is i / spatial % C.
func naiveBatchNorm(x []float64, shape []int, eps float64, scale, bias, mean, variance []float64) []float64 {
	c, spatial := shape[1], 1
	for _, d := range shape[2:] {
		spatial *= d
	}
	y := make([]float64, len(x))
	for i, v := range x {
		ch := i / spatial % c
		y[i] = (v-mean[ch])/math.Sqrt(variance[ch]+eps)*scale[ch] + bias[ch]
	}
	return y
}

func TestBatchNormByHand(t *testing.T) {
	// Channel 0 [1 3] with mean 1, variance 4, scale 2: (x - 1) / 2 · 2.
	// Channel 1 [2 6] with mean 2, variance 16, scale 0.5, B 1.
	x := cF32([]int{1, 2, 2}, 1, 3, 2, 6)
	params := []*ir.Tensor{cF32([]int{2}, 2, 0.5), cF32([]int{2}, 0, 1), cF32([]int{2}, 1, 2), cF32([]int{2}, 4, 16)}
	for _, opset := range []int{6, 7, 9, 14, 15} {
		var attrs []*ir.Attribute
		attrs = append(attrs, cAttrFloat("epsilon", 0))
		if opset < 7 {
			attrs = append(attrs, cAttrInt("is_test", 1))
		}
		out, err := cRun(t, opset, cNode("BatchNormalization", 5, 1, attrs...), append([]*ir.Tensor{x}, params...)...)
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, "Y", out[0], []int{1, 2, 2}, []float64{0, 2, 1, 1.5}, 1e-7)
	}
}

func TestBatchNormVsNaive(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, shape := range [][]int{{4, 3}, {2, 3, 5}, {2, 3, 4, 2}, {1, 3, 1, 1, 7}} {
		c := shape[1]
		x := cRand(r, shape...)
		scale, bias, mean := cRand(r, c), cRand(r, c), cRand(r, c)
		variance := cRand(r, c)
		for i, v := range variance.Float32s() {
			variance.Float32s()[i] = v*v + 0.1
		}
		xs := cF64s(x.Float32s())
		ps := [][]float64{cF64s(scale.Float32s()), cF64s(bias.Float32s()), cF64s(mean.Float32s()), cF64s(variance.Float32s())}
		want := naiveBatchNorm(xs, shape, float64(float32(0.001)), ps[0], ps[1], ps[2], ps[3])
		node := cNode("BatchNormalization", 5, 1, cAttrFloat("epsilon", 0.001))
		for _, opset := range []int{9, 14, 15} {
			out, err := cRun(t, opset, node, x, scale, bias, mean, variance)
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, "float32", out[0], shape, want, 2e-6)
		}
		f64 := func(v []float64, s ...int) *ir.Tensor { return ir.FromSlice(s, v) }
		out, err := cRun(t, 9, node, f64(xs, shape...), f64(ps[0], c), f64(ps[1], c), f64(ps[2], c), f64(ps[3], c))
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, "float64", out[0], shape, want, 1e-12)
		// Opset 15: float16 X, float32 scale and B, float64 statistics.
		h := convertFloats(x, ir.Float16)
		hw := naiveBatchNorm(cF64s(floatsOf(h)), shape, float64(float32(0.001)), ps[0], ps[1], ps[2], ps[3])
		out, err = cRun(t, 15, node, h, scale, bias, f64(ps[2], c), f64(ps[3], c))
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, "float16 X", out[0], shape, hw, 2e-3)
	}
}

func TestBatchNormTraining(t *testing.T) {
	// Channel 0 over the batch: [1 3 5 7], mean 4, variance 5; channel 1:
	// [0 0 2 2], mean 1, variance 1.
	x := cF32([]int{2, 2, 2}, 1, 3, 0, 0, 5, 7, 2, 2)
	ones, zeros := cF32([]int{2}, 1, 1), cF32([]int{2}, 0, 0)
	inMean, inVar := cF32([]int{2}, 0, 10), cF32([]int{2}, 1, 1)
	node := cNode("BatchNormalization", 5, 3, cAttrInt("training_mode", 1), cAttrFloat("epsilon", 0), cAttrFloat("momentum", 0.5))
	out, err := cRun(t, 15, node, x, ones, zeros, inMean, inVar)
	if err != nil {
		t.Fatal(err)
	}
	s := math.Sqrt(5)
	cClose(t, "Y", out[0], []int{2, 2, 2}, []float64{-3 / s, -1 / s, -1, -1, 1 / s, 3 / s, 1, 1}, 1e-6)
	cClose(t, "running_mean", out[1], []int{2}, []float64{2, 5.5}, 1e-7)
	cClose(t, "running_var", out[2], []int{2}, []float64{3, 1}, 1e-7)
	// Y alone in training mode also uses the batch's statistics.
	out, err = cRun(t, 14, cNode("BatchNormalization", 5, 1, cAttrInt("training_mode", 1), cAttrFloat("epsilon", 0)), x, ones, zeros, inMean, inVar)
	if err != nil || len(out) != 1 {
		t.Fatalf("%v, %v", out, err)
	}
	cClose(t, "Y alone", out[0], []int{2, 2, 2}, []float64{-3 / s, -1 / s, -1, -1, 1 / s, 3 / s, 1, 1}, 1e-6)
}

func TestBatchNormErrors(t *testing.T) {
	f := func(shape ...int) Value { return Value{Type: Known(ir.Float, shape)} }
	d := func(shape ...int) Value { return Value{Type: Known(ir.Double, shape)} }
	ok := []Value{f(2, 3, 4), f(3), f(3), f(3), f(3)}
	tests := []struct {
		name  string
		opset int
		outs  int
		attrs []*ir.Attribute
		in    []Value
		want  string
	}{
		{"running stats outside training", 15, 3, nil, ok, "outputs running_mean and running_var exist only in training mode"},
		{"training_mode 2", 14, 1, []*ir.Attribute{cAttrInt("training_mode", 2)}, ok, "training_mode must be 0 or 1"},
		{"training outputs at 9", 9, 5, nil, ok, "training mode (outputs mean, var, saved_mean, saved_var) is not supported before opset 14"},
		{"is_test default at 6", 6, 1, nil, ok, "is_test=0 (training mode) is not supported"},
		{"spatial 0 at 7", 7, 1, []*ir.Attribute{cAttrInt("spatial", 0)}, ok, "spatial=0"},
		{"too many outputs at 15", 15, 4, []*ir.Attribute{cAttrInt("training_mode", 1)}, ok, "has 4 outputs, at most 3"},
		{"scale length", 15, 1, nil, []Value{f(2, 3, 4), f(4), f(3), f(3), f(3)}, "input scale has shape [4], want [3]"},
		{"var 2-D", 15, 1, nil, []Value{f(2, 3, 4), f(3), f(3), f(3), f(3, 1)}, "input input_var has shape [3 1], want [3]"},
		{"rank 1", 9, 1, nil, []Value{f(3), f(3), f(3), f(3), f(3)}, "X must have rank ≥ 2"},
		{"mean type at 9", 9, 1, nil, []Value{f(2, 3), f(3), f(3), d(3), d(3)}, "input input_mean has element type float64, X has float32"},
		{"scale type at 14", 14, 1, nil, []Value{f(2, 3), d(3), d(3), f(3), f(3)}, "input scale has element type float64, X has float32"},
		{"mean and var types at 15", 15, 1, nil, []Value{f(2, 3), d(3), d(3), f(3), d(3)}, "input input_var has element type float64, input_mean has float32"},
		{"int statistics", 15, 1, nil, []Value{f(2, 3), f(3), f(3), {Type: Known(ir.Int64, []int{3})}, {Type: Known(ir.Int64, []int{3})}}, "input input_mean has element type int64"},
	}
	for _, tc := range tests {
		wantNodeError(t, tc.name, cNode("BatchNormalization", 5, tc.outs, tc.attrs...), tc.opset, tc.in, tc.want)
	}
	// Mixed types where the opset allows them; empty optional outputs are
	// not training outputs; symbolic dims carry through.
	s, _ := Lookup("", "BatchNormalization", 15)
	n := cNode("BatchNormalization", 5, 3)
	n.Outputs[1], n.Outputs[2] = "", ""
	out, err := s.Infer(n, 15, []Value{Typed(ir.Float16, sym("b", "c", "t")), Typed(ir.Float, sym("c")), Typed(ir.Float, sym("c")), Typed(ir.Double, sym("c")), Typed(ir.Double, sym("c"))})
	if err != nil || out[0].Type.String() != "float16[b, c, t]" {
		t.Errorf("mixed types, symbolic: %v, %v", out, err)
	}
	out, err = s.Infer(cNode("BatchNormalization", 5, 3, cAttrInt("training_mode", 1)), 15, []Value{Typed(ir.Float, sym("b", "c", "t")), Typed(ir.Float, sym("c")), Typed(ir.Float, sym("c")), Typed(ir.Double, sym("c")), Typed(ir.Double, sym("c"))})
	if err != nil || len(out) != 3 || out[1].Type.String() != "float64[c]" {
		t.Errorf("training outputs: %v, %v", out, err)
	}
}
