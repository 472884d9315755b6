package ops

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestSplitRun(t *testing.T) {
	x := mvF32([]int{2, 6}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	v := mvF32([]int{6}, 1, 2, 3, 4, 5, 6)
	cases := []struct {
		name   string
		opset  int
		attrs  []*ir.Attribute
		split  *ir.Tensor
		in     *ir.Tensor
		nOut   int
		shapes [][]int
		want   [][]float32
	}{
		{"equal 1d", 13, nil, nil, v, 3, [][]int{{2}, {2}, {2}}, [][]float32{{1, 2}, {3, 4}, {5, 6}}},
		{"equal 2d axis1", 13, []*ir.Attribute{mvInt("axis", 1)}, nil, x, 2, [][]int{{2, 3}, {2, 3}},
			[][]float32{{1, 2, 3, 7, 8, 9}, {4, 5, 6, 10, 11, 12}}},
		{"attr split", 11, []*ir.Attribute{mvInt("axis", -1), mvInts("split", 2, 4)}, nil, x, 2, [][]int{{2, 2}, {2, 4}},
			[][]float32{{1, 2, 7, 8}, {3, 4, 5, 6, 9, 10, 11, 12}}},
		{"attr split opset7", 7, []*ir.Attribute{mvInts("split", 1, 1)}, nil, x, 2, [][]int{{1, 6}, {1, 6}},
			[][]float32{{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}}},
		{"input split", 13, []*ir.Attribute{mvInt("axis", 1)}, mvI64(1, 0, 5), x, 3, [][]int{{2, 1}, {2, 0}, {2, 5}},
			[][]float32{{1, 7}, {}, {2, 3, 4, 5, 6, 8, 9, 10, 11, 12}}},
		{"num_outputs even", 18, []*ir.Attribute{mvInt("num_outputs", 2)}, nil, v, 2, [][]int{{3}, {3}},
			[][]float32{{1, 2, 3}, {4, 5, 6}}},
		{"num_outputs uneven", 18, []*ir.Attribute{mvInt("num_outputs", 4)}, nil, v, 4, [][]int{{2}, {2}, {2}, {0}},
			[][]float32{{1, 2}, {3, 4}, {5, 6}, {}}},
		{"num_outputs uneven last smaller", 18, []*ir.Attribute{mvInt("num_outputs", 4), mvInt("axis", 1)}, nil,
			mvIota(1, 7), 4, [][]int{{1, 2}, {1, 2}, {1, 2}, {1, 1}}, [][]float32{{0, 1}, {2, 3}, {4, 5}, {6}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []*ir.Tensor{c.in}
			if c.split != nil {
				in = append(in, c.split)
			}
			out := mvRun(t, c.opset, mvNode("Split", len(in), c.nOut, c.attrs...), in...)
			if len(out) != c.nOut {
				t.Fatalf("%d outputs", len(out))
			}
			for i := range out {
				mvWant(t, out[i], c.shapes[i], c.want[i])
			}
		})
	}
}

func TestSplitErrors(t *testing.T) {
	v := mvF32([]int{5}, 1, 2, 3, 4, 5)
	mvErr(t, 13, mvNode("Split", 1, 2), "cannot split an axis of size 5 into 2 equal parts", v)
	mvErr(t, 13, mvNode("Split", 2, 2), "split [2 2] sums to 4, but the axis has size 5", v, mvI64(2, 2))
	mvErr(t, 11, mvNode("Split", 1, 2, mvInts("split", 5)), "has 1 sizes for 2 outputs", v)
	mvErr(t, 18, mvNode("Split", 2, 2, mvInt("num_outputs", 2)), "not both", v, mvI64(2, 3))
	mvErr(t, 18, mvNode("Split", 1, 3, mvInt("num_outputs", 2)), "num_outputs is 2 but the node has 3 outputs", v)
	mvErr(t, 13, mvNode("Split", 2, 2), "negative size", v, mvI64(6, -1))
	if _, err := mvInfer(t, 13, mvNode("Split", 2, 2, mvInt("axis", 1)), Typed(ir.Float, mvShape("b", 6)), mvConst(mvI64(2, 3))); err == nil {
		t.Error("Infer should check that split sums to the dim")
	}
}

func TestSplitInfer(t *testing.T) {
	x := Typed(ir.Float, mvShape("b", "s", 192))
	out, err := mvInfer(t, 13, mvNode("Split", 2, 3, mvInt("axis", -1)), x, mvConst(mvI64(64, 64, 64)))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out {
		if o.Type.String() != "float32[b, s, 64]" {
			t.Errorf("got %v", o.Type)
		}
	}
	out, err = mvInfer(t, 13, mvNode("Split", 1, 2, mvInt("axis", 1)), x)
	if err != nil || out[1].Type.String() != "float32[b, ?, 192]" {
		t.Errorf("symbolic equal split: %v %v", out, err)
	}
	out, err = mvInfer(t, 13, mvNode("Split", 2, 2), Typed(ir.Float, mvShape(4)), Typed(ir.Int64, mvShape(2)))
	if err != nil || out[0].Type.String() != "float32[?]" {
		t.Errorf("unknown split: %v %v", out, err)
	}
}
