package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/session"
	"github.com/attnrun/attnrun/viz"
)

// writeAttentionMaps writes the heat maps of a run's attention weights
// (`attnrun run --attention-maps DIR`): outs holds the weights and computed
// masks the session returned besides the graph outputs; prof is the run's
// profile, which tells the cores that ran fused from those that did not.
// Notes go to note.
func writeAttentionMaps(w, note io.Writer, s *session.Session, model string, inputs, outs map[string]*ir.Tensor, dir string, prof *session.Profile) error {
	cores := s.AttentionCores()
	if len(cores) == 0 {
		return fmt.Errorf("--attention-maps: %s has no attention core (a Softmax over the last axis whose output feeds a MatMul as its first operand)", model)
	}
	var cw []viz.CoreWeights
	for _, c := range cores {
		wt := outs[c.Weights]
		if wt == nil {
			return fmt.Errorf("--attention-maps: the backend returned no weights %q for core %q", c.Weights, c.Softmax.Label())
		}
		core := viz.CoreWeights{Name: c.Softmax.Label(), Weights: wt, MaskKind: c.MaskKind, MaskPadKeys: c.Attention != nil, Causal: c.Causal}
		if c.PastKey != "" {
			pk := inputs[c.PastKey]
			if pk == nil {
				pk = outs[c.PastKey]
			}
			if pk != nil && len(pk.Shape) >= 2 {
				core.CausalOffset = pk.Shape[len(pk.Shape)-2]
			}
		}
		for _, n := range c.Nodes {
			core.Nodes = append(core.Nodes, n.Label())
			core.Ops = append(core.Ops, n.OpType)
		}
		for _, v := range []struct {
			name, what string
			into       **ir.Tensor
		}{{c.Mask, "mask", &core.Mask}, {c.KeyLengths, "key lengths", &core.KeyLengths}} {
			if v.name == "" {
				continue
			}
			t := outs[v.name]
			if t == nil {
				t = inputs[v.name]
			}
			if t == nil {
				var err error
				if t, err = s.Program().Const(v.name); err != nil {
					return fmt.Errorf("--attention-maps: core %q: its %s %q: %w", c.Softmax.Label(), v.what, v.name, err)
				}
			}
			if t == nil {
				return fmt.Errorf("--attention-maps: core %q: no value for its %s %q", c.Softmax.Label(), v.what, v.name)
			}
			*v.into = t
		}
		cw = append(cw, core)
	}
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	var shapes []string
	for _, n := range names {
		shapes = append(shapes, fmt.Sprintf("%s [%s]", n, ir.ShapeString(inputs[n].Shape)))
	}
	title := fmt.Sprintf("%s — inputs %s — %s — %s", model, strings.Join(shapes, ", "), backendSummary(s), time.Now().Format("2006-01-02 15:04 MST"))
	files, err := viz.WriteAttentionMaps(dir, title, cw)
	if err != nil {
		return fmt.Errorf("--attention-maps: %w", err)
	}
	maps := 0
	for _, f := range files {
		maps += len(f.Maps)
	}
	fmt.Fprintf(w, "attention maps: %d cores, %d heat maps, weights as .npy: %s\n", len(files), maps, filepath.Join(dir, "index.html"))
	// No silent change of kernel: say how the weights were computed. A
	// core ran unfused when its Softmax was a step of the run.
	ran := map[string]bool{}
	timed := false
	for _, r := range prof.Runs {
		for _, p := range r.Partitions {
			timed = timed || len(p.Steps) > 0
			for _, st := range p.Steps {
				ran[st.Name] = true
			}
		}
	}
	var unfused []string
	chains, nodes := 0, 0
	for _, c := range cores {
		switch {
		case c.Attention != nil:
			nodes++
		case ran[c.Softmax.Label()]:
			unfused = append(unfused, c.Softmax.Label())
		default:
			chains++
		}
	}
	var by []string
	if chains > 0 {
		by = append(by, fmt.Sprintf("the FusedAttention kernel for %d core(s)", chains))
	}
	if len(unfused) > 0 {
		by = append(by, fmt.Sprintf("the Softmax of %d core(s) that ran unfused (%s)", len(unfused), strings.Join(unfused, ", ")))
	}
	if nodes > 0 {
		by = append(by, fmt.Sprintf("%d Attention node(s) as their qk_matmul_output (mode 3, through the FusedAttention kernel)", nodes))
	}
	switch {
	case !timed && chains+len(unfused) > 0:
		fmt.Fprintf(note, "attnrun: --attention-maps: the backend does not report its steps: whether the cores ran fused is not known\n")
	default:
		fmt.Fprintf(note, "attnrun: --attention-maps: weights written by %s\n", strings.Join(by, "; "))
	}
	return nil
}
