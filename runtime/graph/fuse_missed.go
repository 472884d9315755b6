package graph

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// Attention left unfused, and why.
//
// An attention core that the matcher (fuse_chain.go) does not take runs
// node by node: right, but it builds the [.., Sq, Sk] scores and weights
// and runs several passes over them. Program.MissedAttention lists those
// cores with the reason the matcher gave up, so that `attnrun inspect`
// can say what in the export keeps its attention slow (talking heads'
// einsum across the heads' scores, a float64 softmax, a softmax over the
// queries), and Options.Logf hears of each once.
//
// The matcher is a backtracking walk: at an Add it tries either operand as
// the scores, a mask as bool or additive. Each place where it gives up
// records a reason with the length of the chain it had read (fail); the
// reason kept for a product is the one from the longest chain, the place
// the walk got furthest, which is where the export departs from what the
// fused op computes.

// MissedAttention is one attention core of the graph (a Softmax whose
// output, through no-op nodes, Reshapes or a Where, or through one other
// node, is the first operand of a MatMul or an operand of an Einsum: the
// product with V, see probabilitiesProduct and productThroughOne; over any
// axis) that a plan runs node by node.
type MissedAttention struct {
	// Softmax is the core's Softmax node; Product the MatMul or Einsum
	// that multiplies its weights by V.
	Softmax, Product *ir.Node
	// Reason says why the fusion did not take it.
	Reason string
}

// attnMiss is the furthest the matcher got on one product: the number of
// chain steps it had read, and why it stopped there.
type attnMiss struct {
	depth  int
	reason string
}

// fail records why the matcher stops after reading depth steps of a chain,
// unless an attempt on the same product got further, and returns false.
func (f *fuser) fail(depth int, format string, args ...any) bool {
	if f.miss.reason == "" || depth > f.miss.depth {
		f.miss = attnMiss{depth: depth, reason: fmt.Sprintf(format, args...)}
	}
	return false
}

// notInternal says why tensor name cannot be part of a fused chain
// (internal is false): it is a graph input or constant, a graph output,
// read by other nodes too, or computed by a step another fusion took.
func (f *fuser) notInternal(name string) string {
	i, ok := f.producer[name]
	switch {
	case !ok:
		return fmt.Sprintf("%q is a graph input or a constant, not a product of Q and K", name)
	case f.removed[i]:
		return fmt.Sprintf("%q is computed inside another fusion", name)
	case f.uses[name] >= graphOutputUse:
		return fmt.Sprintf("%q is a graph output, and the fused op does not write the scores", name)
	case f.uses[name] > 1:
		return fmt.Sprintf("%q is read by %d nodes, and the fused op does not write the scores", name, f.uses[name])
	}
	n := f.pl.steps[i].node
	return fmt.Sprintf("%q is computed by node %q (%s), outside the default domain", name, n.Label(), n.QualifiedOp())
}

// MissedAttention returns the attention cores that the plan for the given
// inputs' shapes runs node by node (building and caching the plan), each
// with the reason the fusion gave. Cores the plan folds (constant inputs)
// or no longer computes are not listed.
func (p *Program) MissedAttention(inputs map[string]*ir.Tensor) ([]MissedAttention, error) {
	pl, err := p.planFor(inputs)
	if err != nil {
		return nil, err
	}
	defer p.donePlan(pl)
	return p.missedIn(pl), nil
}

// newMisses returns the cores new plan pl runs unfused that no plan before
// it did, for Options.Logf (logMisses), and marks them told; p.mu is held.
// With NoFuse, none: every core is unfused by request.
func (p *Program) newMisses(pl *plan) []MissedAttention {
	if p.opts.Logf == nil || p.opts.NoFuse {
		return nil
	}
	var out []MissedAttention
	for _, c := range p.missedIn(pl) {
		if p.missNoted[c.Softmax] {
			continue
		}
		if p.missNoted == nil {
			p.missNoted = map[*ir.Node]bool{}
		}
		p.missNoted[c.Softmax] = true
		out = append(out, c)
	}
	return out
}

// logMisses tells Options.Logf about cores newMisses found, outside p.mu
// (a slow log must not hold up other plans and runs).
func (p *Program) logMisses(missed []MissedAttention) {
	for _, c := range missed {
		p.opts.Logf("attention at node %q (Softmax) → %q (%s) runs unfused, node by node: %s", c.Softmax.Label(), c.Product.Label(), c.Product.OpType, c.Reason)
	}
}

// missedIn lists the attention cores plan pl runs node by node
// (MissedAttention).
func (p *Program) missedIn(pl *plan) []MissedAttention {
	running := map[*ir.Node]bool{}
	for _, st := range pl.steps {
		running[st.node] = true
	}
	readers := map[string][]*ir.Node{}
	for _, n := range p.Order {
		for _, in := range n.Inputs {
			readers[in] = append(readers[in], n)
		}
	}
	var out []MissedAttention
	for _, sm := range p.Order {
		if sm.OpType != "Softmax" || !isDefaultDomain(sm) || len(sm.Outputs) != 1 || !running[sm] {
			continue // fused, folded or dead
		}
		pv, _ := p.probabilitiesProduct(readers, sm.Outputs[0])
		if pv == nil {
			pv = p.productThroughOne(readers, sm.Outputs[0], pl)
		}
		if pv == nil {
			continue
		}
		c := MissedAttention{Softmax: sm, Product: pv}
		switch r := pl.attnMisses[c.Product]; {
		case p.opts.NoFuse:
			c.Reason = "graph rewrites are off: --no-fuse"
		case r != "":
			c.Reason = r
		default:
			c.Reason = "the product with V was not tried as an attention chain"
		}
		out = append(out, c)
	}
	return out
}

// productThroughOne finds a product with V that reads the softmax output w
// (after no-op Casts) through one node the fused op does not take (transformers' BERT
// attention_probs * head_mask, a scale or a transpose of the weights), so
// that the core is listed with the reason the matcher gave for that
// product: the MatMul reading the node's output as its first operand, or
// an Einsum reading it, that plan pl tried and did not fuse. nil when none.
func (p *Program) productThroughOne(readers map[string][]*ir.Node, w string, pl *plan) *ir.Node {
	for _, r := range readers[w] {
		if !isDefaultDomain(r) || len(r.Outputs) != 1 {
			continue
		}
		if r.OpType == "Cast" || r.OpType == "Identity" { // no-op Casts first (a softmax's dtype=)
			if pv := p.productThroughOne(readers, r.Outputs[0], pl); pv != nil {
				return pv
			}
		}
		for _, pv := range readers[r.Outputs[0]] {
			if !isDefaultDomain(pv) || len(pv.Inputs) != 2 || pl.attnMisses[pv] == "" && !p.opts.NoFuse {
				continue
			}
			if pv.OpType == "MatMul" && pv.Inputs[0] == r.Outputs[0] || pv.OpType == "Einsum" {
				return pv
			}
		}
	}
	return nil
}

// noteMiss records why the attention fusion did not take product n.
func (pl *plan) noteMiss(n *ir.Node, reason string) {
	if pl.attnMisses == nil {
		pl.attnMisses = map[*ir.Node]string{}
	}
	pl.attnMisses[n] = reason
}
