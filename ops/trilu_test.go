package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestTrilu(t *testing.T) {
	x := mvF32([]int{3, 4}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	cases := []struct {
		name  string
		upper int64
		k     *ir.Tensor
		want  []float32
	}{
		{"triu", 1, nil, []float32{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}},
		{"triu k=1", 1, ir.Scalar(int64(1)), []float32{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}},
		{"triu k=-1", 1, ir.Scalar(int64(-1)), []float32{1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}},
		{"triu k=-7", 1, ir.Scalar(int64(-7)), []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{"triu k=6", 1, ir.Scalar(int64(6)), []float32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"tril", 0, nil, []float32{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}},
		{"tril k=1", 0, ir.Scalar(int64(1)), []float32{1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12}},
		{"tril k=-1", 0, ir.FromSlice([]int{1}, []int64{-1}), []float32{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}},
		{"tril k=-9", 0, ir.Scalar(int64(-9)), []float32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"tril huge k", 0, ir.Scalar(int64(1 << 62)), []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []*ir.Tensor{x}
			if c.k != nil {
				in = append(in, c.k)
			}
			out := mvRun(t, 14, mvNode("Trilu", len(in), 1, mvInt("upper", c.upper)), in...)
			mvWant(t, out[0], []int{3, 4}, c.want)
		})
	}
	// A batch of bool masks: the causal mask.
	ones := ir.FromSlice([]int{2, 2, 2}, []bool{true, true, true, true, true, true, true, true})
	out := mvRun(t, 14, mvNode("Trilu", 1, 1, mvInt("upper", 0)), ones)
	mvWant(t, out[0], []int{2, 2, 2}, []bool{true, false, true, true, true, false, true, true})
	out = mvRun(t, 14, mvNode("Trilu", 1, 1), ir.FromSlice([]int{0, 3}, []int64{}))
	mvWant(t, out[0], []int{0, 3}, []int64{})
	mvErr(t, 14, mvNode("Trilu", 1, 1), "rank 2 or more", mvI64(1, 2))
	mvErr(t, 14, mvNode("Trilu", 2, 1), "k must be an int64 scalar", x, mvI64(1, 2))
}
