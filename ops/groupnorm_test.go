package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// naiveGroupNorm is the textbook group normalization in float64: for each
// sample n and group g, the mean and (population) variance of every element
// of the group's channels, then each element normalized and given its
// channel's scale and bias (scale and bias of length C).
func naiveGroupNorm(x []float64, shape []int, groups int, eps float64, scale, bias []float64) []float64 {
	n, c := shape[0], shape[1]
	spatial := 1
	for _, d := range shape[2:] {
		spatial *= d
	}
	per := c / groups
	y := make([]float64, len(x))
	for s := 0; s < n; s++ {
		for g := 0; g < groups; g++ {
			var idx []int
			for ch := g * per; ch < (g+1)*per; ch++ {
				for p := 0; p < spatial; p++ {
					idx = append(idx, (s*c+ch)*spatial+p)
				}
			}
			var mean, v float64
			for _, i := range idx {
				mean += x[i]
			}
			mean /= float64(len(idx))
			for _, i := range idx {
				v += (x[i] - mean) * (x[i] - mean)
			}
			v /= float64(len(idx))
			for _, i := range idx {
				ch := i / spatial % c
				y[i] = (x[i]-mean)/math.Sqrt(v+eps)*scale[ch] + bias[ch]
			}
		}
	}
	return y
}

func TestInstanceNormByHand(t *testing.T) {
	// Channel 0 [1 3]: mean 2, variance 1. Channel 1 [2 6]: mean 4, variance 4.
	x := cF32([]int{1, 2, 2}, 1, 3, 2, 6)
	out, err := cRun(t, 6, cNode("InstanceNormalization", 3, 1, cAttrFloat("epsilon", 0)), x, cF32([]int{2}, 1, 2), cF32([]int{2}, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "Y", out[0], []int{1, 2, 2}, []float64{-1, 1, -2 + 1, 2 + 1}, 1e-6)

	// X of rank 2 has one position per channel: x - mean is 0, Y is B.
	out, err = cRun(t, 22, cNode("InstanceNormalization", 3, 1), cF32([]int{2, 2}, 5, -7, 1, 2), cF32([]int{2}, 3, 4), cF32([]int{2}, 0.5, -1))
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "rank 2", out[0], []int{2, 2}, []float64{0.5, -1, 0.5, -1}, 0)
}

func TestGroupNormByHand(t *testing.T) {
	// Two groups of two channels, one position each: group 0 [1 3] and
	// group 1 [2 6] normalize to [-1 1] each (epsilon 0).
	x := cF32([]int{1, 4, 1}, 1, 3, 2, 6)
	node := cNode("GroupNormalization", 3, 1, cAttrInt("num_groups", 2), cAttrFloat("epsilon", 0))
	// Opset 21: scale and bias per channel.
	out, err := cRun(t, 21, node, x, cF32([]int{4}, 1, 2, 3, 4), cF32([]int{4}, 0, 0, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "opset 21", out[0], []int{1, 4, 1}, []float64{-1, 2, -3 + 1, 4 + 1}, 1e-6)
	// Opset 18: scale and bias per group.
	out, err = cRun(t, 18, node, x, cF32([]int{2}, 2, 3), cF32([]int{2}, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	cClose(t, "opset 18", out[0], []int{1, 4, 1}, []float64{-2, 2, -3 + 1, 3 + 1}, 1e-6)
}

func TestGroupNormVsNaive(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, shape := range [][]int{{2, 6, 3, 5}, {3, 6, 7}, {1, 6}, {2, 6, 1, 1, 4}} {
		x := cRand(r, shape...)
		c := shape[1]
		scale, bias := cRand(r, c), cRand(r, c)
		xs, ss, bs := cF64s(x.Float32s()), cF64s(scale.Float32s()), cF64s(bias.Float32s())
		for _, groups := range []int{1, 2, 3, 6} {
			want := naiveGroupNorm(xs, shape, groups, float64(float32(0.01)), ss, bs)
			node := cNode("GroupNormalization", 3, 1, cAttrInt("num_groups", int64(groups)), cAttrFloat("epsilon", 0.01))
			out, err := cRun(t, 21, node, x, scale, bias)
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, "float32", out[0], shape, want, 2e-6)

			xd := ir.FromSlice(shape, xs)
			out, err = cRun(t, 21, node, xd, ir.FromSlice([]int{c}, ss), ir.FromSlice([]int{c}, bs))
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, "float64", out[0], shape, want, 1e-12)

			h := convertFloats(x, ir.Float16)
			hw := naiveGroupNorm(cF64s(floatsOf(h)), shape, groups, float64(float32(0.01)), ss, bs)
			out, err = cRun(t, 21, node, h, convertFloats(scale, ir.Float16), convertFloats(bias, ir.Float16))
			if err != nil {
				t.Fatal(err)
			}
			// The float16 parameters are rounded too: compare loosely.
			cClose(t, "float16", out[0], shape, hw, 5e-3)

			// Opset 18 with per-group parameters is opset 21 with each
			// group's value repeated over its channels.
			gs, gb := cRand(r, groups), cRand(r, groups)
			full := func(v []float32) []float64 { return repeatEach(cF64s(v), c/groups) }
			want18 := naiveGroupNorm(xs, shape, groups, float64(float32(0.01)), full(gs.Float32s()), full(gb.Float32s()))
			out, err = cRun(t, 18, node, x, gs, gb)
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, "opset 18", out[0], shape, want18, 2e-6)
		}
		// InstanceNormalization is group normalization with one group per channel.
		want := naiveGroupNorm(xs, shape, c, float64(float32(1e-5)), ss, bs)
		out, err := cRun(t, 22, cNode("InstanceNormalization", 3, 1), x, scale, bias)
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, "instance", out[0], shape, want, 2e-6)
	}
}

// TestGroupNormLargeMean: a block whose mean is far larger than its spread
// still normalizes accurately (the kernel subtracts the mean before
// scaling rather than folding it into the shift).
func TestGroupNormLargeMean(t *testing.T) {
	x := cF32([]int{1, 1, 4}, 10000, 10001, 10002, 10003)
	out, err := cRun(t, 6, cNode("InstanceNormalization", 3, 1, cAttrFloat("epsilon", 0)), x, cF32([]int{1}, 1), cF32([]int{1}, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := math.Sqrt(1.25)
	cClose(t, "Y", out[0], []int{1, 1, 4}, []float64{-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}, 1e-6)
}

func TestGroupNormEmpty(t *testing.T) {
	for _, shape := range [][]int{{0, 4, 3}, {2, 4, 0}, {2, 0, 3}} {
		c := shape[1]
		x := ir.NewTensor(ir.Float, shape)
		out, err := cRun(t, 21, cNode("GroupNormalization", 3, 1, cAttrInt("num_groups", 2)), x, ir.NewTensor(ir.Float, []int{c}), ir.NewTensor(ir.Float, []int{c}))
		if err != nil || out[0].Len() != 0 {
			t.Errorf("%v: %v, %v", shape, out, err)
		}
		out, err = cRun(t, 22, cNode("InstanceNormalization", 3, 1), x, ir.NewTensor(ir.Float, []int{c}), ir.NewTensor(ir.Float, []int{c}))
		if err != nil || out[0].Len() != 0 {
			t.Errorf("instance %v: %v, %v", shape, out, err)
		}
	}
}

func TestGroupNormErrors(t *testing.T) {
	f := func(shape ...int) Value { return Value{Type: Known(ir.Float, shape)} }
	tests := []struct {
		name  string
		op    string
		opset int
		attrs []*ir.Attribute
		in    []Value
		want  string
	}{
		{"groups divide channels", "GroupNormalization", 21, []*ir.Attribute{cAttrInt("num_groups", 4)}, []Value{f(2, 6, 3), f(6), f(6)}, "X has 6 channels, not a multiple of num_groups 4"},
		{"per-channel scale at 21", "GroupNormalization", 21, []*ir.Attribute{cAttrInt("num_groups", 2)}, []Value{f(2, 6, 3), f(2), f(6)}, "input scale has shape [2], want [6]"},
		{"per-group bias at 18", "GroupNormalization", 18, []*ir.Attribute{cAttrInt("num_groups", 2)}, []Value{f(2, 6, 3), f(2), f(6)}, "input bias has shape [6], want [2]"},
		{"num_groups missing", "GroupNormalization", 21, nil, []Value{f(2, 6, 3), f(6), f(6)}, "attribute num_groups is required"},
		{"num_groups zero", "GroupNormalization", 21, []*ir.Attribute{cAttrInt("num_groups", 0)}, []Value{f(2, 6, 3), f(6), f(6)}, "num_groups must be positive"},
		{"stash_type", "GroupNormalization", 21, []*ir.Attribute{cAttrInt("num_groups", 1), cAttrInt("stash_type", 7)}, []Value{f(2, 6, 3), f(6), f(6)}, "stash_type 7"},
		{"epsilon", "InstanceNormalization", 6, []*ir.Attribute{cAttrFloat("epsilon", -1)}, []Value{f(2, 6, 3), f(6), f(6)}, "epsilon must be finite and ≥ 0"},
		{"rank 1", "InstanceNormalization", 6, nil, []Value{f(6), f(6), f(6)}, "X must have rank ≥ 2"},
		{"scale 2-D", "InstanceNormalization", 22, nil, []Value{f(2, 6, 3), f(1, 6), f(6)}, "input scale has shape [1 6], want [6]"},
		{"B length", "InstanceNormalization", 22, nil, []Value{f(2, 6, 3), f(6), f(3)}, "input B has shape [3], want [6]"},
		{"type mismatch", "InstanceNormalization", 22, nil, []Value{f(2, 6, 3), {Type: Known(ir.Double, []int{6})}, f(6)}, "input scale has element type float64, X has float32"},
	}
	for _, tc := range tests {
		wantNodeError(t, tc.name, cNode(tc.op, 3, 1, tc.attrs...), tc.opset, tc.in, tc.want)
	}
	// Symbolic dims: the output keeps them; per-group parameters check
	// against num_groups even when C is unknown.
	s, _ := Lookup("", "GroupNormalization", 18)
	n := cNode("GroupNormalization", 3, 1, cAttrInt("num_groups", 4))
	out, err := s.Infer(n, 18, []Value{Typed(ir.Float, sym("b", "c", "hw")), Typed(ir.Float, sym(4)), Typed(ir.Float, sym(4))})
	if err != nil || out[0].Type.String() != "float32[b, c, hw]" {
		t.Errorf("symbolic: %v, %v", out, err)
	}
	if _, err := s.Infer(n, 18, []Value{Typed(ir.Float, sym("b", "c", "hw")), Typed(ir.Float, sym(8)), Typed(ir.Float, sym(4))}); err == nil {
		t.Errorf("scale [8] with 4 groups and unknown C: no error")
	}
}

// wantNodeError checks that Infer, and Run on zero tensors of the inputs'
// types, both refuse node n at opset with an error naming the node and op
// and containing want.
func wantNodeError(t *testing.T, name string, n *ir.Node, opset int, in []Value, want string) {
	t.Helper()
	s, err := Lookup("", n.OpType, opset)
	if err != nil {
		t.Fatal(err)
	}
	n.Name = "norm_node"
	_, ierr := s.Infer(n, opset, in)
	var ts []*ir.Tensor
	for _, v := range in {
		shape, _ := v.Type.Shape.Concrete()
		ts = append(ts, ir.NewTensor(v.Type.DType, shape))
	}
	_, rerr := s.Run(&Context{Opset: opset}, n, ts)
	for _, err := range []error{ierr, rerr} {
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"norm_node" (`+n.OpType+`)`) {
			t.Errorf("%s: error %v, want %q naming the node", name, err, want)
		}
	}
}
