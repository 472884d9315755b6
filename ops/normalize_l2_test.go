package ops

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// normalizeL2Node is a NormalizeL2 node with the given attributes.
func normalizeL2Node(attrs ...*ir.Attribute) *ir.Node {
	return &ir.Node{Name: "l2", OpType: NormalizeL2Op, Domain: DomainAttnrun, Attrs: attrs}
}

// TestNormalizeL2 checks NormalizeL2 against the chain it replaces, run
// with the registered ONNX ops (ReduceL2 over the trailing axes with
// keepdims, Clip to epsilon when epsilon > 0, Div), bit for bit, NaN
// included: on contiguous X and through views (a transposed X whose rows
// are strided, a Gather of one index of a Transpose as Swin V2's q), with
// rows short and long, on one thread and two.
func TestNormalizeL2(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	cases := []struct {
		name  string
		x     []int // the input's shape
		view  *View // nil: X itself
		axis  int64 // 99: attribute not set (default -1)
		eps   float32
		zeros bool // the first row is zeros, the second holds a NaN
	}{
		{name: "default axis", x: []int{4, 5, 32}, axis: 99, eps: 1e-12},
		{name: "no epsilon: x / x.norm()", x: []int{3, 7}, axis: -1},
		{name: "a zero row clamped to epsilon, a NaN row", x: []int{3, 16}, axis: -1, eps: 1e-12, zeros: true},
		{name: "a zero row without epsilon is NaN", x: []int{3, 16}, axis: -1, zeros: true},
		{name: "two trailing axes", x: []int{2, 3, 4, 5}, axis: -2, eps: 1e-6},
		{name: "axis 0: one row", x: []int{6, 5}, axis: 0},
		{name: "rows of one element", x: []int{9, 1}, axis: -1, eps: 0.5},
		{name: "long rows over threads", x: []int{64, 1000}, axis: -1, eps: 1e-12},
		{name: "many short rows over threads", x: []int{2048, 32}, axis: -1, eps: 1e-12},
		// The view cases: x holds the data the view reads.
		{name: "transposed: strided rows", x: []int{6, 10}, view: &View{Shape: []int{10, 6}, Strides: []int{1, 10}}, axis: -1, eps: 1e-12},
		{name: "Swin V2's q: Gather 1 of a [3, b, h, n, d] Transpose of [b, n, 3, h, d]",
			x:    []int{2, 8, 3, 3, 32},
			view: &View{Offset: 96, Shape: []int{2, 3, 8, 32}, Strides: []int{8 * 288, 32, 288, 1}}, axis: -1, eps: 1e-12},
		{name: "a view over two trailing strided axes", x: []int{4, 6, 5},
			view: &View{Offset: 1, Shape: []int{4, 5, 3}, Strides: []int{30, 1, 10}}, axis: -2},
	}
	for _, c := range cases {
		for _, threads := range []int{1, 2} {
			t.Run(c.name, func(t *testing.T) {
				x := ir.NewTensor(ir.Float, c.x)
				for i := range x.Float32s() {
					x.Float32s()[i] = float32(r.NormFloat64())
				}
				xl := x // X as the chain sees it
				if c.view != nil {
					xl = stridedCopyOf(x, *c.view)
				}
				axisAttr := c.axis
				if axisAttr == 99 {
					axisAttr = -1
				}
				axis, err := NormAxis(axisAttr, xl.Rank())
				if err != nil {
					t.Fatal(err)
				}
				if c.zeros {
					n := ShapeElems(xl.Shape[axis:])
					clear(x.Float32s()[:n])
					x.Float32s()[n+1] = float32(math.NaN())
					xl = x
				}
				var attrs []*ir.Attribute
				if c.axis != 99 {
					attrs = append(attrs, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: c.axis})
				}
				if c.eps != 0 {
					attrs = append(attrs, &ir.Attribute{Name: "epsilon", Type: ir.AttrFloat, Float: c.eps})
				}
				if c.view != nil {
					attrs = append(attrs, &ir.Attribute{Name: "x_view", Type: ir.AttrInts, Ints: c.view.Ints()})
				}
				s, err := Lookup(DomainAttnrun, NormalizeL2Op, 1)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Run(&Context{Threads: threads, Opset: 1}, normalizeL2Node(attrs...), []*ir.Tensor{x})
				if err != nil {
					t.Fatal(err)
				}

				axes := make([]int64, 0, xl.Rank()-axis)
				for k := axis; k < xl.Rank(); k++ {
					axes = append(axes, int64(k))
				}
				norm := runRegistered(t, "ReduceL2", 13, []*ir.Attribute{{Name: "axes", Type: ir.AttrInts, Ints: axes}}, []*ir.Tensor{xl}, threads)
				if c.eps != 0 {
					norm = runRegistered(t, "Clip", 13, nil, []*ir.Tensor{norm, ir.Scalar(c.eps)}, threads)
				}
				want := runRegistered(t, "Div", 14, nil, []*ir.Tensor{xl, norm}, threads)
				if !slices.Equal(got[0].Shape, want.Shape) {
					t.Fatalf("shape %v, want %v", got[0].Shape, want.Shape)
				}
				for i, w := range want.Float32s() {
					if g := got[0].Float32s()[i]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
						t.Fatalf("y[%d] = %v, the chain gives %v", i, g, w)
					}
				}
				if c.zeros {
					if y := got[0].Float32s()[0]; (c.eps != 0) != (y == 0) {
						t.Errorf("y[0] of a zero row = %v with epsilon %v", y, c.eps)
					}
				}
			})
		}
	}
}

// TestNormalizeL2Refuses checks the errors of NormalizeL2 on bad
// attributes and inputs: each names the problem.
func TestNormalizeL2Refuses(t *testing.T) {
	x := Typed(ir.Float, ir.ShapeOf([]int{2, 3, 4}))
	for _, c := range []struct {
		name  string
		in    Value
		attrs []*ir.Attribute
		want  string
	}{
		{"float64 X", Typed(ir.Double, ir.ShapeOf([]int{2, 3})), nil, "takes float32"},
		{"axis out of range", x, []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: 3}}, "out of range"},
		{"negative epsilon", x, []*ir.Attribute{{Name: "epsilon", Type: ir.AttrFloat, Float: -1}}, "epsilon must be finite"},
		{"a view past X's end", x, []*ir.Attribute{{Name: "x_view", Type: ir.AttrInts, Ints: View{Offset: 20, Shape: []int{2, 4}, Strides: []int{4, 1}}.Ints()}}, "does not fit"},
		{"a malformed view", x, []*ir.Attribute{{Name: "x_view", Type: ir.AttrInts, Ints: []int64{0, 2}}}, "x_view"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := inferNormalizeL2(normalizeL2Node(c.attrs...), 1, []Value{c.in})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"l2"`) {
				t.Fatalf("error %v, want one naming the node and saying %q", err, c.want)
			}
		})
	}
}

// BenchmarkNormalizeL2 times NormalizeL2 on Swin V2-T stage 1's q (64
// windows, 3 heads, 64 tokens, 32 dims): contiguous, and read through the
// Gather-of-Transpose view of the qkv projection's output.
func BenchmarkNormalizeL2(b *testing.B) {
	const bw, h, n, d = 64, 3, 64, 32
	for _, c := range []struct {
		name string
		x    []int
		view *View
	}{
		{"contiguous", []int{bw, h, n, d}, nil},
		{"qkv view", []int{bw, n, 3, h, d}, &View{Offset: 0, Shape: []int{bw, h, n, d}, Strides: []int{n * 3 * h * d, d, 3 * h * d, 1}}},
	} {
		for _, threads := range []int{1, 2} {
			b.Run(c.name+"/threads="+string(rune('0'+threads)), func(b *testing.B) {
				x := ir.NewTensor(ir.Float, c.x)
				for i := range x.Float32s() {
					x.Float32s()[i] = float32(i%7) - 3
				}
				attrs := []*ir.Attribute{{Name: "epsilon", Type: ir.AttrFloat, Float: 1e-12}}
				if c.view != nil {
					attrs = append(attrs, &ir.Attribute{Name: "x_view", Type: ir.AttrInts, Ints: c.view.Ints()})
				}
				node := normalizeL2Node(attrs...)
				y := ir.NewTensor(ir.Float, []int{bw, h, n, d})
				ctx := &Context{Threads: threads, Opset: 1}
				for b.Loop() {
					if err := runNormalizeL2Into(ctx, node, []*ir.Tensor{x}, []*ir.Tensor{y}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
