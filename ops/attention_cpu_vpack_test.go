package ops

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// TestFusedAttentionVPackShared runs attention with V packed by the items
// (past two key blocks: vPacked), read from a fused QKV output as
// seed 000's MHA does, causal (items near the diagonal pack only the
// chunks they read) and not, on 1 to 7 threads several times over: the
// workers share and wait for each other's chunks, and every run must give
// the 1-thread output bit for bit, within the reference's tolerance.
func TestFusedAttentionVPackShared(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	const h, d = 3, 64
	s := 2*attnKBlock + 100
	if p := (&attnPlan{sk: s}); !p.vPacked() {
		t.Fatalf("S=%d does not pack V", s)
	}
	if p := (&attnPlan{sk: s, attnAttrs: attnAttrs{causal: true}}); !p.vPacked() {
		t.Fatalf("S=%d does not pack V with causal masking", s)
	}
	qkv := randTensor(r, 1, s, 3*h*d)
	view := func(which int) []int64 {
		return View{Offset: which * h * d, Shape: []int{1, h, s, d}, Strides: []int{s * 3 * h * d, d, 3 * h * d, 1}}.Ints()
	}
	split := func(which int) *ir.Tensor { // [1, H, S, D] copy
		out := ir.NewTensor(ir.Float, []int{1, h, s, d})
		for hi := 0; hi < h; hi++ {
			for si := 0; si < s; si++ {
				copy(out.Float32s()[(hi*s+si)*d:(hi*s+si+1)*d], qkv.Float32s()[si*3*h*d+which*h*d+hi*d:])
			}
		}
		return out
	}
	cut := ir.NewTensor(ir.Bool, []int{1, 1, s, s})
	for i := 0; i < s; i++ {
		for j := i + 1; j < s; j++ {
			cut.Bools()[i*s+j] = true
		}
	}
	for _, causal := range []bool{false, true} {
		attrs := []*ir.Attribute{fAttr("scale", 0.125), intsAttr("q_view", view(0)), intsAttr("k_view", view(1)), intsAttr("v_view", view(2))}
		var mask *ir.Tensor
		if causal {
			attrs, mask = append(attrs, iAttr("causal", 1)), cut
		}
		n := attnNode(attrs...)
		kind := ""
		if causal {
			kind = MaskBoolTrueMasks
		}
		ref := refAttention(t, split(0), split(1), split(2), mask, 0.125, false, kind, float32(math.Inf(-1)), 1)
		var first []float32
		for _, threads := range []int{1, 2, 7} {
			for run := 0; run < 4; run++ {
				out := ir.NewTensor(ir.Float, []int{1, h, s, d})
				if err := runFusedAttentionInto(&Context{Threads: threads}, n, []*ir.Tensor{qkv, qkv, qkv}, []*ir.Tensor{out}); err != nil {
					t.Fatal(err)
				}
				got := out.Float32s()
				if first == nil {
					first = got
					for i, w := range ref.Float32s() {
						if !closeF32(got[i], w) {
							t.Fatalf("causal %v: out[%d] = %g, want %g", causal, i, got[i], w)
						}
					}
				}
				if !slices.Equal(got, first) {
					for i := range got {
						if got[i] != first[i] {
							t.Fatalf("causal %v, %d threads, run %d: out[%d] = %g, 1 thread gave %g", causal, threads, run, i, got[i], first[i])
						}
					}
				}
			}
		}
	}
}

// TestFusedAttentionKCompact reads K's rows from a fused projection's
// output (rows apart) at attnKCompactFrom keys and more, where fp32 copies
// them into contiguous rows first (gatherMatrix, readKFrom), with a partial
// last sliver of keys; once with a K per head and once with one K and V
// shared by every head (multi-query: one compacted matrix for all batch
// matrices). The output must match the float64 reference.
func TestFusedAttentionKCompact(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	const h, d = 3, 64
	s := attnKCompactFrom + 13
	for _, kvHeads := range []int{h, 1} {
		row := (h + 2*kvHeads) * d // Q's heads, then K's, then V's
		qkv := randTensor(r, 1, s, row)
		view := func(off, heads int) []int64 {
			return View{Offset: off, Shape: []int{1, heads, s, d}, Strides: []int{s * row, d, row, 1}}.Ints()
		}
		split := func(off, heads int) *ir.Tensor { // [1, heads, S, D] copy
			out := ir.NewTensor(ir.Float, []int{1, heads, s, d})
			for hi := 0; hi < heads; hi++ {
				for si := 0; si < s; si++ {
					copy(out.Float32s()[(hi*s+si)*d:(hi*s+si+1)*d], qkv.Float32s()[si*row+off+hi*d:])
				}
			}
			return out
		}
		n := attnNode(fAttr("scale", 0.125), intsAttr("q_view", view(0, h)), intsAttr("k_view", view(h*d, kvHeads)), intsAttr("v_view", view((h+kvHeads)*d, kvHeads)))
		ref := refAttention(t, split(0, h), split(h*d, kvHeads), split((h+kvHeads)*d, kvHeads), nil, 0.125, false, "", float32(math.Inf(-1)), 1)
		for _, threads := range []int{1, 2} {
			out := ir.NewTensor(ir.Float, []int{1, h, s, d})
			if err := runFusedAttentionInto(&Context{Threads: threads}, n, []*ir.Tensor{qkv, qkv, qkv}, []*ir.Tensor{out}); err != nil {
				t.Fatal(err)
			}
			for i, w := range ref.Float32s() {
				if got := out.Float32s()[i]; !closeF32(got, w) {
					t.Fatalf("%d K heads, %d threads: out[%d] = %g, want %g", kvHeads, threads, i, got, w)
				}
			}
		}
	}
}
