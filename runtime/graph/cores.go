package graph

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// AttentionCore is one attention computation of the graph whose weights
// softmax(scale·QKᵀ masked) can be shown: a Softmax over the last axis
// whose output feeds a MatMul as its first operand (P·V). The same chain is
// what the attention fusion (fuse.go) replaces by one FusedAttention step.
type AttentionCore struct {
	// Weights names the tensor holding the weights, [..., Sq, Sk]: the
	// Softmax's output.
	Weights string
	// Softmax computes the weights; Output is the MatMul reading them.
	Softmax, Output *ir.Node
	// Nodes is the chain from the scores MatMul (when it was found) to
	// Output, in execution order.
	Nodes []*ir.Node
	// Mask names the tensor masking the scores ("" when the chain has no
	// mask); MaskKind says how (ops.MaskBoolTrueMasks,
	// ops.MaskBoolFalseMasks or ops.MaskAdditive), as in FusedAttention.
	Mask, MaskKind string
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
		if sm.OpType != "Softmax" || !isDefaultDomain(sm) || len(sm.Inputs) != 1 || len(sm.Outputs) != 1 || !p.softmaxOverLastAxis(sm) {
			continue
		}
		var pv *ir.Node
		for _, r := range readers[sm.Outputs[0]] {
			if r.OpType == "MatMul" && isDefaultDomain(r) && len(r.Inputs) == 2 && r.Inputs[0] == sm.Outputs[0] {
				pv = r
				break
			}
		}
		if pv == nil {
			continue
		}
		c := AttentionCore{Weights: sm.Outputs[0], Softmax: sm, Output: pv}
		chain := []*ir.Node{pv, sm}
		x := sm.Inputs[0]
	walk:
		for len(chain) < 16 {
			n := producer[x]
			if n == nil || !isDefaultDomain(n) {
				break
			}
			switch n.OpType {
			case "MatMul":
				chain = append(chain, n)
				break walk
			case "Div", "Mul":
				chain = append(chain, n)
				x = p.scoresOperand(producer, n, n.Inputs)
			case "Where":
				if c.Mask != "" || len(n.Inputs) != 3 || p.Types[n.Inputs[0]].Type.DType != ir.Bool {
					break walk
				}
				chain = append(chain, n)
				c.Mask = n.Inputs[0]
				if x = p.scoresOperand(producer, n, n.Inputs[1:]); x == n.Inputs[2] {
					c.MaskKind = ops.MaskBoolTrueMasks
				} else {
					c.MaskKind = ops.MaskBoolFalseMasks
				}
			case "Add":
				if c.Mask != "" || len(n.Inputs) != 2 {
					break walk
				}
				chain = append(chain, n)
				x = p.scoresOperand(producer, n, n.Inputs)
				c.Mask, c.MaskKind = n.Inputs[0], ops.MaskAdditive
				if x == n.Inputs[0] {
					c.Mask = n.Inputs[1]
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
// the scores: the one produced by a MatMul or a scaling (Div, Mul), else
// the last one of the node's output rank that is not a constant.
func (p *Program) scoresOperand(producer map[string]*ir.Node, n *ir.Node, cands []string) string {
	out := p.Types[n.Outputs[0]].Type
	best := cands[0]
	for _, c := range cands {
		v := p.Types[c]
		if v.Const != nil || !v.Type.RankKnown || !out.RankKnown || len(v.Type.Shape) != len(out.Shape) {
			continue
		}
		best = c
		if pr := producer[c]; pr != nil && (pr.OpType == "MatMul" || pr.OpType == "Div" || pr.OpType == "Mul") {
			return c
		}
	}
	return best
}
