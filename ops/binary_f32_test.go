package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// arithSpecials are the float32 values TestArithFloat32 mixes into its
// operands: signed zeros (x/0), infinities, quiet NaNs with distinct
// payloads and signs, a signaling NaN, subnormals and values whose
// products and quotients overflow or underflow.
var arithSpecials = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1,
	float32(math.Inf(1)), float32(math.Inf(-1)),
	math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00002), math.Float32frombits(0x7fc12345),
	math.Float32frombits(0x7f800003),
	math.Float32frombits(0x00000001), math.Float32frombits(0x807fffff), math.SmallestNonzeroFloat32,
	math.MaxFloat32, -3e30, 1e-30,
}

// arithOperand returns n float32s: a third special values, the rest
// ordinary values of mixed magnitude.
func arithOperand(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		if rng.Intn(3) == 0 {
			v[i] = arithSpecials[rng.Intn(len(arithSpecials))]
		} else {
			v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(7)-3)))
		}
	}
	return v
}

// TestArithFloat32 checks float32 Add, Sub, Mul and Div (the AVX-512
// kernels where the CPU has them, on 1 and 2 threads, through Run and
// RunInto, in place or not) bit for bit against the generic Go loops on one
// thread (a NaN as any NaN), over every operand form: same shape,
// scalar on either side, a row bias, inner, outer and column broadcasts,
// a scalar per row on either side,
// with row lengths 1–17 (the kernels' masked tails), 1000 and 100003 (one
// above the parallel threshold, split mid-row and off the 16-lane grid).
func TestArithFloat32(t *testing.T) {
	shapes := []struct {
		name string
		a, b func(n int) []int
	}{
		{"same [n]", func(n int) []int { return []int{n} }, func(n int) []int { return []int{n} }},
		{"[3,n] op scalar", func(n int) []int { return []int{3, n} }, func(int) []int { return nil }},
		{"scalar op [n,2]", func(int) []int { return nil }, func(n int) []int { return []int{n, 2} }},
		{"row bias [3,n] op [n]", func(n int) []int { return []int{3, n} }, func(n int) []int { return []int{n} }},
		{"[n] op [3,n]", func(n int) []int { return []int{n} }, func(n int) []int { return []int{3, n} }},
		{"inner [2,2,3,n] op [3,n]", func(n int) []int { return []int{2, 2, 3, n} }, func(n int) []int { return []int{3, n} }},
		{"outer [1,2,n] op [3,2,n]", func(n int) []int { return []int{1, 2, n} }, func(n int) []int { return []int{3, 2, n} }},
		{"column [n,5] op [n,1]", func(n int) []int { return []int{n, 5} }, func(n int) []int { return []int{n, 1} }},
		{"column [n,1] op [n,5]", func(n int) []int { return []int{n, 1} }, func(n int) []int { return []int{n, 5} }},
		{"both broadcast [n,1] op [1,3]", func(n int) []int { return []int{n, 1} }, func(int) []int { return []int{1, 3} }},
		{"a scalar a row [2,3,n] op [2,3,1] (x / ‖x‖)", func(n int) []int { return []int{2, 3, n} }, func(int) []int { return []int{2, 3, 1} }},
		{"a scalar a row [3,1] op [1,3,n]", func(int) []int { return []int{3, 1} }, func(n int) []int { return []int{1, 3, n} }},
	}
	sizes := []int{1000, 100003}
	for n := 1; n <= 17; n++ {
		sizes = append(sizes, n)
	}
	rng := rand.New(rand.NewSource(7))
	for _, sh := range shapes {
		for _, n := range sizes {
			aShape, bShape := sh.a(n), sh.b(n)
			a := ir.FromSlice(aShape, arithOperand(rng, int(ir.NumElements(aShape))))
			b := ir.FromSlice(bShape, arithOperand(rng, int(ir.NumElements(bShape))))
			oShape, err := broadcastOf(ewNode("Add", 2), a, b)
			if err != nil {
				t.Fatal(err)
			}
			for op, name := range arithNames {
				want := make([]float32, ir.NumElements(oShape))
				if err := arithT(arithOp(op), want, oShape, a.Data.([]float32), aShape, b.Data.([]float32), bShape); err != nil {
					t.Fatal(err)
				}
				for _, threads := range []int{1, 2} {
					t.Run(fmt.Sprintf("%s %s n=%d threads=%d", name, sh.name, n, threads), func(t *testing.T) {
						checkArithFloat32(t, name, threads, a, b, oShape, want)
						// The Go loops split over threads (CPUs without AVX-512).
						got := make([]float32, len(want))
						if err := applyBinaryThreads(threads, got, oShape, a.Data.([]float32), aShape, b.Data.([]float32), bShape, arithGoLoops[op]); err != nil {
							t.Fatal(err)
						}
						sameFloat32Bits(t, "Go loops", got, want, a, b)
					})
				}
			}
		}
	}
}

// checkArithFloat32 runs op on a and b through its schema's Run and
// RunInto (into a fresh output, and over each operand of the output's
// shape) and compares each result with want bit for bit.
func checkArithFloat32(t *testing.T, op string, threads int, a, b *ir.Tensor, oShape []int, want []float32) {
	s, err := Lookup(DomainONNX, op, 17)
	if err != nil {
		t.Fatal(err)
	}
	node := ewNode(op, 2)
	ctx := &Context{Opset: 17, Threads: threads}
	outs, err := s.Run(ctx, node, []*ir.Tensor{a, b})
	if err != nil {
		t.Fatal(err)
	}
	sameFloat32Bits(t, "Run", outs[0].Data.([]float32), want, a, b)
	into := ir.FromSlice(oShape, make([]float32, len(want)))
	if err := s.RunInto(ctx, node, []*ir.Tensor{a, b}, []*ir.Tensor{into}); err != nil {
		t.Fatal(err)
	}
	sameFloat32Bits(t, "RunInto", into.Data.([]float32), want, a, b)
	for k, x := range []*ir.Tensor{a, b} {
		if !SameShape(x.Shape, oShape) {
			continue
		}
		in := []*ir.Tensor{a, b}
		in[k] = ir.FromSlice(oShape, append([]float32{}, x.Data.([]float32)...))
		if err := s.RunInto(ctx, node, in, []*ir.Tensor{in[k]}); err != nil {
			t.Fatal(err)
		}
		sameFloat32Bits(t, fmt.Sprintf("RunInto in place of input %d", k), in[k].Data.([]float32), want, a, b)
	}
}

// sameFloat32Bits fails t at the first element of got whose bits differ
// from want's; a NaN matches any NaN. Which operand's payload a NaN + NaN
// keeps is for the Go compiler's register allocation to decide (the
// kernels follow Go 1.26), and neither ONNX nor Go specifies it: a test
// that pinned it would fail on a compiler upgrade, not on a bug.
func sameFloat32Bits(t *testing.T, how string, got, want []float32, a, b *ir.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", how, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%s: element %d = %#08x (%g), want %#08x (%g); a %v, b %v",
				how, i, math.Float32bits(got[i]), got[i], math.Float32bits(want[i]), want[i], a.Shape, b.Shape)
		}
	}
}

// BenchmarkArith times float32 Mul, Add and Div (arithFloat32, the
// kernels) on 1 and 2 threads, with "go-loops" the previous code (the
// generic Go loops on one thread, arithT) as the peer in the same run: a
// SwiGLU-sized same-shape Mul, a bias-like broadcast Add, a division by a
// scalar (attention's 1/√d), a broadcast of short rows, a tiny Mul and
// same-shape Muls around the parallel threshold.
func BenchmarkArith(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	operand := func(shape ...int) *ir.Tensor {
		v := make([]float32, ir.NumElements(shape))
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return ir.FromSlice(shape, v)
	}
	cases := []struct {
		name string
		op   arithOp
		a, b *ir.Tensor
	}{
		{"Mul[512,512]", opMul, operand(512, 512), operand(512, 512)},
		{"Add[1,12,512,64]+[512,64]", opAdd, operand(1, 12, 512, 64), operand(512, 64)},
		{"Div[1,12,512,512]/scalar", opDiv, operand(1, 12, 512, 512), operand()},
		{"Add[4096,3]+[3]", opAdd, operand(4096, 3), operand(3)},
		{"Div[64,3,64,32]/[64,3,64,1]", opDiv, operand(64, 3, 64, 32), operand(64, 3, 64, 1)}, // F.normalize's
		{"Div[64,3,64,32]/[64,3,64,32]", opDiv, operand(64, 3, 64, 32), operand(64, 3, 64, 32)},
		{"Mul[8]", opMul, operand(8), operand(8)},
		{"Mul[4096]", opMul, operand(4096), operand(4096)},
		{"Mul[16384]", opMul, operand(16384), operand(16384)},
		{"Mul[32768]", opMul, operand(32768), operand(32768)},
		{"Mul[65536]", opMul, operand(65536), operand(65536)},
		{"Mul[131072]", opMul, operand(131072), operand(131072)},
	}
	for _, c := range cases {
		oShape, err := broadcastOf(ewNode("Add", 2), c.a, c.b)
		if err != nil {
			b.Fatal(err)
		}
		o := make([]float32, ir.NumElements(oShape))
		a, bb := c.a.Data.([]float32), c.b.Data.([]float32)
		bytes := int64(4 * (len(o) + len(a) + len(bb)))
		b.Run(c.name+"/go-loops", func(b *testing.B) {
			b.SetBytes(bytes)
			for range b.N {
				if err := arithT(c.op, o, oShape, a, c.a.Shape, bb, c.b.Shape); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", c.name, threads), func(b *testing.B) {
				b.SetBytes(bytes)
				for range b.N {
					if err := arithFloat32(c.op, o, oShape, a, c.a.Shape, bb, c.b.Shape, threads); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
