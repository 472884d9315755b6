package ops

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
)

// Attention (opsets 23 and 24) is ONNX's scaled dot-product attention:
//
//	Y = softmax(softcap(scale·Q·Kᵀ) + bias) · V
//
// with Q, K, V either 4-D ([B, H, S, D]) or 3-D ([B, S, H·D], heads given
// by q_num_heads and kv_num_heads), grouped-query and multi-query heads
// (q_num_heads a multiple of kv_num_heads), a bias from attn_mask (bool:
// True takes part; float: added), is_causal and, at opset 24, the key
// lengths nonpad_kv_seqlen, and a KV cache: past_key/past_value are
// concatenated before K/V along the sequence and returned as
// present_key/present_value. qk_matmul_output returns the scores at the
// stage qk_matmul_output_mode names.
//
// It does not have a kernel of its own: LowerAttention turns a node into
// the FusedAttention node that computes it (the streaming kernel, no
// Sq×Sk buffer unless qk_matmul_output is requested) and the standard ops
// around it (Concat for the cache, the head split of a 3-D K or V that
// feeds the cache, Casts for element types other than float32). The
// Attention kernel runs those nodes; the plan-time rewrite in runtime/graph
// puts them into the plan in its place, so that models using Attention and
// models spelling attention out in primitive ops reach the same kernel.
//
// Where the operator's text and ONNX's reference implementation
// (onnx/reference/ops/op_attention.py, v1.22.0) disagree, attnrun follows
// the reference, as the node tests and ONNX Runtime do; attentionNotes
// lists each choice (docs/ops.md shows them).

// attentionNotes are the choices attnrun makes for Attention, shown in
// docs/ops.md.
var attentionNotes = []string{
	"is_causal with a KV cache masks key j for query i when j > i + past_sequence_length (the reference's alignment: the current queries follow the cache); without a cache the mask is upper-left aligned (j > i), also when Sq ≠ Sk.",
	"an attn_mask whose last dim is shorter than the total sequence length is padded with -inf (False for bool), at opset 23 as at 24, as the reference does; a last dim of 1 is then padding too, not a broadcast.",
	"is_causal together with a bool attn_mask: the mask's False entries and the causal triangle are both -inf (the operator's text and its function body). The reference implementation turns True into 0·(-inf) = NaN there, which no consumer wants; attnrun does not follow it in that case.",
	"qk_matmul_output_mode 0 with softcap returns the softcapped scores, as the reference does (the text says mode 0 is the raw product); modes 1, 2 and 3 are the softcapped scores, the scores with softcap and every mask added, and the softmax output.",
	"scale multiplies Q·Kᵀ once (the reference multiplies Q and K by √scale each; the results differ by rounding only); the default is 1/√head_size.",
	"softcap ≤ 0 means no softcap, as in the reference.",
	"the softmax runs in float32 with float64 row sums whatever softmax_precision says (1, 10, 11 and 16 are accepted); float16, bfloat16 and double inputs are converted to float32 for the kernel and the results converted back.",
	"a row whose every key is masked gives NaN (softmax of all -inf), as the reference does.",
	"the GQA heads repeat interleaved: query head h reads KV head h / (q_num_heads / kv_num_heads); with kv_num_heads 1 every query head reads the one KV head.",
}

// attentionTypes are the element types Attention takes for Q, K and V.
var attentionTypes = []ir.DType{ir.Float, ir.Float16, ir.Double, ir.BFloat16}

// helperOpset is the default-domain opset of the nodes LowerAttention adds
// (Cast, Concat, Reshape, Transpose, Identity).
const helperOpset = 18

func init() {
	doc := "scaled dot-product attention: MHA/GQA/MQA, causal, bool/float masks, softcap, KV cache, qk_matmul_output; nonpad_kv_seqlen from 24; runs as com.attnrun:FusedAttention"
	Register(&Schema{
		Domain: DomainONNX, OpType: "Attention", Since: 23, Until: 23,
		MinInputs: 3, MaxInputs: 6, TypeInput: 0, DTypes: attentionTypes,
		Infer: inferAttention, Run: runAttention, Doc: doc, Notes: attentionNotes,
	})
	Register(&Schema{
		Domain: DomainONNX, OpType: "Attention", Since: 24, Until: MaxOpset,
		MinInputs: 3, MaxInputs: 7, TypeInput: 0, DTypes: attentionTypes,
		Infer: inferAttention, Run: runAttention, Doc: doc, Notes: attentionNotes,
	})
}

// onnxAttn are an Attention node's attributes.
type onnxAttn struct {
	causal          bool
	scale           float32
	hasScale        bool
	qHeads, kvHeads int // 0 when not given
	softcap         float32
	qkMode          int64
}

func parseOnnxAttn(n *ir.Node) (onnxAttn, error) {
	var a onnxAttn
	c, err := n.AttrInt("is_causal", 0)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	if c != 0 && c != 1 {
		return a, n.Errorf("is_causal must be 0 or 1, got %d", c)
	}
	a.causal = c == 1
	if n.Attr("scale") != nil {
		a.hasScale = true
		if a.scale, err = n.AttrFloat("scale", 1); err != nil {
			return a, n.Errorf("%w", err)
		}
		if a.scale == 0 || math.IsNaN(float64(a.scale)) || math.IsInf(float64(a.scale), 0) {
			return a, n.Errorf("scale must be finite and non-zero, got %g", a.scale)
		}
	}
	for _, h := range []struct {
		name string
		dst  *int
	}{{"q_num_heads", &a.qHeads}, {"kv_num_heads", &a.kvHeads}} {
		v, err := n.AttrInt(h.name, 0)
		if err != nil {
			return a, n.Errorf("%w", err)
		}
		if n.Attr(h.name) != nil && (v < 1 || v > math.MaxInt32) {
			return a, n.Errorf("%s must be ≥ 1, got %d", h.name, v)
		}
		*h.dst = int(v)
	}
	if a.softcap, err = n.AttrFloat("softcap", 0); err != nil {
		return a, n.Errorf("%w", err)
	}
	if math.IsNaN(float64(a.softcap)) || math.IsInf(float64(a.softcap), 0) {
		return a, n.Errorf("softcap must be finite, got %g", a.softcap)
	}
	if a.softcap < 0 {
		a.softcap = 0 // the reference applies softcap only when it is > 0
	}
	if p := n.Attr("softmax_precision"); p != nil {
		v, err := n.AttrInt("softmax_precision", 0)
		if err != nil {
			return a, n.Errorf("%w", err)
		}
		switch ir.DType(v) {
		case ir.Float, ir.Float16, ir.Double, ir.BFloat16:
		default:
			return a, n.Errorf("softmax_precision %d is not a float type (1, 10, 11 or 16)", v)
		}
	}
	if a.qkMode, err = n.AttrInt("qk_matmul_output_mode", 0); err != nil {
		return a, n.Errorf("%w", err)
	}
	if a.qkMode < 0 || a.qkMode > 3 {
		return a, n.Errorf("qk_matmul_output_mode must be 0 to 3, got %d", a.qkMode)
	}
	if len(n.Outputs) > 4 {
		return a, n.Errorf("has %d outputs, Attention has at most 4", len(n.Outputs))
	}
	return a, nil
}

// attnInputNames are Attention's inputs, for messages.
var attnInputNames = []string{"Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"}

// attnGeom is an Attention node's geometry: per input, whether it is
// given, and the head layout. Dims are ir.Dims, so that inference and the
// lowering (on concrete dims) share it.
type attnGeom struct {
	threeD                  bool
	b, sq, skv, past, total ir.Dim
	hq, hkv, d, dv          ir.Dim
}

// attentionGeometry checks an Attention node's input shapes against each
// other and returns the geometry.
func attentionGeometry(n *ir.Node, a onnxAttn, in []Value) (attnGeom, error) {
	var g attnGeom
	q, k, v := in[0].Type, in[1].Type, in[2].Type
	for i, t := range []ir.TypeInfo{q, k, v} {
		if t.RankKnown && len(t.Shape) != 3 && len(t.Shape) != 4 {
			return g, n.Errorf("%s has rank %d, Attention takes 3-D or 4-D Q, K and V", attnInputNames[i], len(t.Shape))
		}
	}
	if q.RankKnown && k.RankKnown && v.RankKnown && (len(q.Shape) != len(k.Shape) || len(q.Shape) != len(v.Shape)) {
		return g, n.Errorf("Q, K and V have ranks %d, %d and %d; they must be equal", len(q.Shape), len(k.Shape), len(v.Shape))
	}
	if !q.RankKnown || !k.RankKnown || !v.RankKnown {
		return g, errUnknownRank
	}
	g.threeD = len(q.Shape) == 3
	known := func(d ir.Dim) bool { return d.Known() }
	differ := func(x, y ir.Dim) bool { return known(x) && known(y) && x.Value != y.Value }
	perHead := func(hidden ir.Dim, heads int, what string) (ir.Dim, error) {
		if !known(hidden) {
			return ir.UnknownDim, nil
		}
		if hidden.Value%int64(heads) != 0 {
			return ir.Dim{}, n.Errorf("%s's hidden size %d is not a multiple of its %d heads", what, hidden.Value, heads)
		}
		return ir.Dim{Value: hidden.Value / int64(heads)}, nil
	}
	var err error
	if g.threeD {
		if a.qHeads == 0 || a.kvHeads == 0 {
			return g, n.Errorf("3-D Q, K and V need attributes q_num_heads and kv_num_heads")
		}
		g.b, g.sq, g.skv = q.Shape[0], q.Shape[1], k.Shape[1]
		g.hq, g.hkv = ir.Dim{Value: int64(a.qHeads)}, ir.Dim{Value: int64(a.kvHeads)}
		if g.d, err = perHead(q.Shape[2], a.qHeads, "Q"); err != nil {
			return g, err
		}
		kd, err := perHead(k.Shape[2], a.kvHeads, "K")
		if err != nil {
			return g, err
		}
		if differ(g.d, kd) {
			return g, n.Errorf("Q's head size %v differs from K's %v", g.d, kd)
		}
		if g.dv, err = perHead(v.Shape[2], a.kvHeads, "V"); err != nil {
			return g, err
		}
		if differ(k.Shape[1], v.Shape[1]) {
			return g, n.Errorf("K has %v keys but V has %v", k.Shape[1], v.Shape[1])
		}
		if differ(q.Shape[0], k.Shape[0]) || differ(q.Shape[0], v.Shape[0]) {
			return g, n.Errorf("Q, K and V have batch sizes %v, %v and %v", q.Shape[0], k.Shape[0], v.Shape[0])
		}
	} else {
		g.b, g.hq, g.sq, g.d = q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
		g.hkv, g.skv, g.dv = k.Shape[1], k.Shape[2], v.Shape[3]
		for i, t := range []ir.TypeInfo{k, v} {
			if differ(t.Shape[0], g.b) || differ(t.Shape[1], g.hkv) || differ(t.Shape[2], g.skv) {
				return g, n.Errorf("%s %s does not fit Q %s and K %s", attnInputNames[i+1], shapeText(t.Shape), shapeText(q.Shape), shapeText(k.Shape))
			}
		}
		if differ(k.Shape[3], g.d) {
			return g, n.Errorf("Q's head size %v differs from K's %v", g.d, k.Shape[3])
		}
		if a.qHeads != 0 && differ(g.hq, ir.Dim{Value: int64(a.qHeads)}) || a.kvHeads != 0 && differ(g.hkv, ir.Dim{Value: int64(a.kvHeads)}) {
			return g, n.Errorf("q_num_heads %d / kv_num_heads %d differ from the heads of Q %s and K %s", a.qHeads, a.kvHeads, shapeText(q.Shape), shapeText(k.Shape))
		}
	}
	if known(g.hq) && known(g.hkv) && g.hkv.Value != 1 && (g.hkv.Value == 0 || g.hq.Value%g.hkv.Value != 0) {
		return g, n.Errorf("Q's %d heads are not a multiple of K's and V's %d heads", g.hq.Value, g.hkv.Value)
	}
	g.past, g.total = ir.Dim{Value: 0}, g.skv
	hasPast := len(in) > 5 && in[4].Present() && in[5].Present()
	if len(in) > 4 && in[4].Present() != (len(in) > 5 && in[5].Present()) {
		return g, n.Errorf("past_key and past_value go together")
	}
	if hasPast {
		pk, pv := in[4].Type, in[5].Type
		for i, t := range []ir.TypeInfo{pk, pv} {
			if t.RankKnown && len(t.Shape) != 4 {
				return g, n.Errorf("%s has rank %d, it must be 4-D [batch, kv_num_heads, past_sequence_length, head_size]", attnInputNames[4+i], len(t.Shape))
			}
		}
		if pk.RankKnown && pv.RankKnown {
			wantD := []ir.Dim{g.d, g.dv}
			for i, t := range []ir.TypeInfo{pk, pv} {
				if differ(t.Shape[0], g.b) || differ(t.Shape[1], g.hkv) || differ(t.Shape[3], wantD[i]) {
					return g, n.Errorf("%s %s does not fit the batch %v, %v KV heads and head size %v", attnInputNames[4+i], shapeText(t.Shape), g.b, g.hkv, wantD[i])
				}
			}
			if differ(pk.Shape[2], pv.Shape[2]) {
				return g, n.Errorf("past_key has %v positions but past_value has %v", pk.Shape[2], pv.Shape[2])
			}
			g.past = pk.Shape[2]
			g.total = SymSum(g.past, g.skv)
		} else {
			g.past, g.total = ir.UnknownDim, ir.UnknownDim
		}
	}
	if len(in) > 3 && in[3].Present() {
		m := in[3].Type
		if m.DType != ir.Bool && m.DType != q.DType {
			return g, n.Errorf("attn_mask has element type %v; Attention takes a bool mask or one of Q's type %v", m.DType, q.DType)
		}
		if m.RankKnown {
			if len(m.Shape) > 4 {
				return g, n.Errorf("attn_mask has rank %d, at most 4", len(m.Shape))
			}
			if len(m.Shape) >= 1 && known(m.Shape[len(m.Shape)-1]) && known(g.total) && m.Shape[len(m.Shape)-1].Value > g.total.Value {
				return g, n.Errorf("attn_mask %s covers more keys than the %d of past and current keys", shapeText(m.Shape), g.total.Value)
			}
		}
	}
	if len(in) > 6 && in[6].Present() {
		if t := in[6].Type; t.DType != ir.Int64 || (t.RankKnown && (len(t.Shape) != 1 || differ(t.Shape[0], g.b))) {
			return g, n.Errorf("nonpad_kv_seqlen must be int64 of shape [batch], got %v", t)
		}
		if hasPast {
			return g, n.Errorf("nonpad_kv_seqlen cannot be used with past_key and past_value")
		}
	}
	if in[1].Type.DType != q.DType {
		return g, n.Errorf("K has element type %v, Q has %v", in[1].Type.DType, q.DType)
	}
	if !typeIn(in[2].Type.DType, attentionTypes) {
		return g, n.Errorf("V has element type %v, which Attention does not take (it takes %v)", in[2].Type.DType, attentionTypes)
	}
	if hasPast && (in[4].Type.DType != q.DType || in[5].Type.DType != in[2].Type.DType) {
		return g, n.Errorf("past_key and past_value have element types %v and %v; they must be K's %v and V's %v", in[4].Type.DType, in[5].Type.DType, q.DType, in[2].Type.DType)
	}
	return g, nil
}

// errUnknownRank tells inference that a rank is unknown (outputs unknown).
var errUnknownRank = fmt.Errorf("unknown rank")

func typeIn(dt ir.DType, list []ir.DType) bool {
	for _, d := range list {
		if d == dt {
			return true
		}
	}
	return false
}

func inferAttention(n *ir.Node, _ int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 3); err != nil {
		return nil, err
	}
	a, err := parseOnnxAttn(n)
	if err != nil {
		return nil, err
	}
	qt, vt := in[0].Type.DType, in[2].Type.DType
	out := make([]Value, max(1, len(n.Outputs)))
	g, err := attentionGeometry(n, a, in)
	if err == errUnknownRank {
		out[0] = UnknownRank(qt)
		for i := 1; i < len(out); i++ {
			out[i] = UnknownRank([]ir.DType{qt, qt, vt, qt}[i])
		}
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if g.threeD {
		hidden := ir.UnknownDim
		if g.dv.Known() {
			hidden = ir.Dim{Value: g.dv.Value * g.hq.Value}
		}
		out[0] = Typed(qt, ir.Shape{g.b, g.sq, hidden})
	} else {
		out[0] = Typed(qt, ir.Shape{g.b, g.hq, g.sq, g.dv})
	}
	for i := 1; i < len(out); i++ {
		switch i {
		case 1:
			out[i] = Typed(qt, ir.Shape{g.b, g.hkv, g.total, g.d})
		case 2:
			out[i] = Typed(vt, ir.Shape{g.b, g.hkv, g.total, g.dv})
		case 3:
			out[i] = Typed(qt, ir.Shape{g.b, g.hq, g.sq, g.total})
		}
	}
	return out, nil
}

// AttentionLowering is how one Attention node runs: the standard nodes and
// the one com.attnrun:FusedAttention node (Fused) that compute its
// outputs, in execution order. Tensors the nodes make for each other are
// named AttentionTempPrefix + the node's label + a role ("q_f32",
// "key_4d", ...), and the nodes the node's label + their op; Consts holds
// the constant inputs they read (Reshape shapes). Every node's opset is
// helperOpset in the default domain, 1 in com.attnrun.
type AttentionLowering struct {
	Nodes  []*ir.Node
	Fused  *ir.Node
	Consts map[string]*ir.Tensor
	// Heads records, for inputs 0 to 2 of Fused (Q, K, V), the number of
	// heads when Fused reads a 3-D tensor through HeadSplitView (0: the
	// tensor as is), so that a graph rewrite can apply the split to a
	// view of where that tensor comes from.
	Heads [3]int
	// Opsets gives each node's domain opset.
	Opsets map[*ir.Node]int
}

// AttentionTempPrefix starts the names of the tensors LowerAttention
// makes; graph rewrites check that no graph tensor uses it.
const AttentionTempPrefix = "attnrun:"

// LowerAttention builds the lowering of Attention node n for inputs of the
// given concrete types (one Value per node input; omitted ones have no
// type). It fails on shapes the node does not accept. Opsets 23 and 24
// differ only in the inputs they allow (nonpad_kv_seqlen), which the
// schema's arity checks, so the lowering does not take the opset.
func LowerAttention(n *ir.Node, in []Value) (*AttentionLowering, error) {
	if err := checkInferInputs(n, in, 3); err != nil {
		return nil, err
	}
	a, err := parseOnnxAttn(n)
	if err != nil {
		return nil, err
	}
	g, err := attentionGeometry(n, a, in)
	if err == errUnknownRank {
		return nil, n.Errorf("lowering needs known shapes")
	}
	if err != nil {
		return nil, err
	}
	dims := map[string]ir.Dim{"batch": g.b, "sq": g.sq, "skv": g.skv, "past": g.past, "hq": g.hq, "hkv": g.hkv, "d": g.d, "dv": g.dv}
	c := map[string]int{}
	for k, d := range dims {
		if !d.Known() {
			return nil, n.Errorf("lowering needs known shapes (%s is %v)", k, d)
		}
		c[k] = int(d.Value)
	}
	l := &AttentionLowering{Consts: map[string]*ir.Tensor{}, Opsets: map[*ir.Node]int{}}
	prefix := AttentionTempPrefix + n.Label() + "/"
	add := func(node *ir.Node, opset int) {
		node.Name = n.Label() + "/" + node.OpType + fmt.Sprint(len(l.Nodes))
		l.Nodes = append(l.Nodes, node)
		l.Opsets[node] = opset
	}
	out := func(i int) string {
		if i < len(n.Outputs) {
			return n.Outputs[i]
		}
		return ""
	}
	castTo := func(x string, dt ir.DType, name string) string {
		node := &ir.Node{OpType: "Cast", Inputs: []string{x}, Outputs: []string{prefix + name},
			Attrs: []*ir.Attribute{{Name: "to", Type: ir.AttrInt, Int: int64(dt)}}}
		add(node, helperOpset)
		return node.Outputs[0]
	}
	// cache returns the 4-D [B, Hkv, T, D] tensor K or V reads: the
	// input itself (4-D, no cache), its head split (3-D), with the past
	// concatenated before it; it writes the present output when asked.
	cache := func(x, past, present string, d int, role string) (string, int) {
		if past == "" && present == "" {
			if g.threeD {
				return x, c["hkv"] // read in place through the head split
			}
			return x, 0
		}
		x4 := x
		if g.threeD {
			shape := prefix + role + "_heads_shape"
			l.Consts[shape] = ir.FromSlice([]int{4}, []int64{int64(c["batch"]), int64(c["skv"]), int64(c["hkv"]), int64(d)})
			r := &ir.Node{OpType: "Reshape", Inputs: []string{x, shape}, Outputs: []string{prefix + role + "_heads"}}
			add(r, helperOpset)
			t := &ir.Node{OpType: "Transpose", Inputs: r.Outputs, Outputs: []string{prefix + role + "_4d"},
				Attrs: []*ir.Attribute{{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 2, 1, 3}}}}
			if past == "" && present != "" {
				t.Outputs[0] = present
			}
			add(t, helperOpset)
			x4 = t.Outputs[0]
		}
		switch {
		case past != "":
			cat := &ir.Node{OpType: "Concat", Inputs: []string{past, x4}, Outputs: []string{present},
				Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: 2}}}
			if present == "" {
				cat.Outputs[0] = prefix + role + "_present"
			}
			add(cat, helperOpset)
			return cat.Outputs[0], 0
		case !g.threeD:
			id := &ir.Node{OpType: "Identity", Inputs: []string{x}, Outputs: []string{present}}
			add(id, helperOpset)
		}
		return x4, 0
	}
	pastK, pastV := "", ""
	if len(in) > 5 && in[4].Present() {
		pastK, pastV = n.Inputs[4], n.Inputs[5]
	}
	qName := n.Inputs[0]
	kName, kHeads := cache(n.Inputs[1], pastK, out(1), c["d"], "key")
	vName, vHeads := cache(n.Inputs[2], pastV, out(2), c["dv"], "value")
	qHeads := 0
	if g.threeD {
		qHeads = c["hq"]
	}
	qt, vt := in[0].Type.DType, in[2].Type.DType
	if qt != ir.Float {
		qName, kName = castTo(qName, ir.Float, "q_f32"), castTo(kName, ir.Float, "k_f32")
	}
	if vt != ir.Float {
		vName = castTo(vName, ir.Float, "v_f32")
	}
	scale := a.scale
	if !a.hasScale {
		scale = float32(1 / math.Sqrt(float64(c["d"])))
	}
	fused := &ir.Node{OpType: FusedAttentionOp, Domain: DomainAttnrun,
		Inputs:  []string{qName, kName, vName},
		Outputs: []string{out(0)},
		Attrs:   []*ir.Attribute{{Name: "scale", Type: ir.AttrFloat, Float: scale}},
	}
	attrInt := func(name string, v int64) {
		fused.Attrs = append(fused.Attrs, &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v})
	}
	l.Heads = [3]int{qHeads, kHeads, vHeads}
	for i, name := range []string{"q_view", "k_view", "v_view"} {
		if l.Heads[i] == 0 {
			continue
		}
		dims, _ := in[i].Type.Shape.Concrete()
		v, ok := HeadSplitView(Contiguous(dims), l.Heads[i])
		if !ok {
			return nil, n.Errorf("cannot split %s %v into %d heads", attnInputNames[i], in[i].Type.Shape, l.Heads[i])
		}
		fused.Attrs = append(fused.Attrs, &ir.Attribute{Name: name, Type: ir.AttrInts, Ints: v.Ints()})
	}
	if g.threeD {
		// Y [B, Sq, Hq·Dv] is written through its own head split.
		shape := []int{c["batch"], c["sq"], c["hq"] * c["dv"]}
		v, ok := HeadSplitView(Contiguous(shape), c["hq"])
		if !ok {
			return nil, n.Errorf("cannot split Y %v into %d heads", shape, c["hq"])
		}
		fused.Attrs = append(fused.Attrs,
			&ir.Attribute{Name: "out_shape", Type: ir.AttrInts, Ints: int64sOf(shape)},
			&ir.Attribute{Name: "out_view", Type: ir.AttrInts, Ints: v.Ints()})
	}
	if c["hkv"] != c["hq"] && c["hkv"] > 1 {
		attrInt("kv_group", int64(c["hq"]/c["hkv"]))
	}
	if a.softcap > 0 {
		fused.Attrs = append(fused.Attrs, &ir.Attribute{Name: "softcap", Type: ir.AttrFloat, Float: a.softcap})
	}
	if a.causal {
		attrInt("causal", 1)
		if c["past"] != 0 {
			attrInt("causal_offset", int64(c["past"]))
		}
	}
	if len(in) > 3 && in[3].Present() {
		m := n.Inputs[3]
		kind := MaskBoolFalseMasks
		if in[3].Type.DType != ir.Bool {
			kind = MaskAdditive
			if in[3].Type.DType != ir.Float {
				m = castTo(m, ir.Float, "mask_f32")
			}
		}
		fused.Inputs = append(fused.Inputs, m)
		fused.Attrs = append(fused.Attrs, &ir.Attribute{Name: "mask_kind", Type: ir.AttrString, String: []byte(kind)})
		if ms, _ := in[3].Type.Shape.Concrete(); len(ms) > 0 && ms[len(ms)-1] < c["skv"]+c["past"] {
			attrInt("mask_pad_keys", 1)
		}
	}
	if len(in) > 6 && in[6].Present() {
		for len(fused.Inputs) < 4 {
			fused.Inputs = append(fused.Inputs, "")
		}
		fused.Inputs = append(fused.Inputs, n.Inputs[6])
	}
	qk := out(3)
	if qk != "" {
		mode := []string{ScoresSoftcapped, ScoresSoftcapped, ScoresBiased, ScoresWeights}[a.qkMode]
		fused.Attrs = append(fused.Attrs, &ir.Attribute{Name: "scores_mode", Type: ir.AttrString, String: []byte(mode)})
		fused.Outputs = append(fused.Outputs, qk)
	}
	if qt != ir.Float {
		// The kernel writes float32; Casts write the outputs.
		y := fused.Outputs[0]
		fused.Outputs[0] = prefix + "y_f32"
		if qk != "" {
			fused.Outputs[1] = prefix + "qk_f32"
		}
		add(fused, 1)
		fused.Name = n.Label() + "/" + FusedAttentionOp
		castBack := func(from, to string) {
			node := &ir.Node{OpType: "Cast", Inputs: []string{from}, Outputs: []string{to},
				Attrs: []*ir.Attribute{{Name: "to", Type: ir.AttrInt, Int: int64(qt)}}}
			add(node, helperOpset)
		}
		castBack(fused.Outputs[0], y)
		if qk != "" {
			castBack(fused.Outputs[1], qk)
		}
	} else {
		add(fused, 1)
		fused.Name = n.Label() + "/" + FusedAttentionOp
	}
	l.Fused = fused
	fused.Doc = "lowered by attnrun from " + n.Label() + " (Attention)"
	return l, nil
}

// Types infers, in order, the types of the tensors the lowering's nodes
// make, given typeOf for every other tensor (the graph's): the constants
// in Consts and each node's outputs that typeOf does not know. An output
// typeOf knows (one of the Attention node's own) must get exactly that
// type. Graph rewrites and backends that put the lowering in a plan use
// it to size what they allocate.
func (l *AttentionLowering) Types(typeOf func(string) (Value, bool)) (map[string]Value, error) {
	local := map[string]Value{}
	for name, t := range l.Consts {
		if _, taken := typeOf(name); taken {
			return nil, fmt.Errorf("tensor name %q is taken", name)
		}
		local[name] = Value{Type: Known(t.DType, t.Shape), Const: t}
	}
	lookup := func(name string) (Value, bool) {
		if v, ok := local[name]; ok {
			return v, true
		}
		return typeOf(name)
	}
	for _, node := range l.Nodes {
		s, err := Lookup(node.Domain, node.OpType, l.Opsets[node])
		if err != nil {
			return nil, err
		}
		vals := make([]Value, len(node.Inputs))
		for k, name := range node.Inputs {
			if name == "" {
				continue
			}
			v, ok := lookup(name)
			if !ok {
				return nil, fmt.Errorf("internal error: %s reads %q, which has no type", node.Label(), name)
			}
			vals[k] = v
		}
		res, err := s.Infer(node, l.Opsets[node], vals)
		if err != nil {
			return nil, err
		}
		for k, name := range node.Outputs {
			if name == "" {
				continue
			}
			if k >= len(res) {
				return nil, fmt.Errorf("internal error: %s infers no output %d", node.Label(), k)
			}
			if old, ok := typeOf(name); ok {
				a, okA := old.Type.Shape.Concrete()
				b, okB := res[k].Type.Shape.Concrete()
				if old.Type.DType != res[k].Type.DType || okA != okB || !SameShape(a, b) {
					return nil, fmt.Errorf("internal error: %s gives %q type %v, the graph has %v", node.Label(), name, res[k].Type, old.Type)
				}
				continue
			}
			local[name] = res[k]
		}
	}
	return local, nil
}

// HeadSplitView is the view of a [B, S, H·D] operand, read through view v
// of its data, as [B, H, S, D]: Attention's split of 3-D inputs into heads.
func HeadSplitView(v View, heads int) (View, bool) {
	if len(v.Shape) != 3 || heads <= 0 || v.Shape[2]%heads != 0 {
		return View{}, false
	}
	r, ok := v.Reshape([]int{v.Shape[0], v.Shape[1], heads, v.Shape[2] / heads})
	if !ok {
		return View{}, false
	}
	return r.Transpose([]int{0, 2, 1, 3})
}

// runAttention runs an Attention node through its lowering: the helper
// nodes' kernels and the FusedAttention kernel, in order.
func runAttention(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 3); err != nil {
		return nil, err
	}
	vals := make([]Value, len(in))
	for i, t := range in {
		if t != nil {
			vals[i] = Value{Type: Known(t.DType, t.Shape)}
		}
	}
	l, err := LowerAttention(n, vals)
	if err != nil {
		return nil, err
	}
	env := map[string]*ir.Tensor{}
	for i, name := range n.Inputs {
		if name != "" && i < len(in) {
			env[name] = in[i]
		}
	}
	for name, t := range l.Consts {
		env[name] = t
	}
	for _, node := range l.Nodes {
		s, err := Lookup(node.Domain, node.OpType, l.Opsets[node])
		if err != nil {
			return nil, n.Errorf("lowering: %w", err)
		}
		args := make([]*ir.Tensor, len(node.Inputs))
		for i, name := range node.Inputs {
			if name != "" {
				args[i] = env[name]
			}
		}
		sub := Context{Opset: l.Opsets[node], Threads: computeThreads(ctx)}
		if ctx != nil {
			sub.Scratch, sub.Alloc = ctx.Scratch, ctx.Alloc
		}
		res, err := s.Run(&sub, node, args)
		if err != nil {
			return nil, n.Errorf("%w", err)
		}
		for i, name := range node.Outputs {
			if name != "" && i < len(res) {
				env[name] = res[i]
			}
		}
	}
	outs := make([]*ir.Tensor, max(1, len(n.Outputs)))
	for i := range outs {
		if i < len(n.Outputs) && n.Outputs[i] != "" {
			outs[i] = env[n.Outputs[i]]
		}
	}
	return outs, nil
}
