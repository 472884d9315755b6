package graph

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// AttentionCore is one attention computation of the graph whose weights
// softmax(scale·QKᵀ masked) can be shown: a Softmax over the last axis
// whose output feeds, directly or through no-op Casts (or a Where that
// zeroes masked weights), a MatMul as its first operand or an Einsum (P·V), the chain the attention fusion
// (fuse.go) replaces by one FusedAttention step; or an ONNX Attention
// node, whose weights are its qk_matmul_output in mode 3.
type AttentionCore struct {
	// Weights names the tensor holding the weights, [..., Sq, Sk]: the
	// Softmax's output.
	Weights string
	// Softmax computes the weights; Output is the MatMul (or Einsum)
	// reading them.
	Softmax, Output *ir.Node
	// Nodes is the chain from the scores MatMul or Einsum (when it was
	// found) to Output, in execution order.
	Nodes []*ir.Node
	// Mask names the tensor masking the scores ("" when the chain has no
	// mask); MaskKind says how (ops.MaskBoolTrueMasks,
	// ops.MaskBoolFalseMasks or ops.MaskAdditive), as in FusedAttention.
	// Of a chain with two masks (GPT-2's Where, then an added padding
	// mask), the Where's condition; else the last one applied.
	Mask, MaskKind string

	// Attention is the ONNX Attention node of the core (nil for a
	// Softmax chain; Softmax and Output are then that node). Causal is its
	// is_causal, and PastKey names its past_key input ("" when none): key
	// j is masked for query i when j > i + the cache's length.
	Attention *ir.Node
	Causal    bool
	PastKey   string
	// KeyLengths names the Attention node's nonpad_kv_seqlen input (opset
	// 24: int64 [batch], the keys of item b at or beyond KeyLengths[b] are
	// masked; "" when none).
	KeyLengths string
	// NeedsOutput is set when the Attention node does not return its
	// weights: Weights is then a name for them that WithAttentionWeights
	// makes the node write.
	NeedsOutput bool
}

// attentionWeightsMode is qk_matmul_output_mode's value for the softmax's
// output.
const attentionWeightsMode = 3

// attentionCore describes an ONNX Attention node as a core, or says why
// it cannot show its weights.
func (p *Program) attentionCore(n *ir.Node) (AttentionCore, bool) {
	c := AttentionCore{Softmax: n, Output: n, Nodes: []*ir.Node{n}, Attention: n}
	mode, err := n.AttrInt("qk_matmul_output_mode", 0)
	if err != nil {
		return c, false
	}
	switch {
	case len(n.Outputs) > 3 && n.Outputs[3] != "" && mode == attentionWeightsMode:
		c.Weights = n.Outputs[3]
	case len(n.Outputs) > 3 && n.Outputs[3] != "":
		return c, false // its qk_matmul_output holds other scores
	default:
		c.Weights, c.NeedsOutput = "attnrun/attention_weights/"+n.Label(), true
	}
	if causal, _ := n.AttrInt("is_causal", 0); causal == 1 {
		c.Causal = true
	}
	if len(n.Inputs) > 4 {
		c.PastKey = n.Inputs[4]
	}
	if len(n.Inputs) > 6 {
		c.KeyLengths = n.Inputs[6]
	}
	if len(n.Inputs) > 3 && n.Inputs[3] != "" {
		c.Mask, c.MaskKind = n.Inputs[3], ops.MaskAdditive
		if p.Types[n.Inputs[3]].Type.DType == ir.Bool {
			c.MaskKind = ops.MaskBoolFalseMasks // True takes part
		}
	}
	return c, true
}

// WithAttentionWeights returns m with every Attention node of cores that
// does not return its weights (NeedsOutput) asking for them: output 3
// (qk_matmul_output) named core.Weights, in mode 3. Other nodes are shared
// with m; m itself is unchanged.
func WithAttentionWeights(m *ir.Model, cores []AttentionCore) *ir.Model {
	swap := map[*ir.Node]*ir.Node{}
	for _, c := range cores {
		if !c.NeedsOutput || c.Attention == nil {
			continue
		}
		n := *c.Attention
		n.Outputs = append([]string(nil), n.Outputs...)
		for len(n.Outputs) < 4 {
			n.Outputs = append(n.Outputs, "")
		}
		n.Outputs[3] = c.Weights
		n.Attrs = nil
		for _, a := range c.Attention.Attrs {
			if a.Name != "qk_matmul_output_mode" {
				n.Attrs = append(n.Attrs, a)
			}
		}
		n.Attrs = append(n.Attrs, &ir.Attribute{Name: "qk_matmul_output_mode", Type: ir.AttrInt, Int: attentionWeightsMode})
		swap[c.Attention] = &n
	}
	if len(swap) == 0 {
		return m
	}
	g := *m.Graph
	g.Nodes = make([]*ir.Node, len(m.Graph.Nodes))
	for i, n := range m.Graph.Nodes {
		g.Nodes[i] = n
		if r := swap[n]; r != nil {
			g.Nodes[i] = r
		}
	}
	out := *m
	out.Graph = &g
	return &out
}

// AttentionCores finds the attention cores of the program's graph, in
// execution order.
func (p *Program) AttentionCores() []AttentionCore {
	producer := map[string]*ir.Node{}
	readers := map[string][]*ir.Node{}
	for _, n := range p.Order {
		for _, o := range n.Outputs {
			if o != "" {
				producer[o] = n
			}
		}
		for _, in := range n.Inputs {
			if in != "" {
				readers[in] = append(readers[in], n)
			}
		}
	}
	var cores []AttentionCore
	for _, sm := range p.Order {
		if sm.OpType == "Attention" && isDefaultDomain(sm) {
			if c, ok := p.attentionCore(sm); ok {
				cores = append(cores, c)
			}
			continue
		}
		if sm.OpType != "Softmax" || !isDefaultDomain(sm) || len(sm.Inputs) != 1 || len(sm.Outputs) != 1 || !p.softmaxOverLastAxis(sm) {
			continue
		}
		pv, casts := p.probabilitiesProduct(readers, sm.Outputs[0])
		if pv == nil {
			continue
		}
		c := AttentionCore{Weights: sm.Outputs[0], Softmax: sm, Output: pv}
		chain := append([]*ir.Node{pv}, casts...)
		chain = append(chain, sm)
		x := sm.Inputs[0]
		// After a Reshape that regroups the batch, a mask is the core's
		// only where its scores still have the weights' shape (Swin's
		// window mask broadcasts to [B_/nW, nW, H, N, N], not to the
		// weights [B_, H, N, N]).
		regrouped := false
		inFrame := func(scores string) bool { return !regrouped || p.sameDims(scores, c.Weights) }
	walk:
		for len(chain) < 16 {
			n := producer[x]
			if n == nil || !isDefaultDomain(n) {
				break
			}
			switch n.OpType {
			case "MatMul", "Einsum":
				chain = append(chain, n)
				break walk
			case "Concat": // the sink logits joined to the scores (gpt-oss)
				if len(n.Inputs) != 2 {
					break walk
				}
				chain = append(chain, n)
				x = n.Inputs[0]
			case "Div", "Mul", "Max": // Max: a floor (OPT's torch.max(scores, finfo.min))
				chain = append(chain, n)
				x = p.scoresOperand(producer, n, n.Inputs)
			case "Cast", "Identity", "Tanh": // Tanh: a soft cap (Gemma 2)
				if len(n.Inputs) != 1 {
					break walk
				}
				chain = append(chain, n)
				x = n.Inputs[0]
			case "Expand", "ScatterND":
				// A slice assignment of the whole scores (MViTv2's relative
				// positions): the value, expanded to the slice, written over
				// every element.
				from := n.Inputs[0]
				if n.OpType == "ScatterND" {
					if len(n.Inputs) != 3 {
						break walk
					}
					from = n.Inputs[2]
				}
				if !p.sameDims(from, n.Outputs[0]) {
					break walk
				}
				chain = append(chain, n)
				x = from
			case "Reshape", "Squeeze", "Unsqueeze", "Flatten":
				if !p.keepsMatrices(n) && !p.viewsKeyGrid(n) {
					break walk
				}
				chain = append(chain, n)
				x, regrouped = n.Inputs[0], true
			case "Where":
				if len(n.Inputs) != 3 || p.Types[n.Inputs[0]].Type.DType != ir.Bool {
					break walk
				}
				chain = append(chain, n)
				x = p.scoresOperand(producer, n, n.Inputs[1:])
				if !inFrame(x) || c.MaskKind == ops.MaskBoolTrueMasks || c.MaskKind == ops.MaskBoolFalseMasks {
					break // a second Where (DALLE-pytorch's padding, then its causal mask): the first met stays
				}
				c.Mask, c.MaskKind = n.Inputs[0], ops.MaskBoolFalseMasks
				if x == n.Inputs[2] {
					c.MaskKind = ops.MaskBoolTrueMasks
				}
			case "Add", "Sub":
				if len(n.Inputs) != 2 {
					break walk
				}
				r := producer[n.Inputs[1]]
				var put *ir.Node // an Unsqueeze putting the maximum's axis back (LayoutLMv3)
				if r != nil && r.OpType == "Unsqueeze" && len(r.Inputs) > 0 {
					put, r = r, producer[r.Inputs[0]]
				}
				if n.OpType == "Sub" && r != nil && r.OpType == "ReduceMax" && len(r.Inputs) > 0 && r.Inputs[0] == n.Inputs[0] {
					chain = append(chain, n) // the row maximum taken off: no mask
					if put != nil {
						chain = append(chain, put)
					}
					chain = append(chain, r)
					x = n.Inputs[0]
					continue
				}
				chain = append(chain, n)
				x = p.scoresOperand(producer, n, n.Inputs)
				if c.Mask == "" && inFrame(x) {
					c.Mask, c.MaskKind = n.Inputs[0], ops.MaskAdditive
					if x == n.Inputs[0] {
						c.Mask = n.Inputs[1]
					}
				}
			default:
				break walk
			}
		}
		for i := len(chain) - 1; i >= 0; i-- {
			c.Nodes = append(c.Nodes, chain[i])
		}
		cores = append(cores, c)
	}
	return cores
}

// probabilitiesProduct follows the softmax output w through no-op Casts,
// Identities, Reshapes that keep its matrices (BLOOM's view back to
// (B·H, S, S)), a Where that zeroes masked weights (ESPnet), a Slice
// that drops a sink's column (gpt-oss) and a Mul by a factor a batch
// matrix (BERT's head_mask) to the
// MatMul reading it as its first operand or the Einsum reading it as
// either (P·V); it returns that node (nil when none) and the nodes passed,
// last first.
func (p *Program) probabilitiesProduct(readers map[string][]*ir.Node, w string) (*ir.Node, []*ir.Node) {
	var passed []*ir.Node
	for len(passed) < 8 {
		var next *ir.Node
		for _, r := range readers[w] {
			if !isDefaultDomain(r) {
				continue
			}
			switch {
			case (r.OpType == "MatMul" && r.Inputs[0] == w || r.OpType == "Einsum") && len(r.Inputs) == 2:
				return r, passed
			case (r.OpType == "Cast" || r.OpType == "Identity" || p.keepsMatrices(r)) && len(r.Outputs) == 1 && next == nil:
				next = r
			case r.OpType == "Where" && len(r.Inputs) == 3 && (r.Inputs[1] == w || r.Inputs[2] == w) && len(r.Outputs) == 1 && next == nil:
				next = r // masked weights zeroed (ESPnet's masked_fill(mask, 0))
			case r.Inputs[0] == w && next == nil && isSinkSlice(r, p.Types, p.constTensor):
				next = r // the sink's column dropped (gpt-oss: fuse_sinks.go)
			case r.OpType == "Mul" && len(r.Inputs) == 2 && len(r.Outputs) == 1 && next == nil && r.Inputs[0] != r.Inputs[1] && factorOf(p.Types[otherInput(r, w)].Type, p.Types[w].Type) != noFactor:
				next = r // times a factor a batch matrix or a key (BERT's head_mask: fuse_head_scale.go)
			}
		}
		if next == nil {
			return nil, nil
		}
		passed = append([]*ir.Node{next}, passed...)
		w = next.Outputs[0]
	}
	return nil, nil
}

// keepsMatrices reports whether n is a Reshape (Squeeze, Unsqueeze,
// Flatten) that keeps the last two dims of its input: it regroups only
// the batch dims before them (Swin's window mask, BLOOM's heads).
func (p *Program) keepsMatrices(n *ir.Node) bool {
	if !reshapeLike(n) || n.OpType == "Identity" || len(n.Inputs) == 0 || len(n.Outputs) != 1 {
		return false
	}
	in, out := p.Types[n.Inputs[0]].Type, p.Types[n.Outputs[0]].Type
	if !in.RankKnown || !out.RankKnown || len(in.Shape) < 2 || len(out.Shape) < 2 {
		return false
	}
	for k := 1; k <= 2; k++ {
		a, b := in.Shape[len(in.Shape)-k], out.Shape[len(out.Shape)-k]
		if !a.Known() && a.Param == "" || a != b {
			return false
		}
	}
	return true
}

// viewsKeyGrid reports whether n is a Reshape between scores [..., Sq, Sk]
// and their view as a grid of keys [..., A..., kh, kw] (kh·kw = Sk), either
// way, the leading dims the same: SAM's decomposed relative positions
// (fuse_grid.go).
func (p *Program) viewsKeyGrid(n *ir.Node) bool {
	if n.OpType != "Reshape" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return false
	}
	a, b := p.Types[n.Inputs[0]].Type, p.Types[n.Outputs[0]].Type
	if !a.RankKnown || !b.RankKnown {
		return false
	}
	if len(a.Shape) < len(b.Shape) {
		a, b = b, a // a: the grid view, b: the scores
	}
	r, g := len(b.Shape), len(a.Shape)
	if r < 2 || g < r+1 {
		return false
	}
	for i := 0; i < r-2; i++ {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	kh, kw, sk := a.Shape[g-2], a.Shape[g-1], b.Shape[r-1]
	return kh.Known() && kw.Known() && sk.Known() && kh.Value*kw.Value == sk.Value
}

// sameDims reports whether tensors a and b have the same shape, every dim
// a size or a symbol.
func (p *Program) sameDims(a, b string) bool {
	at, bt := p.Types[a].Type, p.Types[b].Type
	if !at.RankKnown || !bt.RankKnown || len(at.Shape) != len(bt.Shape) {
		return false
	}
	for i, d := range at.Shape {
		if d != bt.Shape[i] || !d.Known() && d.Param == "" {
			return false
		}
	}
	return true
}

// softmaxOverLastAxis reports whether a Softmax normalizes over the last
// axis of its input (the keys).
func (p *Program) softmaxOverLastAxis(sm *ir.Node) bool {
	t := p.Types[sm.Outputs[0]].Type
	if !t.RankKnown || len(t.Shape) < 1 {
		return false
	}
	def := int64(-1)
	if p.Opsets[sm] < 13 {
		def = 1
	}
	axis, err := sm.AttrInt("axis", def)
	if err != nil {
		return false
	}
	a, err := ops.NormAxis(axis, len(t.Shape))
	return err == nil && a == len(t.Shape)-1
}

// scoresOperand picks, among a node's candidate operands, the one carrying
// the scores: the one a MatMul computes (scaled or not), else the last one
// of the node's output rank that is not a constant.
func (p *Program) scoresOperand(producer map[string]*ir.Node, n *ir.Node, cands []string) string {
	out := p.Types[n.Outputs[0]].Type
	best := cands[0]
	for _, c := range cands {
		v := p.Types[c]
		if v.Const != nil || !v.Type.RankKnown || !out.RankKnown || len(v.Type.Shape) != len(out.Shape) {
			continue
		}
		best = c
		if reachesScores(producer, c, 4) {
			return c
		}
	}
	return best
}

// reachesScores reports whether a tensor is a MatMul's or Einsum's output,
// or computed from one by the ops of the scores chain (scalings, Casts,
// masks, Reshapes), within depth steps back.
func reachesScores(producer map[string]*ir.Node, name string, depth int) bool {
	n := producer[name]
	switch {
	case n == nil || depth == 0:
		return false
	case n.OpType == "MatMul" || n.OpType == "Einsum":
		return true
	case n.OpType == "Div" || n.OpType == "Mul" || n.OpType == "Cast" || n.OpType == "Identity" ||
		n.OpType == "Where" || n.OpType == "Add" || n.OpType == "Sub" || n.OpType == "Reshape":
		for _, in := range n.Inputs {
			if reachesScores(producer, in, depth-1) {
				return true
			}
		}
	}
	return false
}

// constTensor returns constant name's tensor while it holds its data (nil
// for none, or for a weight released after compilation).
func (p *Program) constTensor(name string) *ir.Tensor {
	if c := p.Types[name].Const; c != nil && !c.Released() {
		return c
	}
	return nil
}

// otherInput returns the input of two-input node n that is not w.
func otherInput(n *ir.Node, w string) string {
	if n.Inputs[0] == w {
		return n.Inputs[1]
	}
	return n.Inputs[0]
}
