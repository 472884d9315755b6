package ops

import (
	"math"
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

// numpy: np.random.seed(0); np.random.uniform(0, 1, 6) =
// [0.5488135, 0.71518937, 0.60276338, 0.54488318, 0.4236548, 0.64589411].
func TestMT19937MatchesNumpy(t *testing.T) {
	want := []float64{0.5488135039273248, 0.7151893663724195, 0.6027633760716439, 0.5448831829968969, 0.4236547993389047, 0.6458941130666561}
	rng := newMT19937(0)
	for i, w := range want {
		if got := rng.float64(); math.Abs(got-w) > 1e-15 {
			t.Fatalf("draw %d = %.17g, want %.17g", i, got, w)
		}
	}
}

func TestDropoutTraining(t *testing.T) {
	x := cF32([]int{2, 3}, 1, -2, 3, 0.5, 2, 4)
	tests := []struct {
		ratio    float32
		want     []float64
		wantMask []bool
	}{
		{0.5, []float64{2, -4, 6, 1, 0, 8}, []bool{true, true, true, true, false, true}},
		{0.6, []float64{0, -5, 7.5, 0, 0, 10}, []bool{false, true, true, false, false, true}},
	}
	s, _ := Lookup("", "Dropout", 13)
	for _, tc := range tests {
		out, err := s.Run(&Context{Opset: 13}, cNode("Dropout", 3, 2, cAttrInt("seed", 0)), []*ir.Tensor{x, cF32(nil, tc.ratio), ir.Scalar(true)})
		if err != nil {
			t.Fatal(err)
		}
		cClose(t, "output", out[0], x.Shape, tc.want, 1e-6)
		for i, v := range out[1].Bools() {
			if v != tc.wantMask[i] {
				t.Fatalf("ratio %g: mask %v, want %v", tc.ratio, out[1].Bools(), tc.wantMask)
			}
		}
	}
	_, err := s.Run(&Context{Opset: 13}, cNode("Dropout", 3, 1), []*ir.Tensor{x, cF32(nil, 1), ir.Scalar(true)})
	if err == nil || !strings.Contains(err.Error(), "ratio must be in [0, 1)") {
		t.Errorf("ratio 1: error %v", err)
	}
	_, err = s.Run(&Context{Opset: 13}, cNode("Dropout", 1, 1), []*ir.Tensor{ir.FromSlice([]int{1}, []int64{1})})
	if err == nil {
		t.Error("Dropout took int64")
	}
}
