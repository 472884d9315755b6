package ops

import "testing"

// TestHeadGroups: a run's items split into groups that hold every item
// once, each group the heads h with h·groups/heads = g (the heads whose
// columns blas.SgemmPackedStriped gives its worker g), of every batch
// element, query blocks in order.
func TestHeadGroups(t *testing.T) {
	for _, c := range []struct{ heads, groups, qBlocks, batches int }{
		{12, 2, 16, 12}, {12, 2, 16, 24}, {12, 4, 3, 12}, {3, 2, 2, 192}, {1, 2, 5, 1}, {16, 3, 1, 32}, {5, 8, 2, 5},
	} {
		hg := headGroups{heads: c.heads, groups: c.groups, qBlocks: c.qBlocks, batches: c.batches}
		seen := make([]int, c.batches*c.qBlocks)
		for g := range c.groups {
			last := -1
			for i := range hg.items(g) {
				it := hg.item(g, i)
				if it < 0 || it >= len(seen) {
					t.Fatalf("%+v: group %d item %d is %d, out of range", c, g, i, it)
				}
				seen[it]++
				if h := it / c.qBlocks % c.heads; h*c.groups/c.heads != g {
					t.Errorf("%+v: group %d holds head %d", c, g, h)
				}
				if it <= last {
					t.Errorf("%+v: group %d item %d (%d) after %d", c, g, i, it, last)
				}
				last = it
			}
		}
		for it, n := range seen {
			if n != 1 {
				t.Fatalf("%+v: item %d in %d groups, want 1", c, it, n)
			}
		}
	}
}
