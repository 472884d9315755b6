package ops

import (
	"reflect"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestBroadcastStrides(t *testing.T) {
	for _, c := range []struct {
		out, in, want []int
		bad           bool
	}{
		{out: []int{2, 3}, in: []int{2, 3}, want: []int{3, 1}},
		{out: []int{2, 3}, in: []int{3}, want: []int{0, 1}},
		{out: []int{2, 3, 4}, in: []int{3, 1}, want: []int{0, 1, 0}},
		{out: []int{2, 3, 4}, in: []int{2, 1, 4}, want: []int{4, 0, 1}},
		{out: []int{2, 3}, in: nil, want: []int{0, 0}},
		{out: []int{0, 3}, in: []int{3}, want: []int{0, 1}},
		{out: []int{0, 3}, in: []int{0, 1}, want: []int{1, 0}},
		{out: []int{2, 3}, in: []int{4}, bad: true},
		{out: []int{3}, in: []int{1, 3}, bad: true},
	} {
		got, err := BroadcastStrides(c.out, c.in)
		if c.bad {
			if err == nil {
				t.Errorf("BroadcastStrides(%v, %v) = %v, want an error", c.out, c.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("BroadcastStrides(%v, %v) = %v, %v; want %v", c.out, c.in, got, err, c.want)
		}
	}
}

// naiveIndex maps an output linear index to an input's linear index by
// unravelling, the textbook definition of broadcasting.
func naiveIndex(out, in []int, lin int) int {
	idx := make([]int, len(out))
	for d := len(out) - 1; d >= 0; d-- {
		idx[d] = lin % out[d]
		lin /= out[d]
	}
	off, stride := 0, 1
	for d := len(in) - 1; d >= 0; d-- {
		od := d + len(out) - len(in)
		if in[d] != 1 {
			off += idx[od] * stride
		}
		stride *= in[d]
	}
	return off
}

// TestBroadcasterMatchesNaive walks many shape combinations row by row and
// checks every element's input offsets against naiveIndex, and that rows
// are as long as the layouts allow.
func TestBroadcasterMatchesNaive(t *testing.T) {
	cases := []struct {
		ins [][]int
		row int // expected row length after collapsing
	}{
		{[][]int{{2, 3}, {3}}, 3},
		{[][]int{{2, 1, 4}, {3, 1}}, 4},
		{[][]int{{4, 5, 6}, {4, 5, 6}}, 120},
		{[][]int{{4, 5, 6}, {1}}, 120},
		{[][]int{{4, 1}, {1, 5}}, 5},
		{[][]int{{3, 1, 1}, {1, 4, 5}}, 20},
		{[][]int{{2, 1, 3, 1}, {1, 4, 3, 2}, {2, 4, 1, 1}}, 2},
		{[][]int{{1, 1, 7}, {2, 3, 1}}, 7},
		{[][]int{{5, 1}, {5, 1}}, 5},
		{[][]int{{1}, {}}, 1},
	}
	for _, c := range cases {
		out, err := BroadcastShapes(c.ins...)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBroadcaster(out, c.ins...)
		if err != nil {
			t.Fatal(err)
		}
		if b.Row() != c.row {
			t.Errorf("%v: row %d, want %d", c.ins, b.Row(), c.row)
		}
		visited := 0
		b.ForEachRow(func(off int, offs []int) {
			if off != visited {
				t.Fatalf("%v: row at %d, want %d", c.ins, off, visited)
			}
			for j := 0; j < b.Row(); j++ {
				for k, in := range c.ins {
					got := offs[k] + j*b.InnerStride(k)
					if want := naiveIndex(out, in, off+j); got != want {
						t.Fatalf("%v: element %d input %d at %d, want %d", c.ins, off+j, k, got, want)
					}
				}
			}
			visited += b.Row()
		})
		if n := int(ir.NumElements(out)); visited != n {
			t.Errorf("%v: visited %d elements, want %d", c.ins, visited, n)
		}
		checkSpans(t, b, out, c.ins)
	}
}

// checkSpans checks ForEachSpan over every range [lo, hi) of out's
// elements: pieces in order, within one row each, covering the range
// exactly, with every input's offsets those of naive indexing.
func checkSpans(t *testing.T, b *Broadcaster, out []int, ins [][]int) {
	t.Helper()
	total := int(ir.NumElements(out))
	for lo := 0; lo <= total; lo++ {
		for hi := lo; hi <= total+1; hi++ {
			next := lo
			b.ForEachSpan(lo, hi, func(off, n int, offs []int) {
				if off != next || n < 1 || off/b.Row() != (off+n-1)/b.Row() {
					t.Fatalf("%v [%d,%d): piece at %d of %d, want one at %d within a row of %d", ins, lo, hi, off, n, next, b.Row())
				}
				for j := 0; j < n; j++ {
					for k, in := range ins {
						if got, want := offs[k]+j*b.InnerStride(k), naiveIndex(out, in, off+j); got != want {
							t.Fatalf("%v [%d,%d): element %d input %d at %d, want %d", ins, lo, hi, off+j, k, got, want)
						}
					}
				}
				next += n
			})
			if want := min(hi, total); next != max(lo, want) {
				t.Fatalf("%v [%d,%d): pieces end at %d, want %d", ins, lo, hi, next, want)
			}
		}
	}
}

func TestBroadcasterEmpty(t *testing.T) {
	b, err := NewBroadcaster([]int{2, 0, 3}, []int{2, 1, 3}, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	b.ForEachRow(func(int, []int) { t.Fatal("row visited in an empty output") })
}

func TestBroadcastTo(t *testing.T) {
	for _, c := range []struct {
		in    *ir.Tensor
		shape []int
		want  *ir.Tensor
		bad   bool
	}{
		{in: ewT([]int{3}, []float32{1, 2, 3}), shape: []int{2, 3},
			want: ewT([]int{2, 3}, []float32{1, 2, 3, 1, 2, 3})},
		{in: ewT([]int{2, 1}, []int64{7, 8}), shape: []int{2, 3},
			want: ewT([]int{2, 3}, []int64{7, 7, 7, 8, 8, 8})},
		{in: ewT(nil, []bool{true}), shape: []int{2, 2},
			want: ewT([]int{2, 2}, []bool{true, true, true, true})},
		{in: ewT([]int{1, 2}, []string{"a", "b"}), shape: []int{2, 1, 2},
			want: ewT([]int{2, 1, 2}, []string{"a", "b", "a", "b"})},
		{in: ewT([]int{2}, []int32{1, 2}), shape: []int{0, 2},
			want: ewT([]int{0, 2}, []int32{})},
		{in: ewT([]int{3}, []float32{1, 2, 3}), shape: []int{2}, bad: true},
	} {
		got, err := BroadcastTo(c.in, c.shape)
		if c.bad {
			if err == nil {
				t.Errorf("BroadcastTo(%v, %v) succeeded", c.in, c.shape)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ewCheck(t, got, c.want)
	}
}
