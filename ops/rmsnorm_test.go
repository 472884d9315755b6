package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// refRMSNorm is RMSNormalization in float64 with numpy broadcasting of
// the scale over X.
func refRMSNorm(x, scale *ir.Tensor, axis int, eps float64) []float64 {
	xs := floatsOf(x)
	n := ShapeElems(x.Shape[axis:])
	rows := ShapeElems(x.Shape[:axis])
	sc := floatsOf(scale)
	strides, _ := BroadcastStrides(x.Shape, scale.Shape)
	out := make([]float64, len(xs))
	idx := make([]int, x.Rank())
	for r := 0; r < rows; r++ {
		var ss float64
		for j := 0; j < n; j++ {
			v := float64(xs[r*n+j])
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(n)+eps)
		for j := 0; j < n; j++ {
			e := r*n + j
			rem, off := e, 0
			for d := x.Rank() - 1; d >= 0; d-- {
				idx[d] = rem % x.Shape[d]
				rem /= x.Shape[d]
				off += idx[d] * strides[d]
			}
			out[e] = float64(xs[e]) * inv * float64(sc[off])
		}
	}
	return out
}

func TestRMSNormalization(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	cases := []struct {
		name  string
		x, s  []int
		axis  int64 // 99: attribute not set (default -1)
		eps   float32
		dt    ir.DType // of X and scale
		scale ir.DType // when it differs from dt
	}{
		{name: "default axis", x: []int{2, 3, 8}, s: []int{8}, axis: 99},
		{name: "axis 0 full-shape scale", x: []int{3, 4}, s: []int{3, 4}, axis: 0},
		{name: "axis 1 of 4-D", x: []int{2, 3, 4, 5}, s: []int{3, 4, 5}, axis: 1, eps: 0.1},
		{name: "negative axis, broadcast scale", x: []int{2, 3, 4, 5}, s: []int{1, 5}, axis: -2},
		{name: "scale of lower rank than the normalized dims", x: []int{2, 3, 4, 5}, s: []int{5}, axis: 1},
		{name: "per-row scale wider than the normalized dims", x: []int{3, 6}, s: []int{3, 1}, axis: -1},
		{name: "long rows over threads", x: []int{64, 1000}, s: []int{1000}, axis: -1},
		// float32 rows of a multiple of 16: the AVX-512 kernels where the CPU has them
		{name: "vector rows", x: []int{5, 48}, s: []int{48}, axis: -1},
		{name: "vector rows of 64-element groups and a tail, over threads", x: []int{64, 80}, s: []int{80}, axis: -1},
		{name: "vector rows, per-row scale", x: []int{3, 32}, s: []int{3, 1}, axis: -1},
		{name: "vector rows over two dims, broadcast scale", x: []int{2, 4, 16}, s: []int{1, 16}, axis: 1},
		{name: "float16", x: []int{4, 16}, s: []int{16}, axis: -1, dt: ir.Float16},
		{name: "bfloat16 X, float32 scale", x: []int{4, 16}, s: []int{16}, axis: -1, dt: ir.BFloat16, scale: ir.Float},
		{name: "double", x: []int{4, 16}, s: []int{16}, axis: -1, dt: ir.Double},
		{name: "empty", x: []int{0, 4}, s: []int{4}, axis: -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, s := randTensor(r, c.x...), randTensor(r, c.s...)
			var attrs []*ir.Attribute
			if c.axis != 99 {
				attrs = append(attrs, iAttr("axis", c.axis))
			}
			eps := c.eps
			if eps == 0 {
				eps = 1e-5
			} else {
				attrs = append(attrs, fAttr("epsilon", eps))
			}
			dt, sdt := c.dt, c.scale
			if dt == 0 {
				dt = ir.Float
			}
			if sdt == 0 {
				sdt = dt
			}
			xin, sin := convertFloats(x, dt), convertFloats(s, sdt)
			axis := int(c.axis)
			if c.axis == 99 {
				axis = -1
			}
			if axis < 0 {
				axis += len(c.x)
			}
			want := refRMSNorm(convertFloats(xin, ir.Float), convertFloats(sin, ir.Float), axis, float64(eps))
			n := &ir.Node{Name: "rms", OpType: "RMSNormalization", Inputs: []string{"x", "s"}, Outputs: []string{"y"}, Attrs: attrs}
			vals, err := inferRMSNorm(n, 23, []Value{{Type: Known(xin.DType, xin.Shape)}, {Type: Known(sin.DType, sin.Shape)}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := runRMSNorm(&Context{Threads: 2}, n, []*ir.Tensor{xin, sin})
			if err != nil {
				t.Fatal(err)
			}
			if out[0].DType != sdt || vals[0].Type.DType != sdt || !SameShape(out[0].Shape, mustConcrete(t, vals[0].Type.Shape)) {
				t.Fatalf("output %v %v, inferred %v; want element type %v", out[0].DType, out[0].Shape, vals[0].Type, sdt)
			}
			got := floatsOf(out[0])
			tol := 1e-5
			if sdt == ir.Float16 || sdt == ir.BFloat16 {
				tol = 1e-2
			}
			for i, g := range got {
				if math.Abs(float64(g)-want[i]) > tol*(1+math.Abs(want[i])) {
					t.Fatalf("Y[%d] = %g, want %g", i, g, want[i])
				}
			}
		})
	}
}

// convertFloats converts a float32 tensor to another float type (or back).
func convertFloats(t *ir.Tensor, dt ir.DType) *ir.Tensor {
	f := floatsOf(t)
	out := ir.NewTensor(dt, t.Shape)
	writeFloats(out, 0, f)
	return out
}

func TestRMSNormalizationErrors(t *testing.T) {
	x := randTensor(rand.New(rand.NewSource(1)), 2, 4)
	cases := []struct {
		name  string
		attrs []*ir.Attribute
		s     *ir.Tensor
		want  string
	}{
		{"axis out of range", []*ir.Attribute{iAttr("axis", 2)}, ir.NewTensor(ir.Float, []int{4}), "axis"},
		{"scale does not broadcast", nil, ir.NewTensor(ir.Float, []int{3}), "does not broadcast"},
		{"stash type", []*ir.Attribute{iAttr("stash_type", 7)}, ir.NewTensor(ir.Float, []int{4}), "stash_type"},
		{"negative epsilon", []*ir.Attribute{fAttr("epsilon", -1)}, ir.NewTensor(ir.Float, []int{4}), "epsilon"},
		{"int scale", nil, ir.NewTensor(ir.Int64, []int{4}), "scale has element type int64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := &ir.Node{Name: "rms", OpType: "RMSNormalization", Attrs: c.attrs}
			_, err := runRMSNorm(&Context{Threads: 1}, n, []*ir.Tensor{x, c.s})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run error %v, want %q", err, c.want)
			}
			_, err = inferRMSNorm(n, 23, []Value{{Type: Known(x.DType, x.Shape)}, {Type: Known(c.s.DType, c.s.Shape)}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("infer error %v, want %q", err, c.want)
			}
		})
	}
}
