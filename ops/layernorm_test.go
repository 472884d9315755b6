package ops

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// naiveLayerNorm normalizes x over dims [axis, end) in float64, scale and
// bias given over the normalized block (nil bias allowed).
func naiveLayerNorm(x []float64, shape []int, axis int, eps float64, scale, bias []float64) (y, mean, inv []float64) {
	size := int(ir.NumElements(shape[axis:]))
	rows := int(ir.NumElements(shape[:axis]))
	y = make([]float64, len(x))
	for r := 0; r < rows; r++ {
		row := x[r*size : (r+1)*size]
		var mu, v float64
		for _, e := range row {
			mu += e
		}
		mu /= float64(size)
		for _, e := range row {
			v += (e - mu) * (e - mu)
		}
		v /= float64(size)
		is := 1 / math.Sqrt(v+eps)
		for i, e := range row {
			o := (e - mu) * is * scale[i]
			if bias != nil {
				o += bias[i]
			}
			y[r*size+i] = o
		}
		mean = append(mean, mu)
		inv = append(inv, is)
	}
	return y, mean, inv
}

func TestLayerNormByHand(t *testing.T) {
	// Row [1 2 3 4]: mean 2.5, variance 1.25.
	x := cF32([]int{1, 4}, 1, 2, 3, 4)
	scale := cF32([]int{4}, 1, 1, 2, 2)
	bias := cF32([]int{4}, 0, 0, 0, 1)
	out, err := cRun(t, 17, cNode("LayerNormalization", 3, 3, cAttrFloat("epsilon", 0)), x, scale, bias)
	if err != nil {
		t.Fatal(err)
	}
	is := 1 / math.Sqrt(1.25)
	cClose(t, "Y", out[0], []int{1, 4}, []float64{-1.5 * is, -0.5 * is, 2 * 0.5 * is, 2*1.5*is + 1}, 1e-6)
	cClose(t, "Mean", out[1], []int{1, 1}, []float64{2.5}, 1e-7)
	cClose(t, "InvStdDev", out[2], []int{1, 1}, []float64{is}, 1e-6)
}

func TestLayerNormVsNaive(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	shape := []int{2, 3, 4, 5}
	x := cRand(r, shape...)
	for axis := int64(-4); axis < 4; axis++ {
		ax, _ := NormAxis(axis, 4)
		norm := shape[ax:]
		scale, bias := cRand(r, norm...), cRand(r, norm...)
		for _, withBias := range []bool{true, false} {
			in := []*ir.Tensor{x, scale}
			var bv []float64
			if withBias {
				in = append(in, bias)
				bv = cF64s(bias.Float32s())
			}
			node := cNode("LayerNormalization", len(in), 3, cAttrInt("axis", axis), cAttrFloat("epsilon", 0.1))
			out, err := cRun(t, 17, node, in...)
			if err != nil {
				t.Fatal(err)
			}
			y, mean, inv := naiveLayerNorm(cF64s(x.Float32s()), shape, ax, float64(float32(0.1)), cF64s(scale.Float32s()), bv)
			stat := append([]int{}, shape[:ax]...)
			for range norm {
				stat = append(stat, 1)
			}
			cClose(t, "Y", out[0], shape, y, 1e-6)
			cClose(t, "Mean", out[1], stat, mean, 1e-6)
			cClose(t, "InvStdDev", out[2], stat, inv, 1e-6)
			// Y alone, and float64 / float16 inputs.
			out, err = cRun(t, 17, cNode("LayerNormalization", len(in), 1, cAttrInt("axis", axis), cAttrFloat("epsilon", 0.1)), in...)
			if err != nil || len(out) != 1 {
				t.Fatalf("one output: %v, %v", out, err)
			}
			cClose(t, "Y only", out[0], shape, y, 1e-6)
		}
	}
	// Scale broadcast from [1, 5] to the normalized shape [4, 5], float64.
	xd := ir.FromSlice(shape, cF64s(x.Float32s()))
	sc := ir.FromSlice([]int{1, 5}, []float64{1, 2, 3, 4, 5})
	out, err := cRun(t, 17, cNode("LayerNormalization", 2, 1, cAttrInt("axis", 2)), xd, sc)
	if err != nil {
		t.Fatal(err)
	}
	full := make([]float64, 20)
	for i := range full {
		full[i] = float64(i%5 + 1)
	}
	y, _, _ := naiveLayerNorm(xd.Data.([]float64), shape, 2, float64(float32(1e-5)), full, nil)
	cClose(t, "broadcast scale", out[0], shape, y, 1e-12)

	h := &ir.Tensor{DType: ir.Float16, Shape: []int{1, 2}, Data: float32sToHalf([]float32{1, 3})}
	hs := &ir.Tensor{DType: ir.Float16, Shape: []int{2}, Data: float32sToHalf([]float32{1, 1})}
	out, err = cRun(t, 17, cNode("LayerNormalization", 2, 2, cAttrFloat("epsilon", 0)), h, hs)
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "float16", out[0], []int{1, 2}, []float64{-1, 1}, 1e-3)
	cClose(t, "float16 mean", out[1], []int{1, 1}, []float64{2}, 0)
}

func TestLayerNormErrors(t *testing.T) {
	s, _ := Lookup("", "LayerNormalization", 17)
	tests := []struct {
		name  string
		x, sc []int
		attrs []*ir.Attribute
		want  string
	}{
		{"scale shape", []int{2, 3, 4}, []int{3}, nil, "Scale of shape [3] does not broadcast to the normalized shape [4]"},
		{"axis", []int{2, 3}, []int{3}, []*ir.Attribute{cAttrInt("axis", 2)}, "axis 2 is out of range for rank 2"},
		{"stash", []int{2, 3}, []int{3}, []*ir.Attribute{cAttrInt("stash_type", 11)}, "stash_type 11"},
	}
	for _, tc := range tests {
		n := cNode("LayerNormalization", 2, 1, tc.attrs...)
		_, ierr := s.Infer(n, 17, []Value{{Type: Known(ir.Float, tc.x)}, {Type: Known(ir.Float, tc.sc)}})
		_, rerr := s.Run(&Context{Opset: 17}, n, []*ir.Tensor{ir.NewTensor(ir.Float, tc.x), ir.NewTensor(ir.Float, tc.sc)})
		for _, err := range []error{ierr, rerr} {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
			}
		}
	}
	out, err := s.Infer(cNode("LayerNormalization", 3, 3), 17, []Value{Typed(ir.Float, sym("b", "s", 768)), Typed(ir.Float, sym(768)), Typed(ir.Float, sym(768))})
	if err != nil || out[0].Type.String() != "float32[b, s, 768]" || out[2].Type.String() != "float32[b, s, 1]" {
		t.Errorf("symbolic: %v, %v", out, err)
	}
}

// TestLayerNormMemoizesConstantParams: with the executor's memo and Scale
// and B constants of the model, they are widened and expanded once (one
// memo entry each, across runs and over both broadcast forms), and Y is
// the same as without the memo; a non-constant Scale is not memoized.
func TestLayerNormMemoizesConstantParams(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	x := cRand(r, 3, 4, 6)
	cases := []struct {
		name     string
		axis     int64
		scale    *ir.Tensor
		constant []bool
		entries  int
	}{
		{"constant scale and bias", -1, cRand(r, 6), []bool{false, true, true}, 2},
		{"constant scale broadcast over [4, 6]", 1, cRand(r, 1, 6), []bool{false, true, true}, 2},
		{"scale computed in the run", -1, cRand(r, 6), []bool{false, false, true}, 1},
	}
	for _, c := range cases {
		bias := cRand(r, 6)
		node := cNode("LayerNormalization", 3, 1, cAttrInt("axis", c.axis))
		want, err := runLayerNorm(&Context{Opset: 17, Threads: 2}, node, []*ir.Tensor{x, c.scale, bias})
		if err != nil {
			t.Fatal(err)
		}
		memo := map[any]any{}
		ctx := &Context{Opset: 17, Threads: 2, Constant: c.constant, Memo: func(key any, build func() any) any {
			if v, ok := memo[key]; ok {
				return v
			}
			memo[key] = build()
			return memo[key]
		}}
		for run := 0; run < 3; run++ {
			got, err := runLayerNorm(ctx, node, []*ir.Tensor{x, c.scale, bias})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[0].Float32s(), want[0].Float32s()) {
				t.Fatalf("%s, run %d: Y differs from the run without a memo", c.name, run)
			}
		}
		if len(memo) != c.entries {
			t.Errorf("%s: %d memo entries, want %d", c.name, len(memo), c.entries)
		}
	}
}

// TestLayerNormRowKernel covers the float32 rows that take the AVX-512
// kernels (a normalized size a multiple of 16: whole 64-element groups,
// 16-element tails, both), with Scale as given or broadcast, B present or
// not, and rows far from zero (mean 1000, spread 0.01: the rounded mean is
// corrected by the deviations' sum, so the normalized values keep their
// digits). Elsewhere the same cases take the float64 loop.
func TestLayerNormRowKernel(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	for _, c := range []struct {
		name        string
		shape       []int // X; normalized from axis 1
		offset, mul float32
		bias        bool
		scaleShape  []int // nil: the normalized shape
	}{
		{"one tail group", []int{3, 16}, 0, 1, true, nil},
		{"tails only", []int{5, 48}, 0, 1, false, nil},
		{"one 64 group", []int{2, 64}, 0, 1, true, nil},
		{"groups and tails", []int{7, 80}, 0, 1, true, nil},
		{"BERT width", []int{9, 768}, 0, 1, true, nil},
		{"no bias, broadcast scale", []int{4, 2, 48}, 0, 1, false, []int{1, 48}},
		{"far from zero", []int{6, 768}, 1000, 0.01, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := cRand(r, c.shape...)
			for i := range x.Float32s() {
				x.Float32s()[i] = c.offset + c.mul*x.Float32s()[i]
			}
			norm := c.shape[1:]
			size := int(ir.NumElements(norm))
			ss := c.scaleShape
			if ss == nil {
				ss = norm
			}
			scale, bias := cRand(r, ss...), cRand(r, norm...)
			full := make([]float64, size) // scale broadcast to the normalized shape
			for i := range full {
				full[i] = float64(scale.Float32s()[i%scale.Len()])
			}
			in := []*ir.Tensor{x, scale}
			var bv []float64
			if c.bias {
				in = append(in, bias)
				bv = cF64s(bias.Float32s())
			}
			out, err := cRun(t, 17, cNode("LayerNormalization", len(in), 3, cAttrInt("axis", 1), cAttrFloat("epsilon", 1e-5)), in...)
			if err != nil {
				t.Fatal(err)
			}
			y, mean, inv := naiveLayerNorm(cF64s(x.Float32s()), c.shape, 1, float64(float32(1e-5)), full, bv)
			stat := []int{c.shape[0]}
			for range norm {
				stat = append(stat, 1)
			}
			cClose(t, "Y", out[0], c.shape, y, 2e-5)
			cClose(t, "Mean", out[1], stat, mean, 1e-6)
			cClose(t, "InvStdDev", out[2], stat, inv, 2e-5)
		})
	}
}
