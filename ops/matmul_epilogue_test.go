package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// runRegistered runs the registered op opType (default domain, opset) on
// in with threads threads: the unfused steps the epilogue replaces.
func runRegistered(t testing.TB, opType string, opset int, attrs []*ir.Attribute, in []*ir.Tensor, threads int) *ir.Tensor {
	t.Helper()
	s, err := Lookup("", opType, opset)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(&Context{Threads: threads, Opset: opset}, &ir.Node{Name: opType, OpType: opType, Attrs: attrs}, in)
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// packingContext is a context on threads threads whose input 1 (B) is a
// model constant, memoized as an executor does: packed on the first run.
func packingContext(threads int) *Context {
	memo := map[any]any{}
	return &Context{Threads: threads, Constant: []bool{false, true}, Memo: func(key any, build func() any) any {
		if v, ok := memo[key]; ok {
			return v
		}
		memo[key] = build()
		return memo[key]
	}}
}

// TestFusedMatMulEpilogue checks that FusedMatMul with an activation, a
// gate and a residual computes, bit for bit, what its unfused steps
// compute: the product (+ bias) of FusedMatMul, then the ONNX Relu or Gelu
// op (Silu: the ONNX Sigmoid, then Mul of the product by it), then the
// ONNX Mul by the gate, then the ONNX Add of the residual; on one and two
// threads, over shapes with edge tiles, several k blocks, batches run as
// one GEMM and one per batch, and packed weights. Values span both signs
// and Gelu's and Sigmoid's far tails.
func TestFusedMatMulEpilogue(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	wide := func(shape ...int) *ir.Tensor {
		x := randTensor(r, shape...)
		for i, v := range x.Float32s() {
			x.Float32s()[i] = v * 4
		}
		return x
	}
	type act struct {
		attr  string // FusedMatMul's activation ("" none)
		op    string // the ONNX op it replaces (Silu: Sigmoid, then Mul by it)
		attrs []*ir.Attribute
	}
	acts := []act{{"", "", nil}, {"Relu", "Relu", nil}, {"Gelu", "Gelu", nil}, {"Silu", "Sigmoid", nil}}
	if kernel.AVX512 {
		acts = append(acts, act{"GeluTanh", "Gelu", []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("tanh")}}})
	}
	// unfused runs the registered ops the epilogue replaces on the
	// product x.
	unfused := func(t *testing.T, a act, x, gate, res *ir.Tensor, threads int) *ir.Tensor {
		y := x
		if a.op != "" {
			y = runRegistered(t, a.op, 20, a.attrs, []*ir.Tensor{y}, threads)
		}
		if a.attr == "Silu" { // x·σ(x), as PyTorch exports SiLU
			y = runRegistered(t, "Mul", 14, nil, []*ir.Tensor{x, y}, threads)
		}
		if gate != nil {
			y = runRegistered(t, "Mul", 14, nil, []*ir.Tensor{y, gate}, threads)
		}
		if res != nil {
			y = runRegistered(t, "Add", 14, nil, []*ir.Tensor{y, res}, threads)
		}
		return y
	}
	cases := []struct {
		name    string
		a, b    *ir.Tensor
		bias    *ir.Tensor
		packed  bool // B a memoized constant: packed once
		useBias bool
		resDims []int // the residual's shape, when not the output's
	}{
		{"[2,5,24]x[24,7] bias", wide(2, 5, 24), wide(24, 7), wide(7), false, true, nil},
		{"[37,800]x[800,70] packed, residual [1,37,70]", wide(37, 800), wide(800, 70), wide(70), true, true, []int{1, 37, 70}},
		{"[3,9,16]x[3,16,40] per batch", wide(3, 9, 16), wide(3, 16, 40), nil, false, false, nil},
		{"[130,64]x[64,3072] packed", wide(130, 64), wide(64, 3072), wide(3072), true, true, nil},
		{"k=0", wide(4, 0), wide(0, 5), wide(5), false, true, nil},
	}
	for _, c := range cases {
		for _, a := range acts {
			for _, operands := range []struct{ gate, res bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
				if a.attr == "" && !operands.gate && !operands.res {
					continue
				}
				name := c.name + "/" + a.attr
				if operands.gate {
					name += "+gate"
				}
				if operands.res {
					name += "+residual"
				}
				t.Run(name, func(t *testing.T) {
					in := []*ir.Tensor{c.a, c.b}
					if c.useBias {
						in = append(in, c.bias)
					}
					for _, threads := range []int{1, 2} {
						// The product as the fused run computes it: with B
						// packed once where it is (its k blocks are not
						// those of a per-call packing, nor its rounding).
						plainCtx := &Context{Threads: threads}
						if c.packed {
							plainCtx = packingContext(threads)
						}
						plain, err := runFusedMatMul(plainCtx, fusedMatMulNode(), in)
						if err != nil {
							t.Fatal(err)
						}
						shape := plain[0].Shape
						var attrs []*ir.Attribute
						if a.attr != "" {
							attrs = append(attrs, &ir.Attribute{Name: "activation", Type: ir.AttrString, String: []byte(a.attr)})
						}
						fin := append([]*ir.Tensor{}, in...)
						for len(fin) < 5 {
							fin = append(fin, nil) // no bias, residual or gate
						}
						// The gate and the residual: the output's elements,
						// in c.resDims's shape where given.
						var gate, res *ir.Tensor
						if operands.gate {
							gate = wide(shape...)
							if c.resDims != nil {
								gate.Shape = c.resDims
							}
							fin[4] = gate
						}
						if operands.res {
							res = wide(shape...)
							if c.resDims != nil {
								res.Shape = c.resDims
							}
							fin[3] = res
						}
						for fin[len(fin)-1] == nil {
							fin = fin[:len(fin)-1] // absent trailing inputs
						}
						want := unfused(t, a, plain[0], gate, res, threads)
						ctx := &Context{Threads: threads}
						if c.packed { // B a constant: packed on the first run
							ctx = packingContext(threads)
						}
						n := fusedMatMulNode(attrs...)
						for run := 0; run < 2; run++ { // packing, then packed
							out := ir.NewTensor(ir.Float, shape)
							if err := runFusedMatMulInto(ctx, n, fin, []*ir.Tensor{out}); err != nil {
								t.Fatal(err)
							}
							for i, g := range out.Float32s() {
								w := want.Float32s()[i]
								if math.Float32bits(g) != math.Float32bits(w) {
									t.Fatalf("threads %d run %d: element %d = %g, want %g (unfused)", threads, run, i, g, w)
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestFusedMatMulEpilogueErrors: a bad activation or residual is one
// error naming what is wrong, at inference and at run time.
func TestFusedMatMulEpilogueErrors(t *testing.T) {
	r := rand.New(rand.NewSource(22))
	a, b := randTensor(r, 2, 3), randTensor(r, 3, 4)
	actAttr := func(v string) *ir.Attribute {
		return &ir.Attribute{Name: "activation", Type: ir.AttrString, String: []byte(v)}
	}
	cases := []struct {
		name string
		n    *ir.Node
		in   []*ir.Tensor
		want string
	}{
		{"unknown activation", fusedMatMulNode(actAttr("Swish")), []*ir.Tensor{a, b}, `activation "Swish" is not one of`},
		{"activation spelled in lower case", fusedMatMulNode(actAttr("silu")), []*ir.Tensor{a, b}, `activation "silu" is not one of`},
		{"residual shape", fusedMatMulNode(), []*ir.Tensor{a, b, nil, randTensor(r, 2, 3)}, "residual of shape"},
		{"residual broadcast", fusedMatMulNode(), []*ir.Tensor{a, b, nil, randTensor(r, 1, 4)}, "does not have the output's elements"},
		{"residual other last dim", fusedMatMulNode(), []*ir.Tensor{a, b, nil, randTensor(r, 4, 2)}, "last dim"},
		{"residual int", fusedMatMulNode(), []*ir.Tensor{a, b, nil, ir.FromSlice([]int{2, 4}, make([]int64, 8))}, "residual"},
		{"gate shape", fusedMatMulNode(actAttr("Silu")), []*ir.Tensor{a, b, nil, nil, randTensor(r, 3, 4)}, "gate of shape"},
		{"gate broadcast", fusedMatMulNode(actAttr("Silu")), []*ir.Tensor{a, b, nil, nil, randTensor(r, 1, 4)}, "does not have the output's elements"},
		{"gate other last dim", fusedMatMulNode(), []*ir.Tensor{a, b, nil, randTensor(r, 2, 4), randTensor(r, 4, 2)}, "gate of shape"},
		{"gate int", fusedMatMulNode(), []*ir.Tensor{a, b, nil, nil, ir.FromSlice([]int{2, 4}, make([]int64, 8))}, "gate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runFusedMatMul(&Context{Threads: 1}, c.n, c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run: error %v, want %q", err, c.want)
			}
			vals := make([]Value, len(c.in))
			for i, x := range c.in {
				if x != nil {
					vals[i] = Value{Type: Known(x.DType, x.Shape)}
				}
			}
			if _, err := inferFusedMatMul(c.n, 1, vals); err == nil {
				t.Fatalf("infer: no error, want one about %q", c.want)
			}
		})
	}
}

// TestFusedMatMulActivation: the ops the epilogue takes, and those it
// leaves to their own step.
func TestFusedMatMulActivation(t *testing.T) {
	tanh := []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("tanh")}}
	bad := []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("erf")}}
	cases := []struct {
		n    *ir.Node
		want string
		ok   bool
	}{
		{&ir.Node{OpType: "Relu"}, "Relu", true},
		{&ir.Node{OpType: "Gelu"}, "Gelu", true},
		{&ir.Node{OpType: "Gelu", Attrs: tanh}, "GeluTanh", kernel.AVX512},
		{&ir.Node{OpType: "Gelu", Attrs: bad}, "", false},
		{&ir.Node{OpType: "Sigmoid"}, "", false},
		{&ir.Node{OpType: "Relu", Domain: "com.example"}, "", false},
	}
	for _, c := range cases {
		got, ok := FusedMatMulActivation(c.n)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s %v: got %q, %v; want %q, %v", c.n.OpType, c.n.Attrs, got, ok, c.want, c.ok)
		}
	}
}

// BenchmarkFusedMatMulEpilogue is a Linear layer followed by Gelu at a
// small model's shape (s001's fc1: [128, 32]·[32, 128], packed weights, 2
// threads): with the Gelu in the epilogue, and as the product followed by
// the Gelu op's own parallel kernel (the unfused steps).
//
//	go test ./ops -run '^$' -bench FusedMatMulEpilogue
func BenchmarkFusedMatMulEpilogue(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	a, w, bias := randTensor(r, 128, 32), randTensor(r, 32, 128), randTensor(r, 128)
	for _, fused := range []bool{true, false} {
		name := "gelu-step"
		var attrs []*ir.Attribute
		if fused {
			name = "gelu-epilogue"
			attrs = append(attrs, &ir.Attribute{Name: "activation", Type: ir.AttrString, String: []byte("Gelu")})
		}
		b.Run(name, func(b *testing.B) {
			ctx := packingContext(2)
			n := fusedMatMulNode(attrs...)
			out := ir.NewTensor(ir.Float, []int{128, 128})
			for i := 0; i < b.N; i++ {
				if err := runFusedMatMulInto(ctx, n, []*ir.Tensor{a, w, bias}, []*ir.Tensor{out}); err != nil {
					b.Fatal(err)
				}
				if !fused {
					geluSlice(out.Float32s(), out.Float32s(), 2)
				}
			}
		})
	}
}

// BenchmarkFusedMatMulSwiGLU is the first half of LLaMA's gated MLP,
// silu(x·W1) ⊙ g with g = x·W3, at a LLaMA-like width ([128, 768]·[768,
// 2048], packed weights, 2 threads): with the SiLU and the gate in the
// epilogue, and as the product followed by the unfused steps: the Sigmoid
// op's own parallel kernel, then Mul's output-into form twice (x·σ, then
// by g), each into a buffer of its own as a memory plan gives them. g is
// computed once, outside the timing (its GEMM is the same either way).
//
//	go test ./ops -run '^$' -bench FusedMatMulSwiGLU
func BenchmarkFusedMatMulSwiGLU(b *testing.B) {
	const m, k, n = 128, 768, 2048
	r := rand.New(rand.NewSource(1))
	a, w, gate := randTensor(r, m, k), randTensor(r, k, n), randTensor(r, m, n)
	mul, err := Lookup("", "Mul", 14)
	if err != nil {
		b.Fatal(err)
	}
	mulNode := &ir.Node{Name: "mul", OpType: "Mul"}
	for _, fused := range []bool{true, false} {
		name := "swiglu-steps"
		var attrs []*ir.Attribute
		in := []*ir.Tensor{a, w}
		if fused {
			name = "swiglu-epilogue"
			attrs = append(attrs, &ir.Attribute{Name: "activation", Type: ir.AttrString, String: []byte("Silu")})
			in = append(in, nil, nil, gate)
		}
		b.Run(name, func(b *testing.B) {
			ctx := packingContext(2)
			node := fusedMatMulNode(attrs...)
			h, s := ir.NewTensor(ir.Float, []int{m, n}), ir.NewTensor(ir.Float, []int{m, n})
			silu, y := ir.NewTensor(ir.Float, []int{m, n}), ir.NewTensor(ir.Float, []int{m, n})
			sigmoid := sigmoidKernel(nil)
			for i := 0; i < b.N; i++ {
				if err := runFusedMatMulInto(ctx, node, in, []*ir.Tensor{h}); err != nil {
					b.Fatal(err)
				}
				if fused {
					continue
				}
				if sigmoid != nil {
					sigmoid(s.Float32s(), h.Float32s(), 2)
				} else {
					s = runRegistered(b, "Sigmoid", 13, nil, []*ir.Tensor{h}, 2)
				}
				if err := mul.RunInto(ctx, mulNode, []*ir.Tensor{h, s}, []*ir.Tensor{silu}); err != nil {
					b.Fatal(err)
				}
				if err := mul.RunInto(ctx, mulNode, []*ir.Tensor{silu, gate}, []*ir.Tensor{y}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
