package session

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
)

// Extra outputs (Options.ExtraOutputs, Options.AttentionWeights) and
// profiles (RunOptions.Profile).

// withExtraOutputs returns m with the named intermediate values appended to
// its graph outputs (m itself when there are none).
func withExtraOutputs(m *ir.Model, prog *graph.Program, extra []string) (*ir.Model, error) {
	if len(extra) == 0 {
		return m, nil
	}
	g := *m.Graph
	g.Outputs = append([]*ir.ValueInfo(nil), g.Outputs...)
	seen := map[string]bool{}
	for _, vi := range g.Outputs {
		seen[vi.Name] = true
	}
	for _, name := range extra {
		v, ok := prog.Types[name]
		if !ok {
			return nil, fmt.Errorf("extra output %q: the graph has no value of that name", name)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		g.Outputs = append(g.Outputs, &ir.ValueInfo{Name: name, Type: v.Type})
	}
	rm := *m
	rm.Graph = &g
	return &rm, nil
}

// coreOutputs lists the values to expose for the attention cores: each
// one's weights, and its mask and key lengths unless they are graph inputs
// or constants.
func coreOutputs(m *ir.Model, prog *graph.Program, cores []graph.AttentionCore) []string {
	inputs := map[string]bool{}
	for _, vi := range m.Graph.Inputs {
		inputs[vi.Name] = true
	}
	var out []string
	for _, c := range cores {
		out = append(out, c.Weights)
		for _, v := range []string{c.Mask, c.KeyLengths} {
			if v != "" && !inputs[v] && prog.Types[v].Const == nil {
				out = append(out, v)
			}
		}
	}
	return out
}

// AttentionCores returns the attention cores whose weights (and computed
// masks) every Run returns besides the graph outputs, with
// Options.AttentionWeights; nil otherwise.
func (s *Session) AttentionCores() []graph.AttentionCore { return s.cores }

// Profile collects the timings of profiled runs (RunOptions.Profile).
type Profile struct {
	Runs []RunProfile
}

// RunProfile is one profiled run: the whole RunWith on the host, and each
// partition's run in order.
type RunProfile struct {
	plugins.Span
	Partitions []PartitionProfile
}

// PartitionProfile is one partition's part of a profiled run (RunProfile.Pid
// is the backend process that ran it).
type PartitionProfile struct {
	Index   int
	Backend string
	plugins.RunProfile
}
