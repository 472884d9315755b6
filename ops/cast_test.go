package ops

import (
	"math"
	"math/rand"
	"reflect"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestCast(t *testing.T) {
	to := func(dt ir.DType) []*ir.Attribute { return []*ir.Attribute{ewIntAttr("to", int64(dt))} }
	nan := math.NaN()
	ewRunCases(t, []ewCase{
		{name: "float to int32 truncates", op: "Cast", attrs: to(ir.Int32),
			in:   []*ir.Tensor{ewT([]int{6}, []float32{1.9, -1.9, 0.5, -0.5, 2, 1e3})},
			want: ewT([]int{6}, []int32{1, -1, 0, 0, 2, 1000})},
		{name: "float64 to int64", op: "Cast", attrs: to(ir.Int64),
			in:   []*ir.Tensor{ewT([]int{2}, []float64{-3.99, 4e15})},
			want: ewT([]int{2}, []int64{-3, 4e15})},
		{name: "int64 to int32 (shape values)", op: "Cast", attrs: to(ir.Int32),
			in:   []*ir.Tensor{ewT([]int{3}, []int64{1, 128, 768})},
			want: ewT([]int{3}, []int32{1, 128, 768})},
		{name: "int64 to int8 wraps", op: "Cast", attrs: to(ir.Int8),
			in:   []*ir.Tensor{ewT([]int{2}, []int64{300, -129})},
			want: ewT([]int{2}, []int8{44, 127})},
		{name: "int64 to float32", op: "Cast", attrs: to(ir.Float),
			in:   []*ir.Tensor{ewT([]int{2}, []int64{64, -3})},
			want: ewT([]int{2}, []float32{64, -3})},
		{name: "float to bool (NaN is true)", op: "Cast", attrs: to(ir.Bool),
			in:   []*ir.Tensor{ewT([]int{4}, []float32{0, float32(math.Copysign(0, -1)), 0.1, float32(nan)})},
			want: ewT([]int{4}, []bool{false, false, true, true})},
		{name: "bool to float", op: "Cast", attrs: to(ir.Float),
			in:   []*ir.Tensor{ewT([]int{2}, []bool{true, false})},
			want: ewT([]int{2}, []float32{1, 0})},
		{name: "bool to int64", op: "Cast", attrs: to(ir.Int64),
			in:   []*ir.Tensor{ewT([]int{2}, []bool{false, true})},
			want: ewT([]int{2}, []int64{0, 1})},
		{name: "int32 to bool", op: "Cast", attrs: to(ir.Bool),
			in:   []*ir.Tensor{ewT([]int{3}, []int32{0, -1, 7})},
			want: ewT([]int{3}, []bool{false, true, true})},
		{name: "float to float16 rounds to nearest even", op: "Cast", attrs: to(ir.Float16),
			in:   []*ir.Tensor{ewT([]int{5}, []float32{1, 0.1, 65504, 1e5, 1 + 1.0/2048})},
			want: ewF16([]int{5}, 1, 0.099975586, 65504, float32(math.Inf(1)), 1)},
		{name: "float16 to float", op: "Cast", attrs: to(ir.Float),
			in:   []*ir.Tensor{ewF16([]int{3}, 0.099975586, -2, 6.1035156e-05)},
			want: ewT([]int{3}, []float32{0.099975586, -2, 6.1035156e-05})},
		{name: "float16 to int32", op: "Cast", attrs: to(ir.Int32),
			in:   []*ir.Tensor{ewF16([]int{2}, 2.5, -7.75)},
			want: ewT([]int{2}, []int32{2, -7})},
		{name: "int64 to float16", op: "Cast", attrs: to(ir.Float16),
			in:   []*ir.Tensor{ewT([]int{2}, []int64{3, 2049})},
			want: ewF16([]int{2}, 3, 2048)},
		{name: "same type copies", op: "Cast", attrs: to(ir.Float),
			in:   []*ir.Tensor{ewT([]int{2}, []float32{1.5, 2})},
			want: ewT([]int{2}, []float32{1.5, 2})},
		{name: "uint8 to float64", op: "Cast", attrs: to(ir.Double),
			in:   []*ir.Tensor{ewT(nil, []uint8{255})},
			want: ewT(nil, []float64{255})},
		{name: "float to string", op: "Cast", attrs: to(ir.String),
			in:   []*ir.Tensor{ewT([]int{5}, []float32{0.5, 0.1, 1e-7, float32(nan), float32(math.Inf(-1))})},
			want: ewT([]int{5}, []string{"0.5", "0.1", "1e-07", "NaN", "-INF"})},
		{name: "int to string", op: "Cast", attrs: to(ir.String),
			in:   []*ir.Tensor{ewT([]int{2}, []int64{-12, 7})},
			want: ewT([]int{2}, []string{"-12", "7"})},
		{name: "string to float", op: "Cast", attrs: to(ir.Float),
			in:   []*ir.Tensor{ewT([]int{5}, []string{"0.5", "-1e-3", "NaN", "INF", "-inf"})},
			want: ewT([]int{5}, []float32{0.5, -1e-3, float32(nan), float32(math.Inf(1)), float32(math.Inf(-1))})},
		{name: "string to int64", op: "Cast", attrs: to(ir.Int64),
			in:   []*ir.Tensor{ewT([]int{2}, []string{"42", "-7"})},
			want: ewT([]int{2}, []int64{42, -7})},
		{name: "bad string", op: "Cast", attrs: to(ir.Float),
			in: []*ir.Tensor{ewT([]int{1}, []string{"abc"})}, wantErr: `cannot parse "abc"`},
		{name: "string before opset 9", op: "Cast", opset: 8, attrs: to(ir.String),
			in: []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: "cannot cast to string"},
		{name: "empty", op: "Cast", attrs: to(ir.Int64),
			in: []*ir.Tensor{ewT([]int{0, 2}, []float32{})}, want: ewT([]int{0, 2}, []int64{})},
		{name: "missing to", op: "Cast",
			in: []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: `missing required attribute "to"`},
		{name: "to is not a type", op: "Cast", attrs: to(ir.DType(99)),
			in: []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: "cannot cast to dtype(99)"},
		{name: "bfloat16 before opset 13", op: "Cast", opset: 12, attrs: to(ir.BFloat16),
			in: []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: "cannot cast to bfloat16"},
		{name: "to bfloat16 rounds to nearest even", op: "Cast", opset: 13, attrs: to(ir.BFloat16),
			in:   []*ir.Tensor{ewT([]int{2}, []float32{1, 0.48})},
			want: &ir.Tensor{DType: ir.BFloat16, Shape: []int{2}, Data: []uint16{0x3f80, 0x3ef6}}},
		{name: "to is a float", op: "Cast", attrs: []*ir.Attribute{{Name: "to", Type: ir.AttrFloat, Float: 1}},
			in: []*ir.Tensor{ewT([]int{1}, []float32{1})}, wantErr: "want int"},
		{name: "castlike", op: "CastLike",
			in:   []*ir.Tensor{ewT([]int{2}, []float64{1.5, -2.5}), ewT([]int{0}, []int32{})},
			want: ewT([]int{2}, []int32{1, -2})},
	})
}

func TestCastFloat16RoundTrip(t *testing.T) {
	// Every finite float16 survives float16 → float32 → float16, and
	// float16 → float64 → float16.
	h := make([]uint16, 0, 1<<16)
	for b := 0; b < 1<<16; b++ {
		if b&0x7c00 == 0x7c00 && b&0x3ff != 0 {
			continue // NaN payloads are not preserved
		}
		h = append(h, uint16(b))
	}
	x := &ir.Tensor{DType: ir.Float16, Shape: []int{len(h)}, Data: h}
	for _, mid := range []ir.DType{ir.Float, ir.Double} {
		f, err := CastTensor(x, mid)
		if err != nil {
			t.Fatal(err)
		}
		back, err := CastTensor(f, ir.Float16)
		if err != nil {
			t.Fatal(err)
		}
		got := back.Data.([]uint16)
		for i := range h {
			if got[i] != h[i] {
				t.Fatalf("via %v: %#04x came back as %#04x", mid, h[i], got[i])
			}
		}
	}
}

func TestCastInfer(t *testing.T) {
	to := func(dt ir.DType) []*ir.Attribute { return []*ir.Attribute{ewIntAttr("to", int64(dt))} }
	shapeVal := Value{Type: Known(ir.Int64, []int{2}), Sym: ewSym("batch", "seq")}
	ewInferCases(t, []ewInferCase{
		{name: "keeps symbolic shape", op: "Cast", attrs: to(ir.Float16),
			in: []Value{ewTyped(ir.Float, "batch", "seq", 64)}, want: ewTyped(ir.Float16, "batch", "seq", 64)},
		{name: "int64 to int32 keeps Sym", op: "Cast", attrs: to(ir.Int32),
			in: []Value{shapeVal}, want: Value{Type: Known(ir.Int32, []int{2}), Sym: ewSym("batch", "seq")}},
		{name: "int64 to float drops Sym", op: "Cast", attrs: to(ir.Float),
			in: []Value{shapeVal}, want: Value{Type: Known(ir.Float, []int{2})}},
		{name: "unknown rank", op: "Cast", attrs: to(ir.Bool),
			in: []Value{UnknownRank(ir.Float)}, want: UnknownRank(ir.Bool)},
		{name: "missing to", op: "Cast",
			in: []Value{ewTyped(ir.Float, 1)}, wantErr: `missing required attribute "to"`},
		{name: "bad to", op: "Cast", attrs: to(ir.Undefined),
			in: []Value{ewTyped(ir.Float, 1)}, wantErr: "cannot cast to undefined"},
		{name: "castlike", op: "CastLike",
			in: []Value{ewTyped(ir.Float, "n"), ewTyped(ir.Float16)}, want: ewTyped(ir.Float16, "n")},
	})
}

// TestCastThreads: a Cast large enough to split over threads gives, for each
// source type, what one thread gives.
func TestCastThreads(t *testing.T) {
	const n = 3*castParallelMin + 17
	r := rand.New(rand.NewSource(8))
	bools, ints, floats := ir.NewTensor(ir.Bool, []int{n}), ir.NewTensor(ir.Int64, []int{n}), ir.NewTensor(ir.Float, []int{n})
	for i := range n {
		bools.Bools()[i] = r.Intn(2) == 0
		ints.Int64s()[i] = r.Int63n(1<<40) - 1<<39
		floats.Float32s()[i] = (r.Float32() - 0.5) * 1e6
	}
	for _, c := range []struct {
		src *ir.Tensor
		to  ir.DType
	}{{bools, ir.Float}, {ints, ir.Float}, {floats, ir.Int32}, {floats, ir.Double}} {
		want, err := castTensor(&Context{Threads: 1}, c.src, c.to, defaultCastOptions)
		if err != nil {
			t.Fatal(err)
		}
		for threads := 2; threads <= 4; threads++ {
			got, err := castTensor(&Context{Threads: threads}, c.src, c.to, defaultCastOptions)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Data, want.Data) {
				t.Fatalf("%v → %v on %d threads differs from one thread", c.src.DType, c.to, threads)
			}
		}
	}
}
