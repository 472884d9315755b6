package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
)

func TestParsePrecision(t *testing.T) {
	for in, want := range map[string]Precision{"": PrecisionFP32, "fp32": PrecisionFP32, "BF16": PrecisionBF16, " bf16 ": PrecisionBF16} {
		if got, err := ParsePrecision(in); err != nil || got != want {
			t.Errorf("ParsePrecision(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParsePrecision("fp16"); err == nil {
		t.Error("ParsePrecision(fp16) succeeded")
	}
}

// bf16Rounded returns a copy of x with every element scaled by s and
// rounded to bf16.
func bf16Rounded(x *ir.Tensor, s float32) *ir.Tensor {
	out := ir.NewTensor(ir.Float, x.Shape)
	for i, v := range x.Float32s() {
		out.Float32s()[i] = blas.BF16Float(blas.BF16Round(s * v))
	}
	return out
}

// maxAbsDiff returns max |a-b| and max |b| over two float32 tensors.
func maxAbsDiff(a, b *ir.Tensor) (diff, scale float64) {
	for i, v := range b.Float32s() {
		diff = max(diff, math.Abs(float64(a.Float32s()[i]-v)))
		scale = max(scale, math.Abs(float64(v)))
	}
	return diff, scale
}

// TestBF16Products runs MatMul, Gemm and FusedMatMul with Precision bf16
// and checks each against the fp32 op on operands rounded to bf16 first
// (the same arithmetic but for fp32 sums: within 1e-5 of the result's
// scale), and that it is not simply fp32 (it differs from the fp32 op on
// the original operands, by less than 1e-2 of the scale).
func TestBF16Products(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	x, w, bias := randTensor(r, 2, 33, 70), randTensor(r, 70, 41), randTensor(r, 41)
	c := randTensor(r, 1, 41)
	memo := map[any]any{}
	memoize := func(key any, build func() any) any {
		if v, ok := memo[key]; ok {
			return v
		}
		v := build()
		memo[key] = v
		return v
	}
	gemm := func(alpha, beta float32) *ir.Node {
		return &ir.Node{Name: "g", OpType: "Gemm", Attrs: []*ir.Attribute{fAttr("alpha", alpha), fAttr("beta", beta), iAttr("transB", 1)}}
	}
	wt := ir.NewTensor(ir.Float, []int{41, 70})
	for p := 0; p < 70; p++ {
		for j := 0; j < 41; j++ {
			wt.Float32s()[j*70+p] = w.Float32s()[p*41+j]
		}
	}
	x2 := ir.NewTensor(ir.Float, []int{66, 70})
	copy(x2.Float32s(), x.Float32s())
	cases := []struct {
		name    string
		run     func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error)
		node    *ir.Node
		in      []*ir.Tensor
		rounded []*ir.Tensor // the inputs as the bf16 products see them
		consts  []bool
	}{
		{"MatMul batched", runMatMul, &ir.Node{Name: "mm", OpType: "MatMul"}, []*ir.Tensor{x, w}, []*ir.Tensor{bf16Rounded(x, 1), bf16Rounded(w, 1)}, nil},
		{"Gemm alpha beta transB", runGemm, gemm(0.5, 2), []*ir.Tensor{x2, wt, c}, []*ir.Tensor{bf16Rounded(x2, 0.5), bf16Rounded(wt, 1), c}, nil},
		{"FusedMatMul bias", runFusedMatMul, fusedMatMulNode(), []*ir.Tensor{x, w, bias}, []*ir.Tensor{bf16Rounded(x, 1), bf16Rounded(w, 1), bias}, nil},
		{"FusedMatMul packed weights", runFusedMatMul, fusedMatMulNode(), []*ir.Tensor{x, w, bias}, []*ir.Tensor{bf16Rounded(x, 1), bf16Rounded(w, 1), bias}, []bool{false, true, true}},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			fp := &Context{Threads: 2, Constant: cs.consts, Memo: memoize}
			bf := &Context{Threads: 2, Constant: cs.consts, Memo: memoize, Precision: PrecisionBF16}
			// fp32 first, so that a packed-weights cache that ignored the
			// precision would hand bf16 the fp32 packing.
			exact, err := cs.run(fp, cs.node, cs.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cs.run(bf, cs.node, cs.in)
			if err != nil {
				t.Fatal(err)
			}
			ref := cs.node
			if ref.OpType == "Gemm" { // alpha is applied before rounding
				ref = gemm(1, 2)
			}
			want, err := cs.run(&Context{Threads: 1}, ref, cs.rounded)
			if err != nil {
				t.Fatal(err)
			}
			if d, s := maxAbsDiff(got[0], want[0]); d > 1e-5*s {
				t.Errorf("bf16 vs fp32 on rounded operands: max diff %g (scale %g)", d, s)
			}
			d, s := maxAbsDiff(got[0], exact[0])
			if d == 0 || d > 1e-2*s {
				t.Errorf("bf16 vs fp32: max diff %g, want in (0, %g]", d, 1e-2*s)
			}
		})
	}
	if len(memo) != 2 {
		t.Errorf("%d packed weights cached, want 2 (fp32 and bf16)", len(memo))
	}
}
