package ir

import (
	"reflect"
	"testing"
)

func TestRandomTensor(t *testing.T) {
	for _, c := range []struct {
		dt    DType
		shape []int
		// ok checks element i of the data.
		ok func(data any, i int) bool
	}{
		{Float, []int{3, 5}, func(d any, i int) bool { v := d.([]float32)[i]; return v >= -1 && v < 1 }},
		{Double, []int{4}, func(d any, i int) bool { v := d.([]float64)[i]; return v >= -1 && v < 1 }},
		{Float16, []int{2, 3}, func(d any, i int) bool { v := Float16ToFloat32(d.([]uint16)[i]); return v >= -1 && v <= 1 }},
		{BFloat16, []int{2, 3}, func(d any, i int) bool { v := BFloat16ToFloat32(d.([]uint16)[i]); return v >= -1 && v <= 1 && v != 0 }},
		{Int64, []int{4, 8}, func(d any, i int) bool { v := d.([]int64)[i]; return v == 1 || v == 0 && i%8 != 0 }},
		{Int32, []int{4, 8}, func(d any, i int) bool { v := d.([]int32)[i]; return v == 1 || v == 0 && i%8 != 0 }},
		{Bool, []int{4, 8}, func(d any, i int) bool { return !d.([]bool)[i] || i%8 != 0 }},
	} {
		a, err := RandomTensor(c.dt, c.shape, 7)
		if err != nil {
			t.Fatalf("%v: %v", c.dt, err)
		}
		b, _ := RandomTensor(c.dt, c.shape, 7)
		other, _ := RandomTensor(c.dt, c.shape, 8)
		if a.DType != c.dt || !reflect.DeepEqual(a.Shape, c.shape) {
			t.Fatalf("%v: got %v %v", c.dt, a.DType, a.Shape)
		}
		if !reflect.DeepEqual(a.Data, b.Data) {
			t.Errorf("%v: the same seed gave different data", c.dt)
		}
		if reflect.DeepEqual(a.Data, other.Data) {
			t.Errorf("%v: seeds 7 and 8 gave the same data", c.dt)
		}
		for i := 0; i < int(NumElements(c.shape)); i++ {
			if !c.ok(a.Data, i) {
				t.Fatalf("%v: element %d is %v", c.dt, i, reflect.ValueOf(a.Data).Index(i))
			}
		}
	}
	if _, err := RandomTensor(String, []int{2}, 1); err == nil {
		t.Error("random strings: no error")
	}
}

func TestOnesTensor(t *testing.T) {
	for _, c := range []struct {
		dt   DType
		want any
	}{
		{Float, []float32{1, 1}},
		{Double, []float64{1, 1}},
		{Float16, []uint16{0x3c00, 0x3c00}},
		{BFloat16, []uint16{0x3f80, 0x3f80}},
		{Int64, []int64{1, 1}},
		{Int8, []int8{1, 1}},
		{Uint8, []uint8{1, 1}},
		{Bool, []bool{true, true}},
	} {
		got, err := OnesTensor(c.dt, []int{2})
		if err != nil {
			t.Fatalf("%v: %v", c.dt, err)
		}
		if got.DType != c.dt || !reflect.DeepEqual(got.Data, c.want) {
			t.Errorf("%v: got %v %v, want %v", c.dt, got.DType, got.Data, c.want)
		}
	}
	for _, dt := range []DType{String, Float8E4M3FN} {
		if _, err := OnesTensor(dt, []int{2}); err == nil {
			t.Errorf("ones of %v: no error", dt)
		}
	}
}
