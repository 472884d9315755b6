package oip

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestParseJSONData(t *testing.T) {
	cases := []struct {
		name  string
		dt    ir.DType
		shape []int
		data  string
		want  any    // backing slice
		err   string // substring of the error; "" for success
	}{
		{"flat", ir.Float, []int{2, 2}, `[1, 2.5, -3e2, 0]`, []float32{1, 2.5, -300, 0}, ""},
		{"nested", ir.Float, []int{2, 2}, "[[1,2],\n [3,4]]", []float32{1, 2, 3, 4}, ""},
		{"nested 3-D", ir.Int64, []int{2, 1, 2}, `[[[1,-2]],[[3,9007199254740993]]]`, []int64{1, -2, 3, 9007199254740993}, ""},
		{"scalar bare", ir.Double, nil, ` 0.1 `, []float64{0.1}, ""},
		{"scalar in array", ir.Int32, nil, `[7]`, []int32{7}, ""},
		{"empty", ir.Float, []int{0, 3}, `[]`, []float32{}, ""},
		{"empty nested", ir.Float, []int{2, 0}, `[[],[]]`, []float32{}, ""},
		{"bool", ir.Bool, []int{3}, `[true,false,true]`, []bool{true, false, true}, ""},
		{"uint8", ir.Uint8, []int{2}, `[0,255]`, []uint8{0, 255}, ""},
		{"int8 range", ir.Int8, []int{2}, `[-128,127]`, []int8{-128, 127}, ""},
		{"fp16", ir.Float16, []int{2}, `[1, -0.5]`, []uint16{0x3c00, 0xb800}, ""},
		{"bf16", ir.BFloat16, []int{1}, `[1]`, []uint16{0x3f80}, ""},
		{"python specials", ir.Float, []int{3}, `[NaN,Infinity,-Infinity]`, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}, ""},

		{"too few", ir.Float, []int{2, 2}, `[1,2,3]`, nil, "3 elements for shape [2 2], which has 4"},
		{"too many", ir.Float, []int{3}, `[1,2,3,4]`, nil, "more elements than shape [3] has (3)"},
		{"nested wrong", ir.Float, []int{2, 2}, `[[1,2,3],[4]]`, nil, "more than 2 items at depth 1"},
		{"nested short", ir.Float, []int{2, 2}, `[[1,2]]`, nil, "has 1 items at depth 0"},
		{"nested too shallow", ir.Float, []int{2, 2, 1}, `[[1,2],[3,4]]`, nil, "expected an array"},
		{"mixed", ir.Float, []int{2}, `[1,[2]]`, nil, "missing value"},
		{"int given float", ir.Int64, []int{1}, `[1.5]`, nil, `"1.5" is not an integer, as INT64 needs`},
		{"int overflow", ir.Int8, []int{1}, `[128]`, nil, "128 is out of range for INT8"},
		{"uint negative", ir.Uint32, []int{1}, `[-1]`, nil, "-1 is out of range for UINT32"},
		{"fp32 overflow", ir.Float, []int{1}, `[1e39]`, nil, "out of range for FP32"},
		{"fp16 overflow", ir.Float16, []int{1}, `[70000]`, nil, "out of range for FP16"},
		{"string element", ir.Float, []int{1}, `["1"]`, nil, `"\"1\"" is not a number`},
		{"hex", ir.Float, []int{1}, `[0x10]`, nil, "is not a number"},
		{"leading zero", ir.Int32, []int{1}, `[01]`, nil, "is not an integer"},
		{"bool given 1", ir.Bool, []int{1}, `[1]`, nil, "is not a BOOL"},
		{"object", ir.Float, []int{1}, `{"a":1}`, nil, "must be an array"},
		{"trailing", ir.Float, []int{1}, `[1] x`, nil, "after the data"},
		{"unterminated", ir.Float, []int{2}, `[1,2`, nil, "expected ',' or ']'"},
		{"empty input", ir.Float, []int{1}, ``, nil, "no data"},
		{"trailing comma", ir.Float, []int{2}, `[1,2,]`, nil, "missing value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseJSONData(c.dt, c.shape, []byte(c.data))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				if ClassOf(err) != InvalidArgument {
					t.Fatalf("class %v, want invalid_argument", ClassOf(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f, ok := c.want.([]float32); ok && len(f) > 0 && math.IsNaN(float64(f[0])) {
				g := got.Data.([]float32)
				if !math.IsNaN(float64(g[0])) || !math.IsInf(float64(g[1]), 1) || !math.IsInf(float64(g[2]), -1) {
					t.Fatalf("got %v", g)
				}
				return
			}
			if !reflect.DeepEqual(got.Data, c.want) {
				t.Fatalf("got %v, want %v", got.Data, c.want)
			}
		})
	}
}

func TestAppendJSONDataRoundTrip(t *testing.T) {
	tensors := []*ir.Tensor{
		ir.FromSlice([]int{2, 2}, []float32{1.5, -2, 3.0000002, 1e-30}),
		ir.FromSlice([]int{2}, []float64{0.1, -1e300}),
		ir.FromSlice([]int{3}, []int64{math.MinInt64, 0, math.MaxInt64}),
		ir.FromSlice([]int{2}, []uint64{0, math.MaxUint64}),
		ir.FromSlice([]int{2}, []bool{true, false}),
		ir.FromSlice([]int{2}, []int8{-128, 127}),
		ir.FromSlice(nil, []int32{42}),
		{DType: ir.Float16, Shape: []int{2}, Data: []uint16{0x3c00, 0xc000}},
		{DType: ir.BFloat16, Shape: []int{1}, Data: []uint16{0x3f80}},
	}
	for _, in := range tensors {
		js := AppendJSONData(nil, in)
		out, err := ParseJSONData(in.DType, in.Shape, js)
		if err != nil {
			t.Fatalf("%v: %s: %v", in.DType, js, err)
		}
		if !reflect.DeepEqual(out.Data, in.Data) {
			t.Fatalf("%v: %s read back as %v, want %v", in.DType, js, out.Data, in.Data)
		}
	}
	if got := string(AppendJSONData(nil, ir.FromSlice([]int{3}, []float32{float32(math.NaN()), float32(math.Inf(1)), 0.25}))); got != "[NaN,Infinity,0.25]" {
		t.Fatalf("specials: %s", got)
	}
}
