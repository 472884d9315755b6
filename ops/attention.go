package ops

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
)

// FusedAttention (com.attnrun, opset 1) is scaled dot-product attention in
// one node: it is what the attention rewrites in runtime/graph put in place
// of the exported MatMul → [scale] → [mask] → Softmax → MatMul chain and of
// ONNX's Attention op, and it never materializes the Sq×Sk score matrix
// unless output 1 asks for it.
//
// Inputs (float32 unless stated):
//
//	0 Q    [..., Sq, D]
//	1 K    [..., Sk, D], or [..., D, Sk] when k_transposed = 1
//	2 V    [..., Sk, Dv]
//	3 mask (optional) of rank ≥ 0, broadcastable to [..., Sq, Sk]: bool for
//	       mask_kind "bool_true_masks" / "bool_false_masks", float32 for
//	       "additive". Its last two dims must each be 1 or equal Sq and Sk
//	       (with mask_pad_keys, the last may also be shorter than Sk).
//	4 kv_lengths (optional) int64 [N]: how many keys take part in each
//	       batch: N is 1 or the output's first dim (rank ≥ 3), and key j
//	       of every matrix whose first batch index is b is masked (-inf)
//	       when j ≥ kv_lengths[b] (ONNX Attention's nonpad_kv_seqlen).
//	5 bias (optional) float32 of rank ≥ 0, broadcastable to [..., Sq, Sk]
//	       as the mask is (its last two dims each 1 or Sq and Sk): a
//	       second additive term, scores = scores + bias_scale·bias, added
//	       after the mask (or before it, with bias_first). Exports that
//	       change the scores twice (GPT-2's torch.where with its causal
//	       buffer, then + the padding mask; a position bias, then + a
//	       mask) take the first change as the mask and the second as the
//	       bias.
//	6 sinks (optional) float32 of rank ≥ 2 whose last two dims are 1: one
//	       more logit in every row's softmax (gpt-oss's learned sink a
//	       head), its leading dims broadcasting as the mask's do. It takes
//	       its share of each row's normalization and adds nothing to the
//	       output: with the row's scores x (after every mask and bias) and
//	       sink logit s, the weights are exp(x_j − M) / (Σ_k exp(x_k − M) +
//	       exp(s − M)), M = max(s, max_k x_k). A row that sees no key puts
//	       all its weight on the sink: its output is 0. Output 1's weights
//	       are the keys' (the sink's column left out: they sum to 1 less
//	       the sink's share).
//
// Every input has rank ≥ 2 except the mask (which is left-padded with 1s).
// The leading (batch, head) dims of Q, K, V and the mask broadcast together,
// numpy style, into the output's leading dims.
//
// Attributes:
//
//	scale        float, default 1: scores = scale · Q·Kᵀ (an export's Div by c
//	             becomes 1/c, Mul by c becomes c, several multiply).
//	k_transposed int, default 0: 1 when K is given as [..., D, Sk].
//	kv_group     int, default 1: grouped-query attention. With g > 1, Q, K
//	             and V have rank ≥ 3, Q's dim -3 (its heads, Hq) is g times
//	             K's and V's (Hkv), and query head h reads K/V head h / g
//	             (heads repeated as [h0, h0, h1, h1, ...], ONNX's and
//	             PyTorch's repeat_interleave) without copying K or V. Where
//	             K and V have one head it broadcasts as usual (multi-query).
//	softcap      float, default 0 (none): scores = c·tanh(scores / c) with
//	             c = softcap > 0, applied after scale and before any mask.
//	scores_min   float, default -inf (none): every score, after the
//	             softcap, the mask and the bias, is raised to at least
//	             scores_min: max(scores, scores_min), as OPT's
//	             torch.max(scores, finfo.min) after its mask (a row whose
//	             scores are all below it is then uniform). Keys the causal
//	             cut or the key lengths hide stay hidden. Not NaN or +inf.
//	mask_kind    string, required when the mask is given:
//	             "bool_true_masks"  scores = where(mask, mask_fill, scores)
//	             "bool_false_masks" scores = where(mask, scores, mask_fill)
//	             "additive"         scores = scores + mask_scale·mask
//	mask_fill    float, default -inf: the value a masked score takes, exactly
//	             the export's fill (-inf, -1e9, -1e20, ...) times any scale
//	             the export applied after masking.
//	mask_scale   float, default 1: factor on an additive mask (the scale the
//	             export applied after adding the mask).
//	mask_pad_keys int, default 0: 1 lets the mask's last dim be shorter
//	             than Sk (Attention's padded KV mask): keys beyond it are
//	             masked (-inf), and a last dim of 1 then covers key 0 only,
//	             it does not broadcast.
//	bias_scale   float, default 1: factor on the bias (the scale the export
//	             applied after adding it).
//	bias_first   int, default 0: 1 adds the bias before the mask is applied
//	             (a masked score then takes mask_fill whatever the bias).
//	bias_diagonals
//	             int, default 0: 1 gives the bias by its diagonals, for a
//	             term that depends only on j − i (T5's relative
//	             position bias): input 5 then has shape [..., Sq + Sk − 1],
//	             its leading dims broadcast as a bias's batch dims do, and
//	             the bias of query i and key j is bias[..., i − j + Sk − 1].
//	             Sq + Sk − 1 values a head instead of Sq·Sk.
//	bias_grid    int, default 0 (none): kw > 0 gives the bias by the rows
//	             and columns of a key grid, for a term that is the sum of
//	             one by the key's grid row and one by its grid column (the
//	             decomposed relative positions of SAM's and ViTDet's image
//	             encoders): the keys are a kh × kw grid (Sk = kh·kw, key j
//	             at row j / kw and column j mod kw), input 5 has shape
//	             [..., Sq, kh + kw] (its Sq dim may be 1), and the bias of
//	             query i and key j is bias[..., i, j / kw] + bias[..., i,
//	             kh + j mod kw]. kh + kw values a query instead of Sk. Not
//	             with bias_diagonals.
//	causal       int, default 0: 1 masks (-inf) key j for query i when
//	             j > i + causal_offset.
//	causal_offset int, default 0: the causal diagonal's offset (the length
//	             of a KV cache that precedes the current keys).
//	causal_fill  float, default -inf: with causal, the value a score past
//	             the diagonal takes. -inf cuts it: the score is -inf
//	             whatever the mask and bias do. A finite fill takes its
//	             place before the mask and the bias are added (after the
//	             bias with bias_first), as
//	             an export's Where(causal pattern, S, fill) followed by an
//	             additive mask gives it (GPT-2's -1e4 masked_bias). A
//	             finite fill is still cut like -inf, and each query row is
//	             then checked: when its running maximum lies at least
//	             attnCutMargin (104) above the largest value a cut score
//	             could have taken (the fill plus the largest mask and bias
//	             term added after it), the export's exp of every cut score
//	             is exactly 0 in float32 and the cut changed nothing; an
//	             item with a row that fails the check (a row whose kept
//	             scores are all padding, say) is computed again with the
//	             cut scores at the fill, so the result is the export's in
//	             every case.
//	masked_rows_uniform
//	             int, default 0: 1 gives a query row that sees no key (every
//	             score hidden by a -inf mask fill, the causal cut or the key
//	             limit) uniform weights over all Sk keys, so its output row
//	             is the mean of V's Sk rows, instead of NaN. That is what an
//	             export with a finfo(float32).min fill gives such a row:
//	             every score is exactly the fill (s + finfo.min rounds to
//	             finfo.min for |s| < 2^103), and the softmax of equal values
//	             is uniform. The row is found by its running maximum still
//	             being -inf after the last key block, so the fast path pays
//	             nothing per score; the mean of V is computed once per batch
//	             matrix, and only when such a row occurs. With scores_mode
//	             "weights" such a row's weights are 1/Sk; the earlier stages
//	             hold the -inf the cut or mask put there.
//	masked_rows_zero
//	             int, default 0: 1 gives a query row that sees no key an
//	             output row of zeros instead of NaN: what ESPnet's
//	             softmax(masked scores).masked_fill(mask, 0) gives a row its
//	             mask hides entirely. Not with masked_rows_uniform.
//	masked_rows_weights
//	             string, default "zero": with masked_rows_zero and
//	             scores_mode "weights", what output 1 holds in such a row:
//	             "zero" (the zeroed weights), "nan" (the softmax's output
//	             when the export's fill is -inf) or "uniform" (1/Sk, the
//	             softmax's output when its fill is finite, finfo.min).
//	scores_mode  string, required when output 1 is present: what output 1
//	             holds: "scores" (scale·Q·Kᵀ), "softcapped" (after softcap),
//	             "biased" (after softcap, mask, bias, causal and key padding:
//	             the softmax's input) or "weights" (the softmax's output).
//
//	q_view, k_view, v_view
//	             ints, optional: read the operand through a strided view of
//	             the input's data (ops.View's encoding: offset, dims,
//	             strides); the view's dims are the operand's logical shape.
//	             The attention rewrite uses them to read Q, K and V straight
//	             from a fused QKV projection ([B, S, 3·H·D] seen as
//	             [B, H, S, D]) instead of materializing the head split.
//	out_shape, out_view
//	             ints, optional, together: the output tensor has shape
//	             out_shape, and the logical result [..., Sq, Dv] is written
//	             through out_view, which must cover it exactly once (so the
//	             head merge Transpose+Reshape after attention is free).
//
// Outputs:
//
//	0 softmax(scores, last axis) · V, shape broadcast(...) + [Sq, Dv] (or
//	  out_shape).
//	1 (optional) the scores at the stage scores_mode names, float32 of
//	  shape broadcast(...) + [Sq, Sk], contiguous. Only when this output is
//	  requested does the kernel hold Sq×Sk values (it writes them as it
//	  goes and, for "weights", normalizes each row once its sum is known);
//	  it then also computes the key blocks that masking would let it skip.
//
// Semantics follow the unfused ONNX graph exactly in the edge cases: a row
// whose scores are all -inf (fully masked with a -inf fill) gives NaN, as
// Softmax does; a row fully masked with a finite fill (-1e9) gives uniform
// weights; Sk = 0 gives zeros, as MatMul over an empty inner dim does;
// with masked_rows_uniform a row that sees no key gives the mean of V, and
// with masked_rows_zero zeros.
//
// The CPU kernel (attention_cpu*.go) reads K and V in place where their
// rows are contiguous (else packs them once per batch matrix; V from a
// full key block up, two with causal masking, packed by the items as they
// first read it), packs each
// item's scale·Q in the item's own scratch (bf16: all of Q up front, in
// pairs), then works on items of attnQBlock query rows with a streaming
// (online) softmax over blocks of attnKBlock keys. It computes scores
// transposed (keys × queries) with the GEMM micro-kernel, so that the scores
// block is already the packed operand of the P·V product and the softmax
// runs down columns of 16 or 32 queries with vector max/exp kernels; blocks
// whose keys a -inf bool mask hides from every row of an item are skipped,
// and so are the key blocks past the causal diagonal and past the key
// lengths. With kv_group, K and V are packed once per KV head and shared
// by the query heads of the group.
// The packed operands and the workers' scratch (O(attnQBlock·(attnKBlock +
// Dv)) each) come from ctx.Scratch when the executor provides it; items are
// spread over ctx.Threads goroutines, each multiplying on its own goroutine.

// Mask kinds of FusedAttention's mask_kind attribute.
const (
	MaskBoolTrueMasks  = "bool_true_masks"
	MaskBoolFalseMasks = "bool_false_masks"
	MaskAdditive       = "additive"
)

// Values of FusedAttention's masked_rows_weights: the weights of a row that
// sees no key, with masked_rows_zero.
const (
	MaskedRowsWeightsZero    = "zero"    // 0: the zeroed weights
	MaskedRowsWeightsNaN     = "nan"     // NaN: the softmax of -inf scores
	MaskedRowsWeightsUniform = "uniform" // 1/Sk: the softmax of one finite fill
)

// Stages of the scores FusedAttention's optional output 1 holds
// (attribute scores_mode).
const (
	ScoresRaw        = "scores"     // scale·Q·Kᵀ
	ScoresSoftcapped = "softcapped" // after softcap
	ScoresBiased     = "biased"     // after softcap and every mask: the softmax's input
	ScoresWeights    = "weights"    // the softmax's output
)

// FusedAttentionOp is the op type of the fused attention node (domain
// DomainAttnrun, opset 1).
const FusedAttentionOp = "FusedAttention"

// Block sizes of the FusedAttention kernel: query rows per work item (a
// multiple of the micro-kernel's 16 or 32 columns) and keys per step of the
// streaming softmax (64 micro-kernel rows: 512 keys with the 8×32 tile, 384
// with 6×16). Measured on a 2-core Zen 5 VM in seed 000's model: 32 rows
// per item beat 64 (by 5%) and 96 (by 8%); the key block matters little.
const attnQBlock = 32

var attnKBlock = 64 * attnMR

func init() {
	Register(&Schema{
		Domain: DomainAttnrun, OpType: FusedAttentionOp, Since: 1, Until: 1,
		MinInputs: 3, MaxInputs: 7, TypeInput: 0, DTypes: []ir.DType{ir.Float},
		Infer: inferFusedAttention, Run: runFusedAttention, RunInto: runFusedAttentionInto,
		Doc: "softmax(softcap(scale·Q·Kᵀ) masked, plus a bias, dense, by its diagonals or by a key grid's rows and columns, with optional sink logits) · V with grouped KV heads, causal offset and key lengths, blocked with a streaming softmax (no Sq×Sk scores unless output 1 asks for them)",
	})
}

// attnAttrs are FusedAttention's parsed attributes.
type attnAttrs struct {
	scale     float32
	kT        bool
	maskKind  string // "" when there is no mask
	fill      float32
	maskScale float32
	// hasBias: input 5 is given; it is added times biasScale, before the
	// mask when biasFirst.
	hasBias   bool
	biasScale float32
	biasFirst bool
	// biasDiag: the bias is given by its diagonals (bias_diagonals).
	biasDiag bool
	// biasGrid is bias_grid: kw > 0 when the bias is given by the rows
	// and columns of a key grid kw keys wide (0: none).
	biasGrid int
	kvGroup  int
	softcap  float32 // 0: none
	// scoresMin is scores_min: scores after the mask and bias are raised
	// to at least it (-inf: none).
	scoresMin float32
	padKeys   bool
	causal    bool
	causalOff int
	// causalFill is the value a score past the causal diagonal takes
	// (-inf: cut; finite: cut, each row checked, see causal_fill).
	causalFill float32
	// uniformRows: a row that sees no key gets uniform weights over all
	// Sk keys (masked_rows_uniform) instead of NaN.
	uniformRows bool
	// zeroRows: a row that sees no key gets an output row of 0
	// (masked_rows_zero), instead of NaN; zeroRowsWeights is what its
	// weights are (masked_rows_weights).
	zeroRows        bool
	zeroRowsWeights string
	// scoresMode is what output 1 holds; "" when it is not requested.
	scoresMode string
	// views of Q, K, V (nil: the input as is) and of the output.
	views    [3]*View
	outShape []int
	outView  *View
}

// attnHasScores reports whether a FusedAttention node asks for output 1.
func attnHasScores(n *ir.Node) bool { return len(n.Outputs) > 1 && n.Outputs[1] != "" }

func parseAttnAttrs(n *ir.Node, hasMask, hasBias bool) (attnAttrs, error) {
	a := attnAttrs{hasBias: hasBias}
	var err error
	if a.scale, err = n.AttrFloat("scale", 1); err != nil {
		return a, n.Errorf("%w", err)
	}
	flag := func(name string) (bool, error) {
		v, err := n.AttrInt(name, 0)
		if err != nil {
			return false, n.Errorf("%w", err)
		}
		if v != 0 && v != 1 {
			return false, n.Errorf("%s must be 0 or 1, got %d", name, v)
		}
		return v == 1, nil
	}
	if a.kT, err = flag("k_transposed"); err != nil {
		return a, err
	}
	if a.padKeys, err = flag("mask_pad_keys"); err != nil {
		return a, err
	}
	if a.causal, err = flag("causal"); err != nil {
		return a, err
	}
	if a.biasFirst, err = flag("bias_first"); err != nil {
		return a, err
	}
	if a.biasDiag, err = flag("bias_diagonals"); err != nil {
		return a, err
	}
	if a.biasDiag && !hasBias {
		return a, n.Errorf("bias_diagonals is set but no bias (input 5) is given")
	}
	grid, err := n.AttrInt("bias_grid", 0)
	switch {
	case err != nil:
		return a, n.Errorf("%w", err)
	case grid < 0 || grid > math.MaxInt32:
		return a, n.Errorf("bias_grid must be ≥ 0 (0: none), got %d", grid)
	case grid > 0 && !hasBias:
		return a, n.Errorf("bias_grid is set but no bias (input 5) is given")
	case grid > 0 && a.biasDiag:
		return a, n.Errorf("bias_grid and bias_diagonals exclude each other")
	}
	a.biasGrid = int(grid)
	if a.uniformRows, err = flag("masked_rows_uniform"); err != nil {
		return a, err
	}
	if a.zeroRows, err = flag("masked_rows_zero"); err != nil {
		return a, err
	}
	if a.uniformRows && a.zeroRows {
		return a, n.Errorf("masked_rows_uniform and masked_rows_zero exclude each other")
	}
	if a.zeroRowsWeights, err = n.AttrString("masked_rows_weights", MaskedRowsWeightsZero); err != nil {
		return a, n.Errorf("%w", err)
	}
	switch a.zeroRowsWeights {
	case MaskedRowsWeightsZero, MaskedRowsWeightsNaN, MaskedRowsWeightsUniform:
	default:
		return a, n.Errorf("masked_rows_weights %q is not one of %q, %q, %q", a.zeroRowsWeights, MaskedRowsWeightsZero, MaskedRowsWeightsNaN, MaskedRowsWeightsUniform)
	}
	if a.biasScale, err = n.AttrFloat("bias_scale", 1); err != nil {
		return a, n.Errorf("%w", err)
	}
	off, err := n.AttrInt("causal_offset", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if off < -math.MaxInt32 || off > math.MaxInt32 {
		return a, n.Errorf("causal_offset %d is out of range", off)
	}
	a.causalOff = int(off)
	if a.causalFill, err = n.AttrFloat("causal_fill", float32(math.Inf(-1))); err != nil {
		return a, n.Errorf("%w", err)
	}
	if cf := float64(a.causalFill); math.IsNaN(cf) || math.IsInf(cf, 1) {
		return a, n.Errorf("causal_fill must be finite or -inf, got %g", cf)
	}
	if !a.causal && !math.IsInf(float64(a.causalFill), -1) {
		return a, n.Errorf("causal_fill %g is given without causal = 1", a.causalFill)
	}
	g, err := n.AttrInt("kv_group", 1)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if g < 1 || g > math.MaxInt32 {
		return a, n.Errorf("kv_group must be ≥ 1, got %d", g)
	}
	a.kvGroup = int(g)
	if a.softcap, err = n.AttrFloat("softcap", 0); err != nil {
		return a, n.Errorf("%w", err)
	}
	if a.softcap < 0 || math.IsNaN(float64(a.softcap)) || math.IsInf(float64(a.softcap), 0) {
		return a, n.Errorf("softcap must be a finite value ≥ 0 (0: none), got %g", a.softcap)
	}
	if a.scoresMin, err = n.AttrFloat("scores_min", float32(math.Inf(-1))); err != nil {
		return a, n.Errorf("%w", err)
	}
	if math.IsNaN(float64(a.scoresMin)) || math.IsInf(float64(a.scoresMin), 1) {
		return a, n.Errorf("scores_min must be a number below +inf (-inf: none), got %g", a.scoresMin)
	}
	if a.maskKind, err = n.AttrString("mask_kind", ""); err != nil {
		return a, n.Errorf("%w", err)
	}
	switch {
	case !hasMask:
		a.maskKind = ""
	case a.maskKind == "":
		return a, n.Errorf("a mask is given but attribute mask_kind is not set")
	case a.maskKind != MaskBoolTrueMasks && a.maskKind != MaskBoolFalseMasks && a.maskKind != MaskAdditive:
		return a, n.Errorf("mask_kind %q is not one of %s, %s, %s", a.maskKind, MaskBoolTrueMasks, MaskBoolFalseMasks, MaskAdditive)
	}
	if a.fill, err = n.AttrFloat("mask_fill", float32(math.Inf(-1))); err != nil {
		return a, n.Errorf("%w", err)
	}
	if a.maskScale, err = n.AttrFloat("mask_scale", 1); err != nil {
		return a, n.Errorf("%w", err)
	}
	if len(n.Outputs) > 2 {
		return a, n.Errorf("has %d outputs, FusedAttention has at most 2 (Y, scores)", len(n.Outputs))
	}
	if attnHasScores(n) {
		if a.scoresMode, err = n.AttrString("scores_mode", ""); err != nil {
			return a, n.Errorf("%w", err)
		}
		switch a.scoresMode {
		case ScoresRaw, ScoresSoftcapped, ScoresBiased, ScoresWeights:
		case "":
			return a, n.Errorf("output 1 (scores) is requested but attribute scores_mode is not set")
		default:
			return a, n.Errorf("scores_mode %q is not one of %s, %s, %s, %s", a.scoresMode, ScoresRaw, ScoresSoftcapped, ScoresBiased, ScoresWeights)
		}
	}
	for i, name := range []string{"q_view", "k_view", "v_view"} {
		if a.views[i], err = viewAttr(n, name, 2); err != nil {
			return a, err
		}
	}
	shape, okShape, err := n.AttrInts("out_shape")
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	ov, okView, err := n.AttrInts("out_view")
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if okShape != okView {
		return a, n.Errorf("attributes out_shape and out_view go together")
	}
	if okView {
		v, err := ParseView(ov)
		if err != nil {
			return a, n.Errorf("attribute out_view: %w", err)
		}
		if len(shape) > maxViewRank {
			return a, n.Errorf("attribute out_shape has rank %d", len(shape))
		}
		for _, d := range shape {
			if d < 0 || d > math.MaxInt32 {
				return a, n.Errorf("attribute out_shape %v has a dim out of range", shape)
			}
			a.outShape = append(a.outShape, int(d))
		}
		if _, err := checkedElements(a.outShape); err != nil {
			return a, n.Errorf("attribute out_shape: %w", err)
		}
		a.outView = &v
	}
	return a, nil
}

// logicalShape returns operand i's shape as the kernel sees it: the view's
// when one is given, else the input's.
func (a *attnAttrs) logicalShape(i int, s ir.Shape) ir.Shape {
	if a.views[i] != nil {
		return ir.ShapeOf(a.views[i].Shape)
	}
	return s
}

// attnMaskDType is the mask element type a mask kind takes.
func attnMaskDType(kind string) ir.DType {
	if kind == MaskAdditive {
		return ir.Float
	}
	return ir.Bool
}

// attnSplit splits Q, K, V (and mask) shapes into batch dims and matrix
// dims. It works on concrete and symbolic dims alike.
type attnDims[D any] struct {
	qB, kB, vB, mB     []D
	sq, d, kd, sk, vsk D
	dv                 D
	msq, msk           D
}

func splitAttn[D any](q, k, v, m []D, kT, hasMask bool, one D) (attnDims[D], error) {
	var s attnDims[D]
	for i, x := range [][]D{q, k, v} {
		if len(x) < 2 {
			return s, fmt.Errorf("input %d (%s) has rank %d, FusedAttention needs rank ≥ 2", i, []string{"Q", "K", "V"}[i], len(x))
		}
	}
	s.qB, s.sq, s.d = q[:len(q)-2], q[len(q)-2], q[len(q)-1]
	s.kB = k[:len(k)-2]
	if kT {
		s.kd, s.sk = k[len(k)-2], k[len(k)-1]
	} else {
		s.sk, s.kd = k[len(k)-2], k[len(k)-1]
	}
	s.vB, s.vsk, s.dv = v[:len(v)-2], v[len(v)-2], v[len(v)-1]
	if hasMask {
		for len(m) < 2 {
			m = append([]D{one}, m...)
		}
		s.mB, s.msq, s.msk = m[:len(m)-2], m[len(m)-2], m[len(m)-1]
	}
	return s, nil
}

// splitBias splits the bias's shape, left-padded with 1s to rank 2, into
// its batch dims and its [Sq, Sk] dims.
func splitBias[D any](b []D, one D) (batch []D, sq, sk D) {
	for len(b) < 2 {
		b = append([]D{one}, b...)
	}
	return b[:len(b)-2], b[len(b)-2], b[len(b)-1]
}

// diagonals is the number of diagonals of an [sq, sk] matrix.
func diagonals(sq, sk int) int { return max(sq+sk-1, 0) }

// splitBiasDiagonals splits the shape of a bias given by its diagonals
// (bias_diagonals), left-padded with 1s to rank 1, into its batch dims and
// the number of diagonals (Sq + Sk − 1).
func splitBiasDiagonals[D any](b []D, one D) (batch []D, diagonals D) {
	if len(b) == 0 {
		b = []D{one}
	}
	return b[:len(b)-1], b[len(b)-1]
}

// gridRows returns kh, the rows of a key grid kw keys wide holding sk
// keys, for a bias by its grid rows and columns (bias_grid) with terms
// values a query, which must be kh + kw.
func gridRows(sk, kw, terms int) (int, error) {
	if sk%kw != 0 {
		return 0, fmt.Errorf("bias_grid %d does not divide the %d keys into grid rows", kw, sk)
	}
	if kh := sk / kw; terms != kh+kw {
		return 0, fmt.Errorf("bias_grid %d: %d keys make %d grid rows, so the bias needs %d terms a query (rows, then columns), not %d", kw, sk, kh, kh+kw, terms)
	}
	return sk / kw, nil
}

// groupHeads returns K's (or V's) shape as the query heads see it when
// kv_group g > 1: its dim -3 (Hkv) replaced by Q's (Hq = g·Hkv). ok is
// false, with the reason, when the shapes do not fit a group of g.
func groupHeads(q, kv ir.Shape, g int, what string) (ir.Shape, error) {
	if len(q) < 3 || len(kv) < 3 {
		return nil, fmt.Errorf("kv_group %d needs Q and %s of rank ≥ 3 (a heads dim), got %s and %s", g, what, shapeText(q), shapeText(kv))
	}
	hq, hk := q[len(q)-3], kv[len(kv)-3]
	if hk.Known() && hk.Value == 1 {
		return kv, nil // one KV head broadcasts (multi-query)
	}
	if hq.Known() && hk.Known() && hq.Value != int64(g)*hk.Value {
		return nil, fmt.Errorf("kv_group %d: Q has %v heads, %s has %v (Q's heads must be %d times %s's)", g, hq, what, hk, g, what)
	}
	out := append(ir.Shape{}, kv...)
	out[len(out)-3] = hq
	return out, nil
}

func inferFusedAttention(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 3); err != nil {
		return nil, err
	}
	hasMask := len(in) > 3 && in[3].Present()
	hasLens := len(in) > 4 && in[4].Present()
	hasBias := len(in) > 5 && in[5].Present()
	a, err := parseAttnAttrs(n, hasMask, hasBias)
	if err != nil {
		return nil, err
	}
	for i, what := range []string{"Q", "K", "V"} {
		if in[i].Type.DType != ir.Float {
			return nil, n.Errorf("%s has element type %v, FusedAttention takes float32", what, in[i].Type.DType)
		}
	}
	if hasBias && in[5].Type.DType != ir.Float {
		return nil, n.Errorf("bias has element type %v, FusedAttention takes float32", in[5].Type.DType)
	}
	if hasMask && in[3].Type.DType != attnMaskDType(a.maskKind) {
		return nil, n.Errorf("mask has element type %v, mask_kind %q takes %v", in[3].Type.DType, a.maskKind, attnMaskDType(a.maskKind))
	}
	if hasLens {
		if t := in[4].Type; t.DType != ir.Int64 || (t.RankKnown && len(t.Shape) != 1) {
			return nil, n.Errorf("kv_lengths must be a 1-D int64 tensor, got %v", t)
		}
	}
	hasSinks := len(in) > 6 && in[6].Present()
	var sB ir.Shape
	if hasSinks {
		if sB, err = sinksBatch(n, in[6].Type); err != nil {
			return nil, err
		}
	}
	nOut := 1
	if a.scoresMode != "" {
		nOut = 2
	}
	for i := 0; i < len(in) && i < 7; i++ {
		if i != 4 && in[i].Present() && !in[i].Type.RankKnown {
			return []Value{UnknownRank(ir.Float), UnknownRank(ir.Float)}[:nOut], nil
		}
	}
	var m ir.Shape
	if hasMask {
		m = in[3].Type.Shape
	}
	for i, what := range []string{"Q", "K", "V"} {
		if a.views[i] == nil {
			continue
		}
		if dims, ok := in[i].Type.Shape.Concrete(); ok && !a.views[i].Fits(ShapeElems(dims)) {
			return nil, n.Errorf("%s view %v does not fit the input of shape %v", what, a.views[i].Ints(), dims)
		}
	}
	qs, ks, vs := a.logicalShape(0, in[0].Type.Shape), a.logicalShape(1, in[1].Type.Shape), a.logicalShape(2, in[2].Type.Shape)
	if a.kvGroup > 1 {
		if ks, err = groupHeads(qs, ks, a.kvGroup, "K"); err != nil {
			return nil, n.Errorf("%w", err)
		}
		if vs, err = groupHeads(qs, vs, a.kvGroup, "V"); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	s, err := splitAttn(qs, ks, vs, m, a.kT, hasMask, ir.Dim{Value: 1})
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	differ := func(x, y ir.Dim) bool { return x.Known() && y.Known() && x.Value != y.Value }
	if differ(s.d, s.kd) {
		return nil, n.Errorf("Q has head size %v but K has %v", s.d, s.kd)
	}
	if differ(s.sk, s.vsk) {
		return nil, n.Errorf("K has %v keys but V has %v", s.sk, s.vsk)
	}
	if hasMask {
		bad := func(md, want ir.Dim) bool { return md.Known() && md.Value != 1 && differ(md, want) }
		badKeys := bad(s.msk, s.sk)
		if a.padKeys {
			badKeys = s.msk.Known() && s.sk.Known() && s.msk.Value > s.sk.Value
		}
		if bad(s.msq, s.sq) || badKeys {
			return nil, n.Errorf("mask %s does not broadcast to the scores [%v, %v]", shapeText(in[3].Type.Shape), s.sq, s.sk)
		}
	}
	var bB []ir.Dim
	switch {
	case hasBias && a.biasDiag:
		var diag ir.Dim
		bB, diag = splitBiasDiagonals(in[5].Type.Shape, ir.Dim{Value: 1})
		if want := diagonals(int(s.sq.Value), int(s.sk.Value)); diag.Known() && s.sq.Known() && s.sk.Known() && diag.Value != int64(want) {
			return nil, n.Errorf("bias %s gives %v diagonals (bias_diagonals), the scores [%v, %v] have %d", shapeText(in[5].Type.Shape), diag, s.sq, s.sk, want)
		}
	case hasBias && a.biasGrid > 0:
		var bsq, terms ir.Dim
		bB, bsq, terms = splitBias(in[5].Type.Shape, ir.Dim{Value: 1})
		if bsq.Known() && bsq.Value != 1 && differ(bsq, s.sq) {
			return nil, n.Errorf("bias %s does not broadcast to the scores' %v queries", shapeText(in[5].Type.Shape), s.sq)
		}
		if s.sk.Known() && terms.Known() {
			if _, err := gridRows(int(s.sk.Value), a.biasGrid, int(terms.Value)); err != nil {
				return nil, n.Errorf("bias %s: %w", shapeText(in[5].Type.Shape), err)
			}
		}
	case hasBias:
		var bsq, bsk ir.Dim
		bB, bsq, bsk = splitBias(in[5].Type.Shape, ir.Dim{Value: 1})
		bad := func(bd, want ir.Dim) bool { return bd.Known() && bd.Value != 1 && differ(bd, want) }
		if bad(bsq, s.sq) || bad(bsk, s.sk) {
			return nil, n.Errorf("bias %s does not broadcast to the scores [%v, %v]", shapeText(in[5].Type.Shape), s.sq, s.sk)
		}
	}
	batch, err := BroadcastDims(s.qB, s.kB, s.vB, s.mB, bB, sB)
	if err != nil {
		return nil, n.Errorf("batch dims of Q %s, K %s, V %s, mask, bias and sinks do not broadcast", shapeText(in[0].Type.Shape), shapeText(in[1].Type.Shape), shapeText(in[2].Type.Shape))
	}
	if hasLens {
		if len(batch) == 0 {
			return nil, n.Errorf("kv_lengths needs a batch dim (inputs of rank ≥ 3)")
		}
		if t := in[4].Type; t.RankKnown && differ(t.Shape[0], batch[0]) && !(t.Shape[0].Known() && t.Shape[0].Value == 1) {
			return nil, n.Errorf("kv_lengths has %v entries, the batch has %v", t.Shape[0], batch[0])
		}
	}
	out := append(append(ir.Shape{}, batch...), s.sq, s.dv)
	res := []Value{Typed(ir.Float, out)}
	if a.outView != nil {
		if len(a.outView.Shape) != len(out) {
			return nil, n.Errorf("out_view has rank %d, the result has rank %d", len(a.outView.Shape), len(out))
		}
		for i, d := range out {
			if d.Known() && d.Value != int64(a.outView.Shape[i]) {
				return nil, n.Errorf("out_view dims %v differ from the result's %s", a.outView.Shape, shapeText(out))
			}
		}
		if !a.outView.Bijective(ShapeElems(a.outShape)) {
			return nil, n.Errorf("out_view %v does not cover out_shape %v exactly once", a.outView.Ints(), a.outShape)
		}
		res[0] = Typed(ir.Float, ir.ShapeOf(a.outShape))
	}
	if a.scoresMode != "" {
		res = append(res, Typed(ir.Float, append(append(ir.Shape{}, batch...), s.sq, s.sk)))
	}
	return res, nil
}

// sinksBatch checks FusedAttention's sinks input (6) of type t: float32,
// rank ≥ 2 with its last two dims 1 (one logit a batch matrix); it returns
// the leading (batch) dims.
func sinksBatch(n *ir.Node, t ir.TypeInfo) (ir.Shape, error) {
	if t.DType != ir.Float {
		return nil, n.Errorf("sinks have element type %v, FusedAttention takes float32", t.DType)
	}
	if !t.RankKnown {
		return nil, nil
	}
	r := len(t.Shape)
	one := func(d ir.Dim) bool { return !d.Known() || d.Value == 1 }
	if r < 2 || !one(t.Shape[r-2]) || !one(t.Shape[r-1]) {
		return nil, n.Errorf("sinks %s must have rank ≥ 2 and last two dims 1 (one logit a batch matrix)", shapeText(t.Shape))
	}
	return t.Shape[:r-2], nil
}
