package session

import (
	"context"
	"fmt"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
)

// partition is a maximal run of consecutive nodes (in schedule order)
// assigned to one backend.
type partition struct {
	index int
	pool  *pool // its backend's instances
	// slot is the partition's index among its backend's partitions.
	slot    int
	model   *ir.Model
	nodes   []*ir.Node
	inputs  []string // values it reads from the run's environment
	outputs []string // values it writes into it
}

// queries describes the scheduled nodes for Capability.
func (s *Session) queries() []plugins.NodeQuery {
	qs := make([]plugins.NodeQuery, len(s.prog.Order))
	for i, n := range s.prog.Order {
		q := plugins.NodeQuery{Name: n.Label(), OpType: n.OpType, Domain: n.Domain, Opset: int64(s.prog.Opsets[n])}
		q.InputDTypes = make([]ir.DType, len(n.Inputs))
		for k, in := range n.Inputs {
			if in != "" {
				q.InputDTypes[k] = s.prog.Types[in].Type.DType
			}
		}
		qs[i] = q
	}
	return qs
}

// assignNodes asks the preferred backend about every node and sends the
// ones it refuses to the CPU backend.
func (s *Session) assignNodes(ctx context.Context, pref *pool) error {
	if len(s.prog.Order) == 0 {
		return nil
	}
	verdicts, err := pref.members[0].cur.p.Capability(ctx, s.queries())
	if err != nil {
		return fmt.Errorf("backend %q: capability: %w", pref.name, err)
	}
	for i, n := range s.prog.Order {
		v := verdicts[i]
		if v.Accepted {
			s.assign[n] = pref.name
			continue
		}
		reason := v.Reason
		if reason == "" {
			reason = "no reason given"
		}
		switch {
		case pref.name == CPU:
			return n.Errorf("backend %q does not take this node: %s", CPU, reason)
		case s.opts.NoFallback:
			return n.Errorf("backend %q does not take this node (%s) and fallback to %q is disabled", pref.name, reason, CPU)
		}
		s.opts.Logf("node %q (%s) falls back from backend %q to %q: %s", n.Label(), n.QualifiedOp(), pref.name, CPU, reason)
		s.assign[n] = CPU
	}
	needCPU := false
	for _, n := range s.prog.Order {
		needCPU = needCPU || (s.assign[n] == CPU && pref.name != CPU)
	}
	if !needCPU {
		return nil
	}
	cpu, err := s.backend(ctx, CPU)
	if err != nil {
		return err
	}
	verdicts, err = cpu.members[0].cur.p.Capability(ctx, s.queries())
	if err != nil {
		return fmt.Errorf("backend %q: capability: %w", CPU, err)
	}
	for i, n := range s.prog.Order {
		if s.assign[n] == CPU && !verdicts[i].Accepted {
			return n.Errorf("no backend takes this node: %q: %s", CPU, verdicts[i].Reason)
		}
	}
	return nil
}

// partition splits the schedule into maximal runs on one backend and builds
// each run's model.
func (s *Session) partition() {
	g := s.runModel.Graph
	order := s.prog.Order
	byName := map[string]*pool{}
	for _, pl := range s.pools {
		byName[pl.name] = pl
	}
	var runs [][]*ir.Node
	for i, n := range order {
		if i == 0 || s.assign[n] != s.assign[order[i-1]] {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], n)
	}
	graphOut := map[string]bool{}
	for _, o := range g.Outputs {
		graphOut[o.Name] = true
	}
	s.graphOut = graphOut
	s.lastUse = map[string]int{}
	for i, nodes := range runs {
		for _, n := range nodes {
			for _, in := range n.Inputs {
				s.lastUse[in] = i
			}
		}
	}
	for i, nodes := range runs {
		pl := byName[s.assign[nodes[0]]]
		p := &partition{index: i, pool: pl, slot: len(pl.parts), nodes: nodes}
		if len(runs) == 1 {
			p.model = s.runModel
			for _, vi := range g.Inputs {
				p.inputs = append(p.inputs, vi.Name)
			}
			for _, vi := range g.Outputs {
				if s.isNodeOutput(vi.Name) {
					p.outputs = append(p.outputs, vi.Name)
				}
			}
		} else {
			p.model = s.subModel(i, nodes, graphOut)
			for _, vi := range p.model.Graph.Inputs {
				p.inputs = append(p.inputs, vi.Name)
			}
			for _, vi := range p.model.Graph.Outputs {
				p.outputs = append(p.outputs, vi.Name)
			}
		}
		pl.parts = append(pl.parts, p)
		s.parts = append(s.parts, p)
	}
}

// isNodeOutput reports whether a value is produced by a node (rather than
// being a graph input or initializer passed straight through).
func (s *Session) isNodeOutput(name string) bool {
	for _, n := range s.prog.Order {
		for _, o := range n.Outputs {
			if o == name {
				return true
			}
		}
	}
	return false
}

// subModel builds the model of partition i: its nodes, the initializers they
// read, its boundary inputs (values produced earlier or graph inputs) and
// outputs (values read by later partitions or graph outputs), typed with the
// host's inferred types.
func (s *Session) subModel(i int, nodes []*ir.Node, graphOut map[string]bool) *ir.Model {
	g := s.model.Graph
	produced := map[string]bool{}
	for _, n := range nodes {
		for _, o := range n.Outputs {
			if o != "" {
				produced[o] = true
			}
		}
	}
	sg := &ir.Graph{Name: fmt.Sprintf("%s/partition%d", g.Name, i), Nodes: nodes, Initializers: map[string]*ir.Tensor{}}
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, in := range n.Inputs {
			if in == "" || produced[in] || seen[in] {
				continue
			}
			seen[in] = true
			if t, ok := g.Initializers[in]; ok {
				sg.Initializers[in] = t
				sg.InitializerOrder = append(sg.InitializerOrder, in)
				continue
			}
			sg.Inputs = append(sg.Inputs, &ir.ValueInfo{Name: in, Type: s.typeOf(in)})
		}
	}
	for _, n := range nodes {
		for _, o := range n.Outputs {
			if o == "" {
				continue
			}
			if graphOut[o] || s.lastUse[o] > i {
				sg.Outputs = append(sg.Outputs, &ir.ValueInfo{Name: o, Type: s.typeOf(o)})
			}
		}
	}
	return &ir.Model{
		IRVersion: s.model.IRVersion, ProducerName: s.model.ProducerName, ProducerVersion: s.model.ProducerVersion,
		Domain: s.model.Domain, ModelVersion: s.model.ModelVersion, Opsets: s.model.Opsets, Graph: sg,
	}
}

// typeOf is the host's inferred type of a value.
func (s *Session) typeOf(name string) ir.TypeInfo {
	return s.prog.Types[name].Type
}
