package ops

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// finfoMin is finfo(float32).min, the fill of transformers' masks.
const finfoMin = -math.MaxFloat32

// uniformCase is a causal attention with left padding as transformers'
// LLaMA exports it: the export adds one [B, 1, Sq, Sk] mask of 0 and
// finfo.min (finfo.min where key j lies past query i's diagonal or is
// padding); the fused node has the causal cut, the padding as a bool key
// mask with a -inf fill, and masked_rows_uniform.
type uniformCase struct {
	name       string
	b, hq, hk  int
	sq, sk     int
	d, dv      int
	off        int
	pads       []int // left padding of each batch (nil: no key mask)
	scoresMode string
}

// refLlamaPadded is the export's result in float64, from its float32
// scores: s + mask rounds as float32 does (so s + finfo.min is finfo.min),
// then softmax and the product with V in float64. Y is [B, Hq, Sq, Dv],
// weights [B, Hq, Sq, Sk].
func refLlamaPadded(c uniformCase, scale float32, q, k, v *ir.Tensor) (y, weights []float64) {
	qd, kd, vd := q.Float32s(), k.Float32s(), v.Float32s()
	y = make([]float64, c.b*c.hq*c.sq*c.dv)
	weights = make([]float64, c.b*c.hq*c.sq*c.sk)
	x := make([]float64, c.sk)
	for b := 0; b < c.b; b++ {
		for h := 0; h < c.hq; h++ {
			kh := h / (c.hq / c.hk)
			for i := 0; i < c.sq; i++ {
				mx := math.Inf(-1)
				for j := range x {
					var dot float64
					for e := 0; e < c.d; e++ {
						dot += float64(qd[((b*c.hq+h)*c.sq+i)*c.d+e]) * float64(kd[((b*c.hk+kh)*c.sk+j)*c.d+e])
					}
					s := float32(dot) * scale
					var m float32
					if j > i+c.off || (c.pads != nil && j < c.pads[b]) {
						m = finfoMin
					}
					x[j] = float64(s + m) // float32 addition, as the export
					mx = max(mx, x[j])
				}
				var sum float64
				for j := range x {
					x[j] = math.Exp(x[j] - mx)
					sum += x[j]
				}
				w := weights[((b*c.hq+h)*c.sq+i)*c.sk:]
				for j := range x {
					w[j] = x[j] / sum
					for e := 0; e < c.dv; e++ {
						y[((b*c.hq+h)*c.sq+i)*c.dv+e] += w[j] * float64(vd[((b*c.hk+kh)*c.sk+j)*c.dv+e])
					}
				}
			}
		}
	}
	return y, weights
}

// TestFusedAttentionUniformRows checks masked_rows_uniform against the
// export's arithmetic: rows that see some key match the finfo.min export
// exactly (the hidden keys' exp is 0 either way), rows whose every visible
// key is padding (left padding, a fully padded batch, rows before a
// negative causal offset) get the export's uniform weights over all Sk
// keys: the mean of V.
func TestFusedAttentionUniformRows(t *testing.T) {
	kb := attnKBlock
	cases := []uniformCase{
		{name: "left padding, one batch fully padded", b: 3, hq: 2, hk: 2, sq: 9, sk: 9, d: 8, dv: 8, pads: []int{0, 3, 9}},
		{name: "left padding, fast path with skipped blocks", b: 2, hq: 2, hk: 2, sq: kb + 45, sk: kb + 45, d: 16, dv: 16, pads: []int{40, kb + 3}},
		{name: "left padding, gqa, cache offset", b: 2, hq: 4, hk: 2, sq: 12, sk: 20, d: 8, dv: 8, off: 8, pads: []int{0, 15}},
		{name: "left padding, odd dv", b: 2, hq: 1, hk: 1, sq: 37, sk: 37, d: 8, dv: 5, pads: []int{33, 1}},
		{name: "negative offset, no key mask", b: 1, hq: 2, hk: 2, sq: 70, sk: 40, d: 8, dv: 16, off: -30},
		{name: "weights output", b: 2, hq: 2, hk: 2, sq: 10, sk: 10, d: 8, dv: 8, pads: []int{4, 0}, scoresMode: ScoresWeights},
		// A decode step: the query heads of a KV head as rows
		// (foldGroupedQueries), the cut then a key limit.
		{name: "decode step, gqa, left padding", b: 2, hq: 8, hk: 2, sq: 1, sk: kb + 20, d: 16, dv: 16, off: kb + 19, pads: []int{3, kb + 20}},
		{name: "decode step, gqa, the cut hiding keys", b: 2, hq: 4, hk: 1, sq: 1, sk: 30, d: 8, dv: 8, off: 11, pads: []int{0, 15}},
	}
	r := rand.New(rand.NewSource(7))
	const scale = 0.35
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := randTensor(r, c.b, c.hq, c.sq, c.d)
			k := randTensor(r, c.b, c.hk, c.sk, c.d)
			v := randTensor(r, c.b, c.hk, c.sk, c.dv)
			in := []*ir.Tensor{q, k, v}
			attrs := []*ir.Attribute{fAttr("scale", scale), iAttr("causal", 1), iAttr("causal_offset", int64(c.off)), iAttr("masked_rows_uniform", 1)}
			if c.hq != c.hk {
				attrs = append(attrs, iAttr("kv_group", int64(c.hq/c.hk)))
			}
			if c.pads != nil {
				pad := make([]bool, c.b*c.sk)
				for b, n := range c.pads {
					for j := 0; j < n; j++ {
						pad[b*c.sk+j] = true
					}
				}
				in = append(in, ir.FromSlice([]int{c.b, 1, 1, c.sk}, pad))
				attrs = append(attrs, sAttr("mask_kind", MaskBoolTrueMasks))
			}
			n := attnNode(attrs...)
			n.Outputs = []string{"y"}
			if c.scoresMode != "" {
				n.Outputs = append(n.Outputs, "weights")
				n.Attrs = append(n.Attrs, sAttr("scores_mode", c.scoresMode))
			}
			wantY, wantW := refLlamaPadded(c, scale, q, k, v)
			uniform := 0 // rows that see no key: every score is finfo.min
			for b := 0; b < c.b; b++ {
				first := 0
				if c.pads != nil {
					first = c.pads[b]
				}
				for i := 0; i < c.sq; i++ {
					if min(i+c.off, c.sk-1) < first {
						uniform++
					}
				}
			}
			if uniform == 0 {
				t.Fatal("the case has no row that sees no key")
			}
			checkRowsRuns(t, n, in, c.dv, wantY, wantW, c.scoresMode != "")
		})
	}
}

// attnTestContexts are the runs the attention tests compare: 1 and 2
// threads in fp32, and 2 in bf16 where the CPU has it.
func attnTestContexts() []*Context {
	runs := []*Context{{Threads: 1, Precision: PrecisionFP32}, {Threads: 2, Precision: PrecisionFP32}}
	if kernel.BF16 {
		runs = append(runs, &Context{Threads: 2, Precision: PrecisionBF16})
	}
	return runs
}

// checkRowsRuns runs a FusedAttention node on 1 and 2 threads in fp32 and
// on 2 in bf16 (where the CPU has it) and checks its output, and with
// weights its output 1, against references computed in float64 (bf16 with
// a bf16-sized tolerance).
func checkRowsRuns(t *testing.T, n *ir.Node, in []*ir.Tensor, dv int, wantY, wantW []float64, weights bool) {
	t.Helper()
	for _, run := range attnTestContexts() {
		out, err := runFusedAttention(run, n, in)
		if err != nil {
			t.Fatal(err)
		}
		near := func(g float32, w float64) bool {
			if math.IsNaN(w) && math.IsNaN(float64(g)) {
				return true
			}
			if run.Precision == PrecisionBF16 {
				return bf16Near(g, w)
			}
			return math.Abs(float64(g)-w) <= 2e-5+1e-4*math.Abs(w)
		}
		for i, g := range out[0].Float32s() {
			if !near(g, wantY[i]) {
				t.Fatalf("threads %d, %v: Y[%d] (row %d) = %g, want %g", run.Threads, run.Precision, i, i/dv, g, wantY[i])
			}
		}
		if weights {
			for i, g := range out[1].Float32s() {
				if !near(g, wantW[i]) {
					t.Fatalf("threads %d, %v: weights[%d] = %g, want %g", run.Threads, run.Precision, i, g, wantW[i])
				}
			}
		}
	}
}

// TestFusedAttentionUniformRowsOff checks that without the attribute such
// rows stay NaN (Softmax of -inf everywhere), and that the attribute is
// validated.
func TestFusedAttentionUniformRowsOff(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	q, k, v := randTensor(r, 1, 4, 8), randTensor(r, 1, 4, 8), randTensor(r, 1, 4, 8)
	mask := ir.FromSlice([]int{1, 1, 4}, []bool{true, true, false, false})
	out, err := runFusedAttention(&Context{Threads: 1}, attnNode(iAttr("causal", 1), sAttr("mask_kind", MaskBoolTrueMasks)), []*ir.Tensor{q, k, v, mask})
	if err != nil {
		t.Fatal(err)
	}
	y := out[0].Float32s()
	if !math.IsNaN(float64(y[0])) || !math.IsNaN(float64(y[8])) || math.IsNaN(float64(y[16])) {
		t.Fatalf("rows 0 and 1 should be NaN, row 2 not: %v", y[:24])
	}
	_, err = runFusedAttention(&Context{Threads: 1}, attnNode(iAttr("masked_rows_uniform", 2)), []*ir.Tensor{q, k, v})
	if err == nil || !strings.Contains(err.Error(), "masked_rows_uniform must be 0 or 1") {
		t.Fatalf("got error %v", err)
	}
}

// TestFusedAttentionZeroRows checks masked_rows_zero against ESPnet's
// arithmetic (softmax of the masked scores, then the masked weights set to
// 0): rows that keep a key are the plain masked softmax, rows whose every
// key is hidden (a fully padded batch) are zeros, and their weights what
// masked_rows_weights says (0, NaN or 1/Sk), on the fp32 and bf16 paths,
// with key blocks skipped or not.
func TestFusedAttentionZeroRows(t *testing.T) {
	kb := attnKBlock
	cases := []struct {
		name    string
		b, h    int
		sq, sk  int
		d, dv   int
		lengths []int  // keys kept per batch (key padding)
		weights string // masked_rows_weights, with the weights output ("" without)
	}{
		{name: "one batch fully padded", b: 3, h: 2, sq: 9, sk: 9, d: 8, dv: 8, lengths: []int{9, 4, 0}},
		{name: "fast path, skipped key blocks", b: 2, h: 2, sq: 45, sk: kb + 45, d: 16, dv: 16, lengths: []int{0, kb + 3}},
		{name: "odd dv", b: 2, h: 1, sq: 37, sk: 37, d: 8, dv: 5, lengths: []int{0, 30}},
		{name: "weights output, zeroed", b: 2, h: 2, sq: 10, sk: 10, d: 8, dv: 8, lengths: []int{0, 6}, weights: MaskedRowsWeightsZero},
		{name: "weights output, the softmax's of -inf", b: 2, h: 2, sq: 10, sk: 10, d: 8, dv: 8, lengths: []int{0, 6}, weights: MaskedRowsWeightsNaN},
		{name: "weights output, the softmax's of finfo.min", b: 2, h: 2, sq: 10, sk: kb + 10, d: 8, dv: 8, lengths: []int{7, 0}, weights: MaskedRowsWeightsUniform},
	}
	r := rand.New(rand.NewSource(11))
	const scale = 0.35
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, k, v := randTensor(r, c.b, c.h, c.sq, c.d), randTensor(r, c.b, c.h, c.sk, c.d), randTensor(r, c.b, c.h, c.sk, c.dv)
			pad := make([]bool, c.b*c.sk)
			for b, n := range c.lengths {
				for j := n; j < c.sk; j++ {
					pad[b*c.sk+j] = true
				}
			}
			mask := ir.FromSlice([]int{c.b, 1, 1, c.sk}, pad)
			n := attnNode(fAttr("scale", scale), iAttr("masked_rows_zero", 1), sAttr("mask_kind", MaskBoolTrueMasks))
			n.Outputs = []string{"y"}
			if c.weights != "" {
				n.Outputs = append(n.Outputs, "weights")
				n.Attrs = append(n.Attrs, sAttr("scores_mode", ScoresWeights), sAttr("masked_rows_weights", c.weights))
			}
			wantY, wantW := refZeroRows(c.b, c.h, c.sq, c.sk, c.d, c.dv, scale, q, k, v, pad)
			for r := 0; r < c.b*c.h*c.sq; r++ {
				if b := r / (c.h * c.sq); c.lengths[b] == 0 {
					for j := r * c.sk; j < (r+1)*c.sk; j++ {
						wantW[j] = map[string]float64{MaskedRowsWeightsZero: 0, MaskedRowsWeightsNaN: math.NaN(), MaskedRowsWeightsUniform: 1 / float64(c.sk)}[c.weights]
					}
				}
			}
			checkRowsRuns(t, n, []*ir.Tensor{q, k, v, mask}, c.dv, wantY, wantW, c.weights != "")
		})
	}
	_, err := runFusedAttention(&Context{Threads: 1}, attnNode(iAttr("masked_rows_zero", 1), iAttr("masked_rows_uniform", 1)),
		[]*ir.Tensor{randTensor(r, 1, 4, 8), randTensor(r, 1, 4, 8), randTensor(r, 1, 4, 8)})
	if err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("both flags: got error %v", err)
	}
	_, err = runFusedAttention(&Context{Threads: 1}, attnNode(iAttr("masked_rows_zero", 1), sAttr("masked_rows_weights", "mean")),
		[]*ir.Tensor{randTensor(r, 1, 4, 8), randTensor(r, 1, 4, 8), randTensor(r, 1, 4, 8)})
	if err == nil || !strings.Contains(err.Error(), `masked_rows_weights "mean" is not one of`) {
		t.Fatalf("masked_rows_weights mean: got error %v", err)
	}
}

// refZeroRows is ESPnet's masked attention in float64: scores with the
// padded keys at -inf, softmax, then 0 where the mask hides a key (so a
// row with every key hidden is 0, output and weights). Y is [B, H, Sq, Dv],
// weights [B, H, Sq, Sk].
func refZeroRows(nb, h, sq, sk, d, dv int, scale float64, q, k, v *ir.Tensor, pad []bool) (y, weights []float64) {
	qd, kd, vd := q.Float32s(), k.Float32s(), v.Float32s()
	y, weights = make([]float64, nb*h*sq*dv), make([]float64, nb*h*sq*sk)
	x := make([]float64, sk)
	for b := 0; b < nb; b++ {
		for hh := 0; hh < h; hh++ {
			m := b*h + hh
			for i := 0; i < sq; i++ {
				mx := math.Inf(-1)
				for j := range x {
					x[j] = math.Inf(-1)
					if !pad[b*sk+j] {
						var dot float64
						for e := 0; e < d; e++ {
							dot += float64(qd[(m*sq+i)*d+e]) * float64(kd[(m*sk+j)*d+e])
						}
						x[j] = dot * scale
					}
					mx = max(mx, x[j])
				}
				if math.IsInf(mx, -1) {
					continue // every key hidden: weights and output 0
				}
				var sum float64
				for j := range x {
					x[j] = math.Exp(x[j] - mx)
					sum += x[j]
				}
				w := weights[(m*sq+i)*sk:]
				for j := range x {
					w[j] = x[j] / sum
					for e := 0; e < dv; e++ {
						y[(m*sq+i)*dv+e] += w[j] * float64(vd[(m*sk+j)*dv+e])
					}
				}
			}
		}
	}
	return y, weights
}
