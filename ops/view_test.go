package ops

import (
	"math"
	"testing"
)

func TestViewReshape(t *testing.T) {
	cases := []struct {
		name    string
		v       View
		shape   []int
		ok      bool
		strides []int
	}{
		{"contiguous split", Contiguous([]int{2, 6}), []int{2, 3, 2}, true, []int{6, 2, 1}},
		{"contiguous merge", Contiguous([]int{2, 3, 4}), []int{6, 4}, true, []int{4, 1}},
		{"size-1 dims added", Contiguous([]int{3, 4}), []int{1, 3, 1, 4}, true, []int{0, 4, 0, 1}},
		// [S=3, H=2, D=4] transposed to [H, S, D]: splitting D is fine ...
		{"split inner of transposed", View{Shape: []int{2, 3, 4}, Strides: []int{4, 8, 1}}, []int{2, 3, 2, 2}, true, []int{4, 8, 2, 1}},
		// ... merging H and S is not (they are not contiguous together).
		{"merge non-contiguous", View{Shape: []int{2, 3, 4}, Strides: []int{4, 8, 1}}, []int{6, 4}, false, nil},
		// the head merge: [S, H, D] contiguous to [S, H·D].
		{"head merge", View{Offset: 5, Shape: []int{3, 2, 4}, Strides: []int{8, 4, 1}}, []int{3, 8}, true, []int{8, 1}},
		{"count differs", Contiguous([]int{2, 3}), []int{7}, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := c.v.Reshape(c.shape)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			if got.Offset != c.v.Offset || !SameShape(got.Shape, c.shape) || !SameShape(got.Strides, c.strides) {
				t.Fatalf("got %+v, want strides %v", got, c.strides)
			}
		})
	}
}

// TestViewHeadSplit follows seed 000's head split of a fused QKV
// projection [B=1, S=3, 3·H·D] (H=2, D=4): Reshape [1,3,3,2,4], Transpose
// [0,3,2,1,4], Split on axis 2, Squeeze axis 2 gives K as [1, H, S, D].
func TestViewHeadSplit(t *testing.T) {
	v, ok := Contiguous([]int{1, 3, 24}).Reshape([]int{1, 3, 3, 2, 4})
	if !ok {
		t.Fatal("reshape")
	}
	if v, ok = v.Transpose([]int{0, 3, 2, 1, 4}); !ok {
		t.Fatal("transpose")
	}
	if v, ok = v.Slice(2, 1, 1); !ok { // K
		t.Fatal("slice")
	}
	if v, ok = v.Squeeze([]int{2}); !ok {
		t.Fatal("squeeze")
	}
	want := View{Offset: 8, Shape: []int{1, 2, 3, 4}, Strides: []int{0, 4, 24, 1}} // size-1 dims get stride 0
	if v.Offset != want.Offset || !SameShape(v.Shape, want.Shape) || !SameShape(v.Strides, want.Strides) {
		t.Fatalf("K view %+v, want %+v", v, want)
	}
	// Element K[0][h=1][s=2][d=3] is column 8 + 4 + 3 of row 2.
	if off := v.Offset + 1*v.Strides[1] + 2*v.Strides[2] + 3*v.Strides[3]; off != 2*24+8+4+3 {
		t.Fatalf("offset %d", off)
	}
	if got, err := ParseView(v.Ints()); err != nil || got.Offset != v.Offset || !SameShape(got.Strides, v.Strides) {
		t.Fatalf("round trip %+v, %v", got, err)
	}
}

func TestViewChecks(t *testing.T) {
	head := View{Shape: []int{1, 2, 3, 4}, Strides: []int{24, 4, 8, 1}} // [B,H,S,D] in [B,S,H·D]
	if !head.Bijective(24) || !head.Fits(24) || head.Fits(23) {
		t.Fatalf("head merge view: bijective %v fits %v/%v", head.Bijective(24), head.Fits(24), head.Fits(23))
	}
	if (View{Shape: []int{2, 2}, Strides: []int{1, 1}}).Bijective(4) {
		t.Fatal("overlapping view called bijective")
	}
	if (View{Offset: 1, Shape: []int{2}, Strides: []int{1}}).Bijective(2) {
		t.Fatal("offset view called bijective")
	}
	for _, bad := range [][]int64{{}, {0, 2}, {-1, 2, 1}, {0, -2, 1}, {0, 2, -1}} {
		if _, err := ParseView(bad); err == nil {
			t.Errorf("ParseView(%v) accepted", bad)
		}
	}
}

// TestViewFitsOverflow: a view whose strides make (dim-1)·stride overflow
// int64 must not fit anything. Span used to wrap around to a small (or
// negative) number, so a hostile FusedMatMul view passed the bounds check
// and only Go's own index check stopped the kernel.
func TestViewFitsOverflow(t *testing.T) {
	big := int64(math.MaxInt32) * int64(math.MaxInt32) // the largest stride ParseView takes
	cases := [][]int64{
		{0, 3, 4, big, 1},                        // 2·big + 3 wraps below n
		{0, 2, 2, 2, big, big, big},              // three terms of big
		{0, 1 << 30, 1 << 30, big >> 28, 1 << 3}, // (2^30-1)·(big/2^28)
		{big, 2, 1, 1},                           // offset near the top
	}
	for _, ints := range cases {
		v, err := ParseView(ints)
		if err != nil {
			continue // refused outright: fine
		}
		if v.Fits(1 << 20) {
			t.Errorf("view %v (span %d) fits a 2^20-element tensor", ints, v.Span())
		}
	}
	if s := (View{Shape: []int{3}, Strides: []int{math.MaxInt / 2}}).Span(); s != math.MaxInt {
		t.Errorf("Span of an overflowing view = %d, want math.MaxInt", s)
	}
}
