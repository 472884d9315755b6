package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestArithmetic(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	ewRunCases(t, []ewCase{
		{name: "add [2,3]+[3]", op: "Add",
			in:   []*ir.Tensor{ewT([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}), ewT([]int{3}, []float32{10, 20, 30})},
			want: ewT([]int{2, 3}, []float32{11, 22, 33, 14, 25, 36})},
		{name: "add same shape", op: "Add",
			in:   []*ir.Tensor{ewT([]int{2, 2}, []float32{1, 2, 3, 4}), ewT([]int{2, 2}, []float32{0.5, -2, nan, inf})},
			want: ewT([]int{2, 2}, []float32{1.5, 0, nan, inf})},
		{name: "mul [2,1,4]*[3,1]", op: "Mul",
			in: []*ir.Tensor{ewT([]int{2, 1, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8}), ewT([]int{3, 1}, []float32{1, 10, 100})},
			want: ewT([]int{2, 3, 4}, []float32{
				1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 300, 400,
				5, 6, 7, 8, 50, 60, 70, 80, 500, 600, 700, 800})},
		{name: "mul [3,1]*[1,2] int64", op: "Mul",
			in:   []*ir.Tensor{ewT([]int{3, 1}, []int64{1, 2, 3}), ewT([]int{1, 2}, []int64{10, -1})},
			want: ewT([]int{3, 2}, []int64{10, -1, 20, -2, 30, -3})},
		{name: "sub tensor-scalar", op: "Sub",
			in:   []*ir.Tensor{ewT([]int{3}, []float32{1, 2, 3}), ir.Scalar(float32(1))},
			want: ewT([]int{3}, []float32{0, 1, 2})},
		{name: "sub scalar-tensor", op: "Sub",
			in:   []*ir.Tensor{ir.Scalar(float32(1)), ewT([]int{3}, []float32{1, 2, 3})},
			want: ewT([]int{3}, []float32{0, -1, -2})},
		{name: "sub scalar-scalar", op: "Sub",
			in:   []*ir.Tensor{ir.Scalar(int64(5)), ir.Scalar(int64(7))},
			want: ewT(nil, []int64{-2})},
		{name: "div [1]/[2,2] float64", op: "Div",
			in:   []*ir.Tensor{ewT([]int{1}, []float64{1}), ewT([]int{2, 2}, []float64{2, 4, -8, 0})},
			want: ewT([]int{2, 2}, []float64{0.5, 0.25, -0.125, math.Inf(1)})},
		{name: "div int32 truncates toward zero", op: "Div",
			in:   []*ir.Tensor{ewT([]int{4}, []int32{7, -7, 7, -7}), ewT([]int{4}, []int32{2, 2, -2, -2})},
			want: ewT([]int{4}, []int32{3, -3, -3, 3})},
		{name: "div int64 by scalar", op: "Div",
			in:   []*ir.Tensor{ewT([]int{3}, []int64{768, -5, 1}), ir.Scalar(int64(12))},
			want: ewT([]int{3}, []int64{64, 0, 0})},
		{name: "div int64 by zero", op: "Div",
			in:      []*ir.Tensor{ewT([]int{2}, []int64{1, 2}), ewT([]int{2}, []int64{1, 0})},
			wantErr: "integer division by zero"},
		{name: "add bool is or", op: "Add",
			in:   []*ir.Tensor{ewT([]int{4}, []bool{true, false, true, false}), ewT([]int{4}, []bool{true, true, false, false})},
			want: ewT([]int{4}, []bool{true, true, true, false})},
		{name: "add bool broadcast [2,1,2]+[2,2] (causal + padding mask)", op: "Add", opset: 13,
			in:   []*ir.Tensor{ewT([]int{2, 1, 2}, []bool{false, true, false, false}), ewT([]int{2, 2}, []bool{false, false, true, false})},
			want: ewT([]int{2, 2, 2}, []bool{false, true, true, true, false, false, true, false})},
		{name: "sub bool refused", op: "Sub",
			in:      []*ir.Tensor{ewT([]int{1}, []bool{true}), ewT([]int{1}, []bool{true})},
			wantErr: "element type bool"},
		{name: "empty [0,3]+[3]", op: "Add",
			in:   []*ir.Tensor{ewT([]int{0, 3}, []float32{}), ewT([]int{3}, []float32{1, 2, 3})},
			want: ewT([]int{0, 3}, []float32{})},
		{name: "empty [2,0]*[2,1] general path", op: "Mul",
			in:   []*ir.Tensor{ewT([]int{2, 0}, []int32{}), ewT([]int{2, 1}, []int32{1, 2})},
			want: ewT([]int{2, 0}, []int32{})},
		{name: "float16 add", op: "Add",
			in:   []*ir.Tensor{ewF16([]int{2}, 1.5, 2), ewF16(nil, 0.25)},
			want: ewF16([]int{2}, 1.75, 2.25)},
		{name: "float16 mul rounds to half", op: "Mul",
			in:   []*ir.Tensor{ewF16([]int{1}, 1.0009766), ewF16([]int{1}, 1.0009766)},
			want: ewF16([]int{1}, 1.0019531)}, // 1.00195408 rounds to the nearest half 1+2/1024
		{name: "uint8 add wraps (opset 14)", op: "Add", opset: 14,
			in:   []*ir.Tensor{ewT([]int{2}, []uint8{250, 3}), ewT([]int{2}, []uint8{10, 4})},
			want: ewT([]int{2}, []uint8{4, 7})},
		{name: "uint8 before opset 14", op: "Add", opset: 13,
			in:      []*ir.Tensor{ewT([]int{1}, []uint8{1}), ewT([]int{1}, []uint8{1})},
			wantErr: "element type uint8"},
		{name: "uint32 sub wraps (opset 7)", op: "Sub", opset: 7,
			in:   []*ir.Tensor{ewT([]int{1}, []uint32{1}), ewT([]int{1}, []uint32{2})},
			want: ewT([]int{1}, []uint32{math.MaxUint32})},
		{name: "mismatched types", op: "Add",
			in:      []*ir.Tensor{ewT([]int{1}, []float32{1}), ewT([]int{1}, []int64{1})},
			wantErr: "inputs have different element types float32 and int64"},
		{name: "not broadcastable", op: "Add",
			in:      []*ir.Tensor{ewT([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}), ewT([]int{4}, []float32{1, 2, 3, 4})},
			wantErr: "not broadcastable"},
		{name: "data does not match shape", op: "Mul",
			in:      []*ir.Tensor{ewT([]int{2, 3}, []float32{1, 2}), ewT([]int{1}, []float32{1})},
			wantErr: "needs 6 elements"},
		{name: "missing input", op: "Add",
			in:      []*ir.Tensor{ewT([]int{1}, []float32{1}), nil},
			wantErr: "input 1 is missing"},
	})
}

func TestPow(t *testing.T) {
	ewRunCases(t, []ewCase{
		{name: "float32", op: "Pow",
			in:   []*ir.Tensor{ewT([]int{3}, []float32{1, 2, 3}), ewT([]int{3}, []float32{4, 5, 6})},
			want: ewT([]int{3}, []float32{1, 32, 729})},
		{name: "scalar exponent 2", op: "Pow",
			in:   []*ir.Tensor{ewT([]int{2, 2}, []float32{1, -2, 0.5, 3}), ir.Scalar(float32(2))},
			want: ewT([]int{2, 2}, []float32{1, 4, 0.25, 9})},
		{name: "scalar exponent 0.5", op: "Pow",
			in:   []*ir.Tensor{ewT([]int{3}, []float64{4, 2, -1}), ir.Scalar(0.5)},
			want: ewT([]int{3}, []float64{2, math.Sqrt2, math.NaN()})},
		{name: "broadcast array exponent", op: "Pow",
			in:   []*ir.Tensor{ewT([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}), ewT([]int{3}, []float32{1, 2, 3})},
			want: ewT([]int{2, 3}, []float32{1, 4, 27, 4, 25, 216})},
		{name: "float32 base int64 exponent", op: "Pow",
			in:   []*ir.Tensor{ewT([]int{3}, []float32{1, 2, 3}), ewT([]int{3}, []int64{4, 5, -1})},
			want: ewT([]int{3}, []float32{1, 32, 1.0 / 3})},
		{name: "int32 base float32 exponent", op: "Pow",
			in:   []*ir.Tensor{ewT([]int{3}, []int32{1, 2, 3}), ewT([]int{3}, []float32{4, 5, 6})},
			want: ewT([]int{3}, []int32{1, 32, 729})},
		{name: "int64 base int64 exponent exact", op: "Pow",
			in:   []*ir.Tensor{ewT([]int{4}, []int64{3, -2, 2, 5}), ewT([]int{4}, []int64{39, 3, -1, 0})},
			want: ewT([]int{4}, []int64{4052555153018976267, -8, 0, 1})},
		{name: "float16 base uint8 exponent", op: "Pow",
			in:   []*ir.Tensor{ewF16([]int{2}, 1.5, -2), ewT([]int{2}, []uint8{2, 3})},
			want: ewF16([]int{2}, 2.25, -8)},
		{name: "pow-7 needs one type", op: "Pow", opset: 7,
			in:      []*ir.Tensor{ewT([]int{1}, []float32{2}), ewT([]int{1}, []int64{2})},
			wantErr: "inputs have different element types float32 and int64"},
		{name: "pow-7 float64", op: "Pow", opset: 7,
			in:   []*ir.Tensor{ewT([]int{1}, []float64{2}), ewT([]int{1}, []float64{-2})},
			want: ewT([]int{1}, []float64{0.25})},
		{name: "int base at opset 11", op: "Pow", opset: 11,
			in:      []*ir.Tensor{ewT([]int{1}, []int32{2}), ewT([]int{1}, []int32{2})},
			wantErr: "element type int32"},
		{name: "bool exponent", op: "Pow",
			in:      []*ir.Tensor{ewT([]int{1}, []float32{2}), ewT([]int{1}, []bool{true})},
			wantErr: "exponent (input 1) has element type bool"},
	})
}

// TestPowSmallIntegerExponents checks the float32 fast path for scalar
// integer exponents in [-4, 4] against math.Pow in float64, over random
// values of every magnitude and the IEEE special values: within 1 float32
// ulp of it (x³, x⁴ are rounded twice), and where it overflows, underflows
// or is 0 or NaN in float32, exactly its float32 value, sign included.
func TestPowSmallIntegerExponents(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 2, -3, 0.5, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-20, -1e13}
	for range 1 << 16 {
		xs = append(xs, float32(r.NormFloat64()*math.Pow(10, float64(r.Intn(20)-10))))
	}
	x := ir.FromSlice([]int{len(xs)}, xs)
	for n := -4; n <= 4; n++ {
		out, err := runPow(FloatTypes, nil)(&Context{}, &ir.Node{OpType: "Pow"}, []*ir.Tensor{x, ir.Scalar(float32(n))})
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range out[0].Float32s() {
			w := math.Pow(float64(xs[i]), float64(n))
			w32 := float32(w)
			if math.IsInf(float64(w32), 0) || w32 == 0 || w != w {
				// Overflow, underflow, zeros, NaN: exactly math.Pow's, sign included.
				if math.Float32bits(g) != math.Float32bits(w32) && !(g != g && w != w) {
					t.Fatalf("pow(%g, %d) = %g, math.Pow gives %g", xs[i], n, g, w32)
				}
				continue
			}
			if off := ulpsOff(g, w); off > 1 {
				t.Fatalf("pow(%g, %d) = %g, %g ulp from %g", xs[i], n, g, off, w)
			}
		}
	}
}

func TestArithmeticInfer(t *testing.T) {
	f := ir.Float
	ewInferCases(t, []ewInferCase{
		{name: "[batch,seq,64]+[64]", op: "Add",
			in:   []Value{ewTyped(f, "batch", "seq", 64), ewTyped(f, 64)},
			want: ewTyped(f, "batch", "seq", 64)},
		{name: "[batch,1]+[1,seq]", op: "Add",
			in:   []Value{ewTyped(f, "batch", 1), ewTyped(f, 1, "seq")},
			want: ewTyped(f, "batch", "seq")},
		{name: "symbol against size", op: "Mul",
			in:   []Value{ewTyped(f, "batch", "seq"), ewTyped(f, 8, 1)},
			want: ewTyped(f, 8, "seq")},
		{name: "two symbols give unknown", op: "Mul",
			in:   []Value{ewTyped(f, "a"), ewTyped(f, "b")},
			want: ewTyped(f, nil)},
		{name: "scalar", op: "Div",
			in:   []Value{ewTyped(ir.Int64, "n"), ewTyped(ir.Int64)},
			want: ewTyped(ir.Int64, "n")},
		{name: "unknown rank", op: "Sub",
			in:   []Value{UnknownRank(f), ewTyped(f, 3)},
			want: UnknownRank(f)},
		{name: "bool add", op: "Add",
			in:   []Value{ewTyped(ir.Bool, 1, "seq"), ewTyped(ir.Bool, "seq", 1)},
			want: ewTyped(ir.Bool, "seq", "seq")},
		{name: "mismatch", op: "Add",
			in:      []Value{ewTyped(f, 3), ewTyped(ir.Int64, 3)},
			wantErr: "inputs have different element types float32 and int64"},
		{name: "not broadcastable", op: "Add",
			in:      []Value{ewTyped(f, 2, 3), ewTyped(f, 4)},
			wantErr: "not broadcastable"},
		{name: "string refused", op: "Add",
			in:      []Value{ewTyped(ir.String, 1), ewTyped(ir.String, 1)},
			wantErr: "element type string"},
		{name: "pow int base float exponent", op: "Pow", opset: 15,
			in:   []Value{ewTyped(ir.Int64, "n"), ewTyped(ir.Float)},
			want: ewTyped(ir.Int64, "n")},
		{name: "pow missing exponent", op: "Pow",
			in:      []Value{ewTyped(f, 2), {}},
			wantErr: "input 1 is missing"},
	})
}

// TestArithmeticGeneralPathAllTypes runs the strided path ([2,1]+[1,3])
// for every numeric type, checking one hand-computed result each.
func TestArithmeticGeneralPathAllTypes(t *testing.T) {
	// a = [[1],[2]], b = [[3,4,5]] → a*b = [[3,4,5],[6,8,10]]
	want := []float64{3, 4, 5, 6, 8, 10}
	for _, dt := range NumericTypes {
		a, err := CastTensor(ewT([]int{2, 1}, []float64{1, 2}), dt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := CastTensor(ewT([]int{1, 3}, []float64{3, 4, 5}), dt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ewRun(t, "Mul", 14, nil, a, b)
		if err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		w, err := CastTensor(ewT([]int{2, 3}, want), dt)
		if err != nil {
			t.Fatal(err)
		}
		ewCheck(t, got, w)
	}
}

func BenchmarkAdd(b *testing.B) {
	fill := func(shape []int) *ir.Tensor {
		x := ir.NewTensor(ir.Float, shape)
		for i := range x.Data.([]float32) {
			x.Data.([]float32)[i] = float32(i%7) * 0.5
		}
		return x
	}
	s, err := Lookup(DomainONNX, "Add", 17)
	if err != nil {
		b.Fatal(err)
	}
	n := ewNode("Add", 2)
	for _, c := range []struct {
		name string
		a, x []int
	}{
		{"same_512x768", []int{512, 768}, []int{512, 768}},
		{"scalar_512x768", []int{512, 768}, nil},
		{"bias_512x768+768", []int{512, 768}, []int{768}},
		{"mask_12x512x512+512x1", []int{12, 512, 512}, []int{512, 1}},
	} {
		in := []*ir.Tensor{fill(c.a), fill(c.x)}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(ir.NumElements(c.a)) * 4)
			for i := 0; i < b.N; i++ {
				if _, err := s.Run(&Context{Opset: 17, Threads: 1}, n, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
