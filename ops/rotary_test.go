package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// refRotary is RotaryEmbedding as ONNX's reference writes it, on X viewed
// as [B, S, H, D].
func refRotary(x []float32, b, s, h, d int, at func(b, s, h, j int) int, cos, sin func(b, s, i int) float64, rd int, interleaved bool) []float64 {
	out := make([]float64, len(x))
	half := rd / 2
	for bi := 0; bi < b; bi++ {
		for si := 0; si < s; si++ {
			for hi := 0; hi < h; hi++ {
				get := func(j int) float64 { return float64(x[at(bi, si, hi, j)]) }
				for j := rd; j < d; j++ {
					out[at(bi, si, hi, j)] = get(j)
				}
				for i := 0; i < half; i++ {
					i1, i2 := i, i+half
					if interleaved {
						i1, i2 = 2*i, 2*i+1
					}
					c, sn := cos(bi, si, i), sin(bi, si, i)
					x1, x2 := get(i1), get(i2)
					out[at(bi, si, hi, i1)] = c*x1 - sn*x2
					out[at(bi, si, hi, i2)] = sn*x1 + c*x2
				}
			}
		}
	}
	return out
}

func TestRotaryEmbedding(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	cases := []struct {
		name        string
		threeD      bool
		b, s, h, d  int
		rd          int
		interleaved bool
		posIDs      bool
		maxPos      int
		f16         bool
	}{
		{name: "4-D with position ids", b: 2, s: 3, h: 4, d: 8, posIDs: true, maxPos: 50},
		{name: "3-D with num_heads", threeD: true, b: 2, s: 3, h: 4, d: 8, posIDs: true, maxPos: 50},
		{name: "interleaved", b: 2, s: 5, h: 2, d: 16, interleaved: true, posIDs: true, maxPos: 9},
		{name: "no position ids", b: 2, s: 3, h: 4, d: 8},
		{name: "partial, interleaved, 3-D", threeD: true, b: 1, s: 7, h: 3, d: 12, rd: 4, interleaved: true, posIDs: true, maxPos: 7},
		{name: "partial without position ids", b: 2, s: 3, h: 4, d: 8, rd: 4},
		{name: "many vectors over threads", b: 4, s: 128, h: 8, d: 64, posIDs: true, maxPos: 128},
		{name: "float16", b: 1, s: 4, h: 2, d: 8, posIDs: true, maxPos: 8, f16: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rd := c.rd
			if rd == 0 {
				rd = c.d
			}
			var x *ir.Tensor
			var at func(b, s, h, j int) int
			if c.threeD {
				x = randTensor(r, c.b, c.s, c.h*c.d)
				at = func(b, s, h, j int) int { return (b*c.s+s)*c.h*c.d + h*c.d + j }
			} else {
				x = randTensor(r, c.b, c.h, c.s, c.d)
				at = func(b, s, h, j int) int { return ((b*c.h+h)*c.s+s)*c.d + j }
			}
			inputs := []string{"x", "cos", "sin"}
			var cosT, sinT *ir.Tensor
			var pos *ir.Tensor
			var row func(b, s int) int
			if c.posIDs {
				cosT, sinT = randTensor(r, c.maxPos, rd/2), randTensor(r, c.maxPos, rd/2)
				pos = ir.NewTensor(ir.Int64, []int{c.b, c.s})
				for i := range pos.Int64s() {
					pos.Int64s()[i] = int64(r.Intn(c.maxPos))
				}
				inputs = append(inputs, "pos")
				row = func(b, s int) int { return int(pos.Int64s()[b*c.s+s]) }
			} else {
				cosT, sinT = randTensor(r, c.b, c.s, rd/2), randTensor(r, c.b, c.s, rd/2)
				row = func(b, s int) int { return b*c.s + s }
			}
			xin, cin, sin := x, cosT, sinT
			if c.f16 {
				xin, cin, sin = convertFloats(x, ir.Float16), convertFloats(cosT, ir.Float16), convertFloats(sinT, ir.Float16)
			}
			xf, cf, sf := floatsOf(convertFloats(xin, ir.Float)), floatsOf(convertFloats(cin, ir.Float)), floatsOf(convertFloats(sin, ir.Float))
			want := refRotary(xf, c.b, c.s, c.h, c.d, at,
				func(b, s, i int) float64 { return float64(cf[row(b, s)*rd/2+i]) },
				func(b, s, i int) float64 { return float64(sf[row(b, s)*rd/2+i]) }, rd, c.interleaved)
			var attrs []*ir.Attribute
			if c.threeD {
				attrs = append(attrs, iAttr("num_heads", int64(c.h)))
			}
			if c.rd != 0 {
				attrs = append(attrs, iAttr("rotary_embedding_dim", int64(c.rd)))
			}
			if c.interleaved {
				attrs = append(attrs, iAttr("interleaved", 1))
			}
			n := &ir.Node{Name: "rope", OpType: "RotaryEmbedding", Inputs: inputs, Outputs: []string{"y"}, Attrs: attrs}
			in := []*ir.Tensor{xin, cin, sin}
			if pos != nil {
				in = append(in, pos)
			}
			vals := make([]Value, len(in))
			for i, x := range in {
				vals[i] = Value{Type: Known(x.DType, x.Shape)}
			}
			inferred, err := inferRotary(n, 23, vals)
			if err != nil {
				t.Fatal(err)
			}
			out, err := runRotary(&Context{Threads: 2}, n, in)
			if err != nil {
				t.Fatal(err)
			}
			if out[0].DType != xin.DType || !SameShape(out[0].Shape, mustConcrete(t, inferred[0].Type.Shape)) {
				t.Fatalf("output %v %v, inferred %v", out[0].DType, out[0].Shape, inferred[0].Type)
			}
			tol := 1e-6
			if c.f16 {
				tol = 2e-3
			}
			for i, g := range floatsOf(convertFloats(out[0], ir.Float)) {
				if math.Abs(float64(g)-want[i]) > tol*(1+math.Abs(want[i])) {
					t.Fatalf("Y[%d] = %g, want %g", i, g, want[i])
				}
			}
		})
	}
}

func TestRotaryEmbeddingErrors(t *testing.T) {
	x4 := ir.NewTensor(ir.Float, []int{1, 2, 3, 8})
	cache := ir.NewTensor(ir.Float, []int{10, 4})
	pos := ir.FromSlice([]int{1, 3}, []int64{0, 1, 2})
	cases := []struct {
		name  string
		attrs []*ir.Attribute
		in    []*ir.Tensor
		want  string
	}{
		{"3-D without num_heads", nil, []*ir.Tensor{ir.NewTensor(ir.Float, []int{1, 3, 16}), cache, cache, pos}, "num_heads"},
		{"odd rotary dim", []*ir.Attribute{iAttr("rotary_embedding_dim", 3)}, []*ir.Tensor{x4, cache, cache, pos}, "must be even"},
		{"cache width", nil, []*ir.Tensor{x4, ir.NewTensor(ir.Float, []int{10, 3}), ir.NewTensor(ir.Float, []int{10, 3}), pos}, "rotary_embedding_dim/2"},
		{"position out of range", nil, []*ir.Tensor{x4, cache, cache, ir.FromSlice([]int{1, 3}, []int64{0, 10, 2})}, "outside the caches"},
		{"position shape", nil, []*ir.Tensor{x4, cache, cache, ir.FromSlice([]int{3}, []int64{0, 1, 2})}, "position_ids has shape"},
		{"3-D caches without positions", nil, []*ir.Tensor{x4, cache, cache}, "without position_ids"},
		{"rank 2", nil, []*ir.Tensor{ir.NewTensor(ir.Float, []int{3, 8}), cache, cache, pos}, "3-D or 4-D"},
		{"cache type", nil, []*ir.Tensor{x4, ir.NewTensor(ir.Float16, []int{10, 4}), cache, pos}, "element types"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := &ir.Node{Name: "rope", OpType: "RotaryEmbedding", Attrs: c.attrs}
			_, err := runRotary(&Context{Threads: 1}, n, c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `node "rope"`) {
				t.Fatalf("error %v, want one naming the node and containing %q", err, c.want)
			}
		})
	}
}
