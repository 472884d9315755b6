package ops

import (
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestDropout(t *testing.T) {
	x := cF32([]int{2, 2}, 1, -2, 3, 0.5)
	tests := []struct {
		name     string
		opset    int
		attrs    []*ir.Attribute
		in       []*ir.Tensor
		nOut     int
		wantMask any
	}{
		{"opset 7 ratio attr", 7, []*ir.Attribute{cAttrFloat("ratio", 0.2)}, []*ir.Tensor{x}, 1, nil},
		{"opset 7 mask is T", 7, nil, []*ir.Tensor{x}, 2, []float32{1, 1, 1, 1}},
		{"opset 10 mask is bool", 10, nil, []*ir.Tensor{x}, 2, []bool{true, true, true, true}},
		{"opset 13 ratio input", 13, []*ir.Attribute{cAttrInt("seed", 0)}, []*ir.Tensor{x, cF32(nil, 0.3)}, 2, []bool{true, true, true, true}},
		{"opset 13 training off", 13, nil, []*ir.Tensor{x, cF32(nil, 0.3), ir.Scalar(false)}, 1, nil},
		{"opset 12 training with ratio 0", 12, nil, []*ir.Tensor{x, cF32(nil, 0), ir.Scalar(true)}, 2, []bool{true, true, true, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := cRun(t, tc.opset, cNode("Dropout", len(tc.in), tc.nOut, tc.attrs...), tc.in...)
			if err != nil {
				t.Fatal(err)
			}
			cClose(t, "output", out[0], x.Shape, []float64{1, -2, 3, 0.5}, 0)
			if &out[0].Data.([]float32)[0] == &x.Float32s()[0] {
				t.Error("output aliases the input")
			}
			if tc.nOut == 2 {
				switch want := tc.wantMask.(type) {
				case []bool:
					for i, v := range out[1].Bools() {
						if v != want[i] {
							t.Fatalf("mask %v, want %v", out[1].Bools(), want)
						}
					}
				case []float32:
					cClose(t, "mask", out[1], x.Shape, cF64s(want), 0)
				}
			}
		})
	}
}

func TestDropoutTrainingRefused(t *testing.T) {
	s, _ := Lookup("", "Dropout", 13)
	_, err := s.Run(&Context{Opset: 13}, cNode("Dropout", 3, 1), []*ir.Tensor{cF32([]int{1}, 1), cF32(nil, 0.5), ir.Scalar(true)})
	if err == nil || !strings.Contains(err.Error(), "training mode with ratio 0.5 is not supported") {
		t.Errorf("error %v", err)
	}
	_, err = s.Run(&Context{Opset: 13}, cNode("Dropout", 1, 1), []*ir.Tensor{ir.FromSlice([]int{1}, []int64{1})})
	if err == nil {
		t.Error("Dropout took int64")
	}
}
