package ir

import (
	"errors"
	"fmt"
)

// ErrCycle is returned (wrapped) when a graph is not acyclic.
var ErrCycle = errors.New("graph has a cycle")

// Producers maps every tensor name produced by a node to that node. It
// fails when two nodes write the same tensor, or a node overwrites a graph
// input or initializer.
func (g *Graph) Producers() (map[string]*Node, error) {
	prod := make(map[string]*Node, len(g.Nodes))
	defined := g.sources()
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o == "" {
				continue
			}
			if p, ok := prod[o]; ok {
				return nil, n.Errorf("output %q is already produced by node %q (%s)", o, p.Label(), p.QualifiedOp())
			}
			if defined[o] {
				return nil, n.Errorf("output %q overwrites a graph input or initializer", o)
			}
			prod[o] = n
		}
	}
	return prod, nil
}

// sources returns the names available before any node runs.
func (g *Graph) sources() map[string]bool {
	s := make(map[string]bool, len(g.Inputs)+len(g.Initializers))
	for _, in := range g.Inputs {
		s[in.Name] = true
	}
	for name := range g.Initializers {
		s[name] = true
	}
	return s
}

// Validate checks the graph's structure: every tensor is produced once or is
// a graph input or initializer, every node input is defined, every graph
// output is produced, and there is no cycle. Subgraphs in attributes
// (If/Loop bodies) are not checked: no supported op has one.
func (g *Graph) Validate() error {
	_, err := g.Schedule()
	return err
}

// Schedule returns the nodes in a topological order (stable: among ready
// nodes, file order wins) after validating the graph as Validate describes.
func (g *Graph) Schedule() ([]*Node, error) {
	prod, err := g.Producers()
	if err != nil {
		return nil, err
	}
	src := g.sources()
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in == "" || src[in] {
				continue
			}
			if _, ok := prod[in]; !ok {
				return nil, n.Errorf("input %q is not a graph input, an initializer, or any node's output", in)
			}
		}
	}
	for _, out := range g.Outputs {
		if _, ok := prod[out.Name]; !ok && !src[out.Name] {
			return nil, fmt.Errorf("graph output %q is produced by no node", out.Name)
		}
	}
	// Kahn's algorithm over node indices.
	index := make(map[*Node]int, len(g.Nodes))
	for i, n := range g.Nodes {
		index[n] = i
	}
	pending := make([]int, len(g.Nodes))
	consumers := make([][]int, len(g.Nodes))
	for i, n := range g.Nodes {
		seen := map[int]bool{}
		for _, in := range n.Inputs {
			if p, ok := prod[in]; ok && in != "" && !src[in] {
				j := index[p]
				if !seen[j] {
					seen[j] = true
					pending[i]++
					consumers[j] = append(consumers[j], i)
				}
			}
		}
	}
	order := make([]*Node, 0, len(g.Nodes))
	ready := make([]int, 0, len(g.Nodes))
	for i := range g.Nodes {
		if pending[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		// pick the smallest index to keep file order where possible
		best := 0
		for k := range ready {
			if ready[k] < ready[best] {
				best = k
			}
		}
		i := ready[best]
		ready[best] = ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		order = append(order, g.Nodes[i])
		for _, c := range consumers[i] {
			pending[c]--
			if pending[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if len(order) != len(g.Nodes) {
		for i, n := range g.Nodes {
			if pending[i] > 0 {
				return nil, n.Errorf("%w: this node depends on its own output", ErrCycle)
			}
		}
		return nil, ErrCycle
	}
	return order, nil
}
