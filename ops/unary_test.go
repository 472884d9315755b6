package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

func TestUnary(t *testing.T) {
	nan := math.NaN()
	inf := math.Inf(1)
	v3 := []int{3}
	ewRunCases(t, []ewCase{
		{name: "sqrt", op: "Sqrt", in: []*ir.Tensor{ewT(v3, []float32{4, 2, -1})},
			want: ewT(v3, []float32{2, float32(math.Sqrt2), float32(nan)})},
		{name: "sqrt float16", op: "Sqrt", in: []*ir.Tensor{ewF16([]int{2}, 9, 0.25)},
			want: ewF16([]int{2}, 3, 0.5)},
		{name: "sqrt int refused", op: "Sqrt", in: []*ir.Tensor{ewT(v3, []int32{4, 2, 1})},
			wantErr: "element type int32"},
		{name: "neg float", op: "Neg", in: []*ir.Tensor{ewT([]int{2, 2}, []float32{1, -2, 0, float32(inf)})},
			want: ewT([]int{2, 2}, []float32{-1, 2, 0, float32(-inf)})},
		{name: "neg int64 scalar", op: "Neg", in: []*ir.Tensor{ir.Scalar(int64(5))}, want: ir.Scalar(int64(-5))},
		{name: "neg int8 wraps", op: "Neg", in: []*ir.Tensor{ewT([]int{2}, []int8{-128, 3})},
			want: ewT([]int{2}, []int8{-128, -3})},
		{name: "neg float16", op: "Neg", in: []*ir.Tensor{ewF16([]int{2}, 1.5, -3)}, want: ewF16([]int{2}, -1.5, 3)},
		{name: "neg uint refused", op: "Neg", in: []*ir.Tensor{ewT(v3, []uint32{4, 2, 1})},
			wantErr: "element type uint32"},
		{name: "erf", op: "Erf", in: []*ir.Tensor{ewT([]int{4}, []float32{0, 1, -1, 3})},
			want: ewT([]int{4}, []float32{0, 0.8427007929497149, -0.8427007929497149, 0.9999779095030014})},
		{name: "erf int", op: "Erf", in: []*ir.Tensor{ewT([]int{2}, []int32{0, 2})},
			want: ewT([]int{2}, []int32{0, 0})},
		{name: "erf not before opset 9", op: "Erf", opset: 8, in: []*ir.Tensor{ewT([]int{1}, []float32{0})},
			wantErr: "unsupported opset version"},
		{name: "abs", op: "Abs", in: []*ir.Tensor{ewT([]int{4}, []float64{-1.5, 2, math.Copysign(0, -1), -inf})},
			want: ewT([]int{4}, []float64{1.5, 2, 0, inf})},
		{name: "abs float32", op: "Abs", in: []*ir.Tensor{ewT([]int{3}, []float32{-1.5, 2, float32(nan)})},
			want: ewT([]int{3}, []float32{1.5, 2, float32(nan)})},
		{name: "abs int16", op: "Abs", in: []*ir.Tensor{ewT([]int{2}, []int16{-7, 7})}, want: ewT([]int{2}, []int16{7, 7})},
		{name: "abs uint8", op: "Abs", in: []*ir.Tensor{ewT([]int{2}, []uint8{200, 7})}, want: ewT([]int{2}, []uint8{200, 7})},
		{name: "abs float16", op: "Abs", in: []*ir.Tensor{ewF16([]int{2}, -2.5, 1)}, want: ewF16([]int{2}, 2.5, 1)},
		{name: "exp", op: "Exp", in: []*ir.Tensor{ewT(v3, []float32{0, 1, -inf32()})},
			want: ewT(v3, []float32{1, float32(math.E), 0})},
		{name: "log", op: "Log", in: []*ir.Tensor{ewT(v3, []float64{1, math.E, 0})},
			want: ewT(v3, []float64{0, 1, -inf})},
		{name: "reciprocal", op: "Reciprocal", in: []*ir.Tensor{ewT(v3, []float32{2, -0.25, 0})},
			want: ewT(v3, []float32{0.5, -4, float32(inf)})},
		{name: "relu", op: "Relu", in: []*ir.Tensor{ewT([]int{4}, []float32{-1, 0, 2.5, float32(nan)})},
			want: ewT([]int{4}, []float32{0, 0, 2.5, float32(nan)})},
		{name: "relu infinities, negative NaN", op: "Relu", in: []*ir.Tensor{ewT(v3, []float64{-inf, inf, -nan})},
			want: ewT(v3, []float64{0, inf, nan})},
		{name: "relu float16", op: "Relu", in: []*ir.Tensor{ewF16([]int{3}, -1, 0, 2.5)},
			want: ewF16([]int{3}, 0, 0, 2.5)},
		{name: "relu int32 opset 14", op: "Relu", opset: 14, in: []*ir.Tensor{ewT([]int{2}, []int32{-3, 3})},
			want: ewT([]int{2}, []int32{0, 3})},
		{name: "relu int32 opset 13", op: "Relu", opset: 13, in: []*ir.Tensor{ewT([]int{2}, []int32{-3, 3})},
			wantErr: "element type int32"},
		{name: "sigmoid", op: "Sigmoid", in: []*ir.Tensor{ewT([]int{4}, []float64{0, 1, -1000, 1000})},
			want: ewT([]int{4}, []float64{0.5, 0.7310585786300049, 0, 1})},
		{name: "tanh", op: "Tanh", in: []*ir.Tensor{ewT(v3, []float32{0, 1, -20})},
			want: ewT(v3, []float32{0, 0.7615941559557649, -1})},
		{name: "ceil", op: "Ceil", in: []*ir.Tensor{ewT([]int{5}, []float32{-1.5, 1.2, 2, -0.5, float32(inf)})},
			want: ewT([]int{5}, []float32{-1, 2, 2, float32(math.Copysign(0, -1)), float32(inf)})},
		{name: "floor", op: "Floor", in: []*ir.Tensor{ewT([]int{4}, []float64{-1.5, 1.2, 2, -0.5})},
			want: ewT([]int{4}, []float64{-2, 1, 2, -1})},
		{name: "floor float16", op: "Floor", in: []*ir.Tensor{ewF16([]int{2}, 2.5, -2.5)}, want: ewF16([]int{2}, 2, -3)},
		{name: "ceil int refused", op: "Ceil", in: []*ir.Tensor{ewT([]int{1}, []int32{1})}, wantErr: "element type int32"},
		{name: "sin", op: "Sin", in: []*ir.Tensor{ewT(v3, []float64{0, 1, -2})},
			want: ewT(v3, []float64{0, 0.8414709848078965, -0.9092974268256816})},
		{name: "sin not before opset 7", op: "Sin", opset: 6, in: []*ir.Tensor{ewT([]int{1}, []float32{0})},
			wantErr: "unsupported opset version"},
		{name: "cos float32", op: "Cos", opset: 7, in: []*ir.Tensor{ewT(v3, []float32{0, 1, -2})},
			want: ewT(v3, []float32{1, 0.5403023058681397, -0.4161468365471424})},
		{name: "cos float16", op: "Cos", in: []*ir.Tensor{ewF16([]int{1}, 0)}, want: ewF16([]int{1}, 1)},
		{name: "round halves to even", op: "Round", opset: 11,
			in:   []*ir.Tensor{ewT([]int{7}, []float32{0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6})},
			want: ewT([]int{7}, []float32{0, 2, 2, float32(math.Copysign(0, -1)), -2, 2, -3})},
		{name: "round not before opset 11", op: "Round", opset: 10, in: []*ir.Tensor{ewT([]int{1}, []float32{0})},
			wantErr: "unsupported opset version"},
		{name: "sign float", op: "Sign", in: []*ir.Tensor{ewT([]int{6}, []float32{-2.5, 0, 3, float32(nan), float32(-inf), float32(math.Copysign(0, -1))})},
			want: ewT([]int{6}, []float32{-1, 0, 1, float32(nan), -1, 0})},
		{name: "sign int8", op: "Sign", opset: 9, in: []*ir.Tensor{ewT(v3, []int8{-128, 0, 127})},
			want: ewT(v3, []int8{-1, 0, 1})},
		{name: "sign uint64", op: "Sign", in: []*ir.Tensor{ewT([]int{2}, []uint64{0, 1 << 63})},
			want: ewT([]int{2}, []uint64{0, 1})},
		{name: "sign float16", op: "Sign", in: []*ir.Tensor{ewF16([]int{4}, -0.25, float32(math.Copysign(0, -1)), 7, float32(nan))},
			want: ewF16([]int{4}, -1, 0, 1, float32(nan))},
		{name: "softplus", op: "Softplus", opset: 1, in: []*ir.Tensor{ewT([]int{5}, []float64{0, 1, -2, 800, -800})},
			want: ewT([]int{5}, []float64{0.6931471805599453, 1.3132616875182228, 0.1269280110429725, 800, 0})},
		{name: "elu alpha 2", op: "Elu", opset: 6, attrs: []*ir.Attribute{cAttrFloat("alpha", 2)},
			in:   []*ir.Tensor{ewT([]int{4}, []float64{-1.5, 0, 0.5, 2})},
			want: ewT([]int{4}, []float64{-1.5537396797031404, 0, 0.5, 2})},
		{name: "elu default alpha", op: "Elu", in: []*ir.Tensor{ewT([]int{2}, []float32{-1, 3})},
			want: ewT([]int{2}, []float32{-0.6321205588285577, 3})},
		{name: "elu int alpha refused", op: "Elu", attrs: []*ir.Attribute{cAttrInt("alpha", 2)},
			in: []*ir.Tensor{ewT([]int{1}, []float32{-1})}, wantErr: `attribute "alpha" is int, want float`},
		{name: "Elu-1 ignores consumed_inputs", op: "Elu", opset: 5, attrs: []*ir.Attribute{cAttrInts("consumed_inputs", 0)},
			in: []*ir.Tensor{ewT([]int{1}, []float32{-1})}, want: ewT([]int{1}, []float32{-0.6321205588285577})},
		{name: "gelu", op: "Gelu", opset: 20, in: []*ir.Tensor{ewT([]int{3}, []float64{-1, 0, 2})},
			want: ewT([]int{3}, []float64{-0.15865525393145707, 0, 1.9544997361036416})},
		{name: "gelu tanh", op: "Gelu", opset: 20, attrs: []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("tanh")}},
			in: []*ir.Tensor{ewT([]int{2}, []float64{-1, 2})}, want: ewT([]int{2}, []float64{-0.15880800939172324, 1.954597694087775})},
		{name: "gelu float32", op: "Gelu", opset: 20, in: []*ir.Tensor{ewT([]int{4}, []float32{-1, 0, 2, -3})},
			want: ewT([]int{4}, []float32{-0.15865525393145707, 0, 1.9544997361036416, -0.0040496934})},
		{name: "gelu tanh float32", op: "Gelu", opset: 20, attrs: []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("tanh")}},
			in: []*ir.Tensor{ewT([]int{2}, []float32{-1, 2})}, want: ewT([]int{2}, []float32{-0.15880800939172324, 1.954597694087775})},
		{name: "gelu bad approximate", op: "Gelu", opset: 20, attrs: []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("erf")}},
			in: []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: `approximate = "erf" is not none or tanh`},
		{name: "Abs-1 takes floats only", op: "Abs", opset: 5, in: []*ir.Tensor{ewT([]int{1}, []int32{-1})},
			wantErr: "element type int32"},
		{name: "leaky relu default", op: "LeakyRelu", in: []*ir.Tensor{ewT(v3, []float64{-2, 0, 3})},
			want: ewT(v3, []float64{-2 * float64(float32(0.01)), 0, 3})},
		{name: "leaky relu alpha", op: "LeakyRelu", opset: 16, attrs: []*ir.Attribute{cAttrFloat("alpha", 0.5)},
			in: []*ir.Tensor{ewF16(v3, -2, 0, 3)}, want: ewF16(v3, -1, 0, 3)},
		{name: "hard sigmoid default", op: "HardSigmoid", in: []*ir.Tensor{ewT([]int{5}, []float32{-3, -1, 0, 1, 3})},
			want: ewT([]int{5}, []float32{0, 0.3, 0.5, 0.7, 1})},
		{name: "hard sigmoid attrs", op: "HardSigmoid", attrs: []*ir.Attribute{cAttrFloat("alpha", 0.5), cAttrFloat("beta", 0.25)},
			in:   []*ir.Tensor{ewT([]int{4}, []float64{-1, 0, 1, float64(nan)})},
			want: ewT([]int{4}, []float64{0, 0.25, 0.75, nan})},
		{name: "empty", op: "Exp", in: []*ir.Tensor{ewT([]int{0, 4}, []float32{})}, want: ewT([]int{0, 4}, []float32{})},
		{name: "bad data", op: "Exp", in: []*ir.Tensor{{DType: ir.Float, Shape: []int{2}, Data: []float64{1, 2}}},
			wantErr: "holds []float64"},
	})
}

func inf32() float32 { return float32(math.Inf(1)) }

func TestUnaryInfer(t *testing.T) {
	ewInferCases(t, []ewInferCase{
		{name: "symbolic", op: "Erf", in: []Value{ewTyped(ir.Float, "batch", "seq", 3072)},
			want: ewTyped(ir.Float, "batch", "seq", 3072)},
		{name: "unknown rank", op: "Sqrt", in: []Value{UnknownRank(ir.Double)}, want: UnknownRank(ir.Double)},
		{name: "type", op: "Exp", in: []Value{ewTyped(ir.Int64, 2)}, wantErr: "element type int64"},
		{name: "not", op: "Not", in: []Value{ewTyped(ir.Bool, "n")}, want: ewTyped(ir.Bool, "n")},
		{name: "sign int", op: "Sign", in: []Value{ewTyped(ir.Int32, "n", 2)}, want: ewTyped(ir.Int32, "n", 2)},
		{name: "elu", op: "Elu", attrs: []*ir.Attribute{cAttrFloat("alpha", 0.5)}, in: []Value{ewTyped(ir.Float, "b", 4)},
			want: ewTyped(ir.Float, "b", 4)},
		{name: "hard sigmoid bad attr", op: "HardSigmoid", attrs: []*ir.Attribute{cAttrInt("beta", 1)},
			in: []Value{ewTyped(ir.Float, 4)}, wantErr: `attribute "beta" is int, want float`},
		{name: "round int", op: "Round", in: []Value{ewTyped(ir.Int64, 2)}, wantErr: "element type int64"},
	})
}

// TestSignZero checks the sign bit, which ewCheck's comparison ignores:
// Sign(-0) is +0 (numpy, ONNX Runtime), and Round keeps -0.
func TestSignZero(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		op       string
		in       *ir.Tensor
		wantNeg0 bool
	}{
		{"Sign", ewT([]int{1}, []float32{negZero}), false},
		{"Sign", ewF16([]int{1}, negZero), false},
		{"Round", ewT([]int{1}, []float32{-0.4}), true},
	} {
		got, err := ewRun(t, c.op, 17, nil, c.in)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := toFloat64s(got)
		if math.Signbit(v[0]) != c.wantNeg0 || v[0] != 0 {
			t.Errorf("%s(%v) = %v (sign bit %v), want zero with sign bit %v", c.op, c.in, v[0], math.Signbit(v[0]), c.wantNeg0)
		}
	}
}

// TestReluKernel runs the float32 Relu kernel on lengths around its vector
// widths and tasks, on 1 and 2 threads, with NaN (either sign), ±Inf and
// ±0 among random values, against max(x, 0) (+0 for -0, NaN kept).
func TestReluKernel(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	specials := []float32{float32(math.NaN()), -float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0}
	for _, n := range []int{1, 15, 16, 17, 63, 64, 65, 1000, reluChunk + 33} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(r.NormFloat64())
			if r.Intn(10) == 0 {
				src[i] = specials[r.Intn(len(specials))]
			}
		}
		for _, threads := range []int{1, 2} {
			dst := make([]float32, n)
			reluSlice(dst, src, threads)
			for i, x := range src {
				want := x
				if x < 0 || (x == 0 && math.Signbit(float64(x))) {
					want = 0
				}
				if math.Float32bits(dst[i]) != math.Float32bits(want) && !(want != want && dst[i] != dst[i]) {
					t.Fatalf("n=%d threads=%d: relu(%v) = %v, want %v", n, threads, x, dst[i], want)
				}
			}
		}
	}
}

// TestSigmoidKernel and TestTanhKernel measure the float32 Sigmoid and
// Tanh kernels against float64 math rounded to float32 on 2^20 values
// spread over the range where they are not constant, lengths around their
// vector width and tasks, and the special values: within 4 ulp (and 1e-38
// absolute where the result is subnormal), NaN kept, ±Inf giving the
// limits.
func TestSigmoidKernel(t *testing.T) { testVecUnary(t, "sigmoid", 12, sigmoid, kernel.Sigmoid16) }

func TestTanhKernel(t *testing.T) { testVecUnary(t, "tanh", 2, math.Tanh, kernel.Tanh16) }

func testVecUnary(t *testing.T, name string, spread float64, f func(float64) float64, k func(dst, src *float32, n int)) {
	if !kernel.AVX512 {
		t.Skip("no AVX-512: the float64 path runs")
	}
	r := rand.New(rand.NewSource(6))
	for _, n := range []int{1, 15, 16, 17, vecUnaryChunk + 5, 1 << 20} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(r.NormFloat64() * spread)
		}
		if n > 8 {
			copy(src, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 88, -88, -103})
		}
		if n > 16 {
			copy(src[8:], []float32{0.625, -0.625, math.Nextafter32(0.625, 0), 1e-30, -1e-7, 9, -44, 45})
		}
		dst := make([]float32, n)
		vecUnarySlice(dst, src, 2, k)
		worst := 0.0
		for i, x := range src {
			want := float32(f(float64(x)))
			got := dst[i]
			if wantNaN(t, name, x, got, want) {
				continue
			}
			if math.Abs(float64(got-want)) <= 1e-38 {
				continue
			}
			ulps := math.Abs(float64(int32(math.Float32bits(got)) - int32(math.Float32bits(want))))
			worst = max(worst, ulps)
			if ulps > 4 {
				t.Fatalf("n=%d: %s(%v) = %v, want %v (%.0f ulp)", n, name, x, got, want, ulps)
			}
		}
		t.Logf("n=%d: worst %.0f ulp", n, worst)
	}
}

// TestSinCosKernel measures the float32 Sin and Cos kernel against float64
// math.Sin/Cos rounded to float32: values up to ±10 (angles), up to ±4096
// and ±1e5 (positions × frequencies of a rotary embedding), beyond the
// kernel's limit (computed again in float64) and the special values, on
// lengths around its vector width and tasks. The error is held to 2^-24
// absolute plus 4 ulp, which is what the reduction of x to [−π/4, π/4]
// leaves near the zeros of the result; NaN and ±Inf give NaN.
func TestSinCosKernel(t *testing.T) {
	if !kernel.AVX512 {
		t.Skip("no AVX-512: Sin and Cos run the float64 path")
	}
	r := rand.New(rand.NewSource(8))
	for _, cos := range []bool{false, true} {
		f := math.Sin
		if cos {
			f = math.Cos
		}
		for _, c := range []struct {
			n     int
			scale float64
		}{{1, 1}, {17, 10}, {vecUnaryChunk + 5, 10}, {1 << 18, 10}, {1 << 18, 4096}, {1 << 18, 1e5}, {1000, 1e8}} {
			src := make([]float32, c.n)
			for i := range src {
				src[i] = float32((r.Float64()*2 - 1) * c.scale)
			}
			if c.n > 8 {
				copy(src, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 1e6, -1e6, 1.0000001e6})
			}
			dst := make([]float32, c.n)
			sinCosSlice(dst, src, 2, cos)
			worst := 0.0
			for i, x := range src {
				want := float32(f(float64(x)))
				got := dst[i]
				if wantNaN(t, fmt.Sprintf("cos=%v: f", cos), x, got, want) {
					continue
				}
				err := math.Abs(float64(got) - float64(want))
				ulp := ulpOf(want)
				if err > 0x1p-24+4*ulp {
					t.Fatalf("cos=%v n=%d: f(%v) = %v, want %v (off by %g, %.1f ulp)", cos, c.n, x, got, want, err, err/ulp)
				}
				worst = max(worst, err/ulp)
			}
			t.Logf("cos=%v, |x| ≤ %g: worst %.1f ulp", cos, c.scale, worst)
		}
	}
}

// TestGeluTanhKernel checks Gelu with approximate "tanh" in float32
// (geluTanhSlice) against the float64 formula on 2^18 values and the
// edges: within 4 ulp for x ≥ -1 (the argument and e^z are float32), and
// 1e-7·|x| absolute below, where the result is x times a small weight that
// the export's float32 chain (1 + tanh, which cancels) itself only gets to
// within 2^-24·|x|; NaN kept, +Inf gives +Inf and -Inf NaN, as the formula
// does in float32 (-Inf·0); values whose cube overflows give x or -0.
func TestGeluTanhKernel(t *testing.T) {
	if !kernel.AVX512 {
		t.Skip("no AVX-512: the float64 path runs")
	}
	f, err := geluParam(&ir.Node{Attrs: []*ir.Attribute{{Name: "approximate", Type: ir.AttrString, String: []byte("tanh")}}})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(9))
	src := make([]float32, 1<<18+3)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 4)
	}
	edges := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), -1e-30, 1e-30,
		30, -30, -5, -9, 1e20, -1e20, math.MaxFloat32, -math.MaxFloat32, 1, -1}
	copy(src, edges)
	dst := make([]float32, len(src))
	geluTanhSlice(dst, src, 2)
	worst := 0.0
	for i, x := range src {
		want := float32(f(float64(x)))
		got := dst[i]
		switch {
		case math.IsInf(float64(x), 1) || x > 1e19:
			if got != x {
				t.Fatalf("gelu_tanh(%v) = %v, want %v", x, got, x)
			}
			continue
		case math.IsInf(float64(x), -1):
			if got == got {
				t.Fatalf("gelu_tanh(-Inf) = %v, want NaN (-Inf·0, as the float32 formula)", got)
			}
			continue
		case x < -1e19:
			if got != 0 || !math.Signbit(float64(got)) {
				t.Fatalf("gelu_tanh(%v) = %v, want -0", x, got)
			}
			continue
		}
		if wantNaN(t, "gelu_tanh", x, got, want) {
			continue
		}
		if x == 0 && math.Signbit(float64(got)) != math.Signbit(float64(x)) {
			t.Fatalf("gelu_tanh(%v) = %v: the sign of zero is lost", x, got)
		}
		if x < -1 {
			if d := math.Abs(float64(got - want)); d > 1e-7*math.Abs(float64(x)) {
				t.Fatalf("gelu_tanh(%v) = %v, want %v", x, got, want)
			}
			continue
		}
		ulps := math.Abs(float64(int32(math.Float32bits(got)) - int32(math.Float32bits(want))))
		worst = max(worst, ulps)
		if ulps > 4 && math.Abs(float64(got-want)) > 1e-38 {
			t.Fatalf("gelu_tanh(%v) = %v, want %v (%.0f ulp)", x, got, want, ulps)
		}
	}
	t.Logf("worst %.0f ulp for x ≥ -1", worst)
}

// wantNaN reports whether want is NaN, failing t unless got is NaN too.
func wantNaN(t *testing.T, what string, x, got, want float32) bool {
	t.Helper()
	if want == want {
		return false
	}
	if got == got {
		t.Fatalf("%s(%v) = %v, want NaN", what, x, got)
	}
	return true
}

// ulpOf is the spacing of float32 values just above |v|.
func ulpOf(v float32) float64 {
	a := float32(math.Abs(float64(v)))
	return float64(math.Nextafter32(a, float32(math.Inf(1)))) - float64(a)
}
