package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestFoldGroupedQueries checks which decode steps foldGroupedQueries
// regroups (the plan's query rows and batch matrices after it) and that
// the folded run computes what the same attention with K and V repeated
// over the query heads does (kv_group 1: nothing to fold).
func TestFoldGroupedQueries(t *testing.T) {
	r := rand.New(rand.NewSource(41))
	const b, hk, d = 2, 2, 16
	for _, c := range []struct {
		name     string
		g        int // query heads a KV head
		sq, sk   int
		attrs    []*ir.Attribute
		mask     bool // a per-key bool mask [b, 1, 1, sk]
		folded   bool
		headMask bool // the mask differs by query head: [b, hq, 1, sk]
	}{
		{name: "one query, no mask", g: 4, sq: 1, sk: attnKBlock + 70, folded: true},
		{name: "one query, cut after the cache: hides nothing", g: 4, sq: 1, sk: 40, attrs: []*ir.Attribute{iAttr("causal", 1), iAttr("causal_offset", 39)}, folded: true},
		{name: "one query, per-key mask", g: 4, sq: 1, sk: 40, mask: true, folded: true},
		// 8 rows: past the row path, the folded matrix runs in panels.
		{name: "one query, 8 heads a KV head, the cut hiding keys", g: 8, sq: 1, sk: attnKBlock + 30, attrs: []*ir.Attribute{iAttr("causal", 1), iAttr("causal_offset", 100)}, folded: true},
		{name: "one query, a mask per head stays", g: 4, sq: 1, sk: 40, mask: true, headMask: true},
		{name: "a finite causal fill stays", g: 4, sq: 1, sk: 40, attrs: []*ir.Attribute{iAttr("causal", 1), iAttr("causal_offset", 20), fAttr("causal_fill", -1e4)}},
		{name: "two queries stay", g: 4, sq: 2, sk: 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := c.g
			hq := hk * g
			q := randTensor(r, b, hq, c.sq, d)
			k := randTensor(r, b, hk, c.sk, d)
			v := randTensor(r, b, hk, c.sk, d)
			// K and V repeated over each KV head's query heads.
			kr, vr := ir.NewTensor(ir.Float, []int{b, hq, c.sk, d}), ir.NewTensor(ir.Float, []int{b, hq, c.sk, d})
			per := c.sk * d
			for i := 0; i < b*hq; i++ {
				src := (i/hq*hk + i%hq/g) * per
				copy(kr.Float32s()[i*per:(i+1)*per], k.Float32s()[src:src+per])
				copy(vr.Float32s()[i*per:(i+1)*per], v.Float32s()[src:src+per])
			}
			attrs := append([]*ir.Attribute{fAttr("scale", 0.3)}, c.attrs...)
			extra := []*ir.Tensor{}
			if c.mask {
				mh := 1
				if c.headMask {
					mh = hq
				}
				m := randBools(r, 0.3, b, mh, 1, c.sk)
				for i := 0; i < b*mh; i++ {
					m.Bools()[i*c.sk] = false // every row keeps key 0
				}
				extra = append(extra, m)
				attrs = append(attrs, sAttr("mask_kind", MaskBoolTrueMasks))
			}
			grouped := attnNode(append(attrs, iAttr("kv_group", int64(g)))...)
			p, err := planFusedAttention(grouped, append([]*ir.Tensor{q, k, v}, extra...))
			if err != nil {
				t.Fatal(err)
			}
			if folded := p.sq == g*c.sq && p.batches == b*hk; folded != c.folded {
				t.Errorf("plan of %d query rows in %d matrices, folded %v, want %v", p.sq, p.batches, folded, c.folded)
			}
			for _, ctx := range attnTestContexts() {
				got, err := runFusedAttention(ctx, grouped, append([]*ir.Tensor{q, k, v}, extra...))
				if err != nil {
					t.Fatal(err)
				}
				want, err := runFusedAttention(ctx, attnNode(attrs...), append([]*ir.Tensor{q, kr, vr}, extra...))
				if err != nil {
					t.Fatal(err)
				}
				for i, w := range want[0].Float32s() {
					gv := got[0].Float32s()[i]
					near := closeF32(gv, w)
					if ctx.Precision == PrecisionBF16 {
						near = bf16Near(gv, float64(w)) // the row path runs fp32, the panels bf16
					}
					if !near {
						t.Fatalf("threads %d, %v: y[%d] = %g, with K and V repeated %g", ctx.Threads, ctx.Precision, i, gv, w)
					}
				}
			}
		})
	}
}

// TestFusedAttentionRowsNaN checks that on the row path a NaN score makes
// its row NaN, as Softmax does, even where every other key is masked and
// masked_rows_uniform would give a row that sees no key the mean of V.
func TestFusedAttentionRowsNaN(t *testing.T) {
	const sk, d = 16, 16
	r := rand.New(rand.NewSource(43))
	q, k, v := randTensor(r, 2, 1, d), randTensor(r, 2, sk, d), randTensor(r, 2, sk, d)
	k.Float32s()[3*d+5] = float32(math.NaN()) // matrix 0, key 3
	mask := ir.NewTensor(ir.Bool, []int{2, 1, sk})
	for j := 0; j < sk; j++ {
		mask.Bools()[j] = j != 3 // matrix 0 sees key 3 only
	}
	n := attnNode(fAttr("scale", 0.3), sAttr("mask_kind", MaskBoolTrueMasks), iAttr("masked_rows_uniform", 1))
	out, err := runFusedAttention(&Context{Threads: 2}, n, []*ir.Tensor{q, k, v, mask})
	if err != nil {
		t.Fatal(err)
	}
	for c, x := range out[0].Float32s() {
		if nan := x != x; nan != (c < d) {
			t.Fatalf("y[%d] = %g: want NaN in matrix 0's row only", c, x)
		}
	}
}
