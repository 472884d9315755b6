package viz

import (
	"bytes"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// countColor renders h and counts the pixels of exactly color c.
func countColor(t *testing.T, h *HeatMap, c color.NRGBA) int {
	t.Helper()
	var buf bytes.Buffer
	if err := h.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA) == c {
				n++
			}
		}
	}
	return n
}

// TestHeatMapMaskedCells draws masked positions in MaskedColor, and only
// them; the largest weight gets viridis's last colour.
func TestHeatMapMaskedCells(t *testing.T) {
	w := []float32{0.5, 0.5, 0, 0, 0.25, 0.25, 0.5, 0, 0.1, 0.2, 0.3, 0.4}
	h := &HeatMap{Title: "test", Rows: 3, Cols: 4, Weights: w}
	// Anti-aliased text may hit the grey here and there; cells are big.
	noMask := countColor(t, h, MaskedColor)
	if noMask > 50 {
		t.Errorf("%d grey pixels without a mask", noMask)
	}
	yellow := viridisControls[len(viridisControls)-1].(color.NRGBA)
	top := countColor(t, h, yellow)
	if top < 1000 {
		t.Errorf("%d pixels of viridis's top colour for the two cells of the largest weight", top)
	}
	h.Masked = []bool{false, false, true, true, false, false, false, true, false, false, false, false}
	grey := countColor(t, h, MaskedColor)
	// 3 of 12 cells masked: about a quarter of the map's area.
	if grey-noMask < top {
		t.Errorf("%d grey pixels for 3 masked cells, %d yellow for 2 cells", grey, top)
	}
	// A masked cell that carries weight (a finite fill that lost to lower
	// scores) is drawn in colour: masking the largest weight's cells
	// leaves its yellow.
	h.Masked[0], h.Masked[1] = true, true
	if g, y := countColor(t, h, MaskedColor), countColor(t, h, yellow); g > grey+50 || y < top/2 {
		t.Errorf("masked cells of weight 0.5: %d grey pixels (was %d), %d yellow (was %d)", g, grey, y, top)
	}
}

// TestHeatMapLargestWeights draws maps whose largest weight is one that
// gonum's own palette stepping rounds past its maximum (1 - 11·2^-21:
// one of Swin V2's attention maps) and others, without an error or a panic.
func TestHeatMapLargestWeights(t *testing.T) {
	for _, hi := range []float32{1 - 11*0x1p-21, 1 - 0x1p-20, 1 - 0x1p-24, 1, 0x1p-126, 0.3, 1e-30} {
		h := &HeatMap{Title: "test", Rows: 2, Cols: 2, Weights: []float32{hi, 0, hi / 3, 0}}
		var buf bytes.Buffer
		if err := h.WritePNG(&buf); err != nil {
			t.Errorf("largest weight %g: %v", hi, err)
		}
	}
}

func TestHeatMapRejectsBadSizes(t *testing.T) {
	var buf bytes.Buffer
	for _, h := range []*HeatMap{
		{Rows: 2, Cols: 2, Weights: []float32{1, 2, 3}},
		{Rows: 0, Cols: 2},
		{Rows: 1, Cols: 2, Weights: []float32{1, 2}, Masked: []bool{true}},
	} {
		if err := h.WritePNG(&buf); err == nil {
			t.Errorf("%d×%d with %d weights, %d mask: no error", h.Rows, h.Cols, len(h.Weights), len(h.Masked))
		}
	}
}

func TestMaskedBroadcasts(t *testing.T) {
	boolT := func(shape []int, v ...bool) *ir.Tensor { return &ir.Tensor{DType: ir.Bool, Shape: shape, Data: v} }
	cases := []struct {
		name    string
		weights []int
		mask    *ir.Tensor
		kind    string
		want    []bool
		err     string
		padKeys bool
	}{
		{"key padding [B,1,1,Sk]", []int{2, 1, 2, 2}, boolT([]int{2, 1, 1, 2}, false, true, false, false), ops.MaskBoolTrueMasks,
			[]bool{false, true, false, true, false, false, false, false}, "", false},
		{"causal [Sq,Sk] over heads", []int{2, 2, 2}, boolT([]int{2, 2}, false, true, false, false), ops.MaskBoolTrueMasks,
			[]bool{false, true, false, false, false, true, false, false}, "", false},
		{"keep mask", []int{1, 3}, boolT([]int{3}, true, false, true), ops.MaskBoolFalseMasks, []bool{false, true, false}, "", false},
		{"additive", []int{1, 3}, &ir.Tensor{DType: ir.Float, Shape: []int{1, 3}, Data: []float32{0, -1e9, -0.5}}, ops.MaskAdditive, []bool{false, true, false}, "", false},
		{"not broadcastable", []int{2, 3}, boolT([]int{2}, true, false), ops.MaskBoolTrueMasks, nil, "does not broadcast", false},
		{"higher rank", []int{3}, boolT([]int{1, 3}, true, false, true), ops.MaskBoolTrueMasks, nil, "higher rank", false},
		{"kind and type disagree", []int{3}, boolT([]int{3}, true, false, true), ops.MaskAdditive, nil, "with kind", false},
		{"short keep mask of an Attention node", []int{2, 3}, boolT([]int{2}, true, false), ops.MaskBoolFalseMasks, []bool{false, true, true, false, true, true}, "", true},
	}
	for _, c := range cases {
		got, err := masked(c.weights, c.mask, c.kind, c.padKeys)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && !slices.Equal(got, c.want):
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMaskKeyLengths(t *testing.T) {
	l := layout{batch: 2, heads: 1, sq: 2, sk: 3}
	lens := func(v ...int64) *ir.Tensor { return &ir.Tensor{DType: ir.Int64, Shape: []int{len(v)}, Data: v} }
	cases := []struct {
		name    string
		hidden  []bool
		lengths *ir.Tensor
		want    []bool
		err     bool
	}{
		{"item 0 keeps 2 keys, item 1 all", nil, lens(2, 3),
			[]bool{false, false, true, false, false, true, false, false, false, false, false, false}, false},
		{"0 and beyond the keys clamp", nil, lens(0, 9),
			[]bool{true, true, true, true, true, true, false, false, false, false, false, false}, false},
		{"added to a mask", []bool{true, false, false, false, false, false, false, true, false, false, false, false}, lens(3, 1),
			[]bool{true, false, false, false, false, false, false, true, true, false, true, true}, false},
		{"one length per item", nil, lens(3), nil, true},
		{"int64 only", nil, &ir.Tensor{DType: ir.Int32, Shape: []int{2}, Data: []int32{1, 1}}, nil, true},
	}
	for _, c := range cases {
		got, err := maskKeyLengths(c.hidden, l, c.lengths)
		switch {
		case c.err != (err != nil):
			t.Errorf("%s: error %v", c.name, err)
		case !c.err && !slices.Equal(got, c.want):
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestLayout(t *testing.T) {
	cases := []struct {
		shape []int
		want  layout
		label string
	}{
		{[]int{7, 9}, layout{batch: 1, heads: 1, sq: 7, sk: 9, lead: 0}, ""},
		{[]int{8, 7, 7}, layout{batch: 1, heads: 8, sq: 7, sk: 7, lead: 1}, "item 1"},
		{[]int{2, 4, 5, 9}, layout{batch: 2, heads: 4, sq: 5, sk: 9, lead: 2}, "batch 1, head 1"},
		{[]int{2, 3, 4, 5, 9}, layout{batch: 6, heads: 4, sq: 5, sk: 9, lead: 3}, "batch 1, head 1"},
	}
	for _, c := range cases {
		l, err := layoutOf(c.shape)
		if err != nil || l != c.want || l.label(1, 1) != c.label {
			t.Errorf("%v: %+v %q %v, want %+v %q", c.shape, l, l.label(1, 1), err, c.want, c.label)
		}
	}
	if _, err := layoutOf([]int{3}); err == nil {
		t.Error("rank 1: no error")
	}
}
