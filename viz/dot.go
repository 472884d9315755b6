package viz

import (
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/graph"
	"github.com/attnrun/attnrun/runtime/session"
)

// DOTOptions choose what GraphDOT draws.
type DOTOptions struct {
	// Inputs are tensors of concrete shapes (zeros will do). With Plan,
	// the picture is the plan for them: the steps left after folding, each
	// fused region as one box, concrete shapes on the edges. Without Plan,
	// it is the whole graph with symbolic shapes, and Inputs (when set)
	// only say which fusions to draw as boxes.
	Inputs map[string]*ir.Tensor
	Plan   bool
	// Title is the picture's caption.
	Title string
}

// backendColors fill the partition clusters of the backends attnrun
// ships; others get one of otherColors by name.
var backendColors = map[string]string{session.CPU: "#dbe9f6", "gpu": "#d9f2d9"}

var otherColors = []string{"#fde8cf", "#eadcf5", "#f8d9e0", "#f5f0c8", "#d5f0ef"}

func backendColor(name string) string {
	if c, ok := backendColors[name]; ok {
		return c
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return otherColors[h.Sum32()%uint32(len(otherColors))]
}

// opColor fills a node by what its op does.
func opColor(n *ir.Node) string {
	switch {
	case n.Domain == ops.DomainAttnrun && n.OpType == ops.FusedAttentionOp:
		return "#ffd966"
	case n.Domain == ops.DomainAttnrun:
		return "#ffe9a8"
	}
	switch n.OpType {
	case "MatMul", "Gemm", "Einsum", "Conv":
		return "#f9cb9c"
	case "Softmax", "LayerNormalization", "Attention", "RMSNormalization":
		return "#ea9999"
	case "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Constant", "ConstantOfShape", "Cast", "Slice", "Range":
		return "#eeeeee"
	case "Reshape", "Transpose", "Split", "Expand", "Tile", "Identity":
		return "#cfe2f3"
	}
	return "#ffffff"
}

// dotQuote quotes s as a DOT string; \l ends a left-justified line.
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\l`)
	return `"` + r.Replace(s) + `"`
}

// spansPartitions reports whether a fused region's nodes lie in more than
// one partition.
func spansPartitions(f graph.Fusion, partOf map[*ir.Node]int) bool {
	for _, n := range f.Replaced {
		if partOf[n] != partOf[f.Replaced[0]] {
			return true
		}
	}
	return false
}

// unfuse puts back, in a plan's steps, the nodes of the regions given in
// place of their fused node, in graph order.
func unfuse(steps []*ir.Node, regions []graph.Fusion, index map[*ir.Node]int) []*ir.Node {
	if len(regions) == 0 {
		return steps
	}
	out := make([]*ir.Node, 0, len(steps))
	for _, n := range steps {
		var back []*ir.Node
		for _, f := range regions {
			if f.Node == n {
				back = append(append(back, f.Replaced...), f.Absorbed...)
			}
		}
		if back == nil {
			out = append(out, n)
			continue
		}
		slices.SortFunc(back, func(a, b *ir.Node) int { return index[a] - index[b] })
		out = append(out, back...)
	}
	return out
}

// GraphDOT writes s's model as Graphviz DOT: nodes labelled by op and name,
// each partition a cluster coloured by its backend, each fused region one
// box listing the nodes it replaces, edges labelled with shapes.
func GraphDOT(w io.Writer, s *session.Session, o DOTOptions) error {
	prog := s.Program()
	var fusions []graph.Fusion
	if o.Inputs != nil {
		var err error
		if fusions, err = prog.Fusions(o.Inputs); err != nil {
			return err
		}
	}
	parts := s.Partitions()
	partOf := map[*ir.Node]int{}
	for i, p := range parts {
		for _, n := range p.Nodes {
			partOf[n] = i
		}
	}
	// The host plans the whole graph; each backend compiles only its
	// partition, so a region spanning partitions is not fused there.
	var spanning []graph.Fusion
	kept := fusions[:0:0]
	for _, f := range fusions {
		if spansPartitions(f, partOf) {
			spanning = append(spanning, f)
		} else {
			kept = append(kept, f)
		}
	}
	fusions = kept
	fusedInto := map[*ir.Node]*graph.Fusion{}
	for i := range fusions {
		f := &fusions[i]
		for _, n := range append(append([]*ir.Node{}, f.Replaced...), f.Absorbed...) {
			fusedInto[n] = f
		}
	}
	nodes, types := prog.Order, prog.Types
	if o.Plan {
		if o.Inputs == nil {
			return fmt.Errorf("a plan needs inputs of concrete shapes")
		}
		var err error
		if nodes, err = prog.Steps(o.Inputs); err != nil {
			return err
		}
		if types, err = prog.Plan(o.Inputs); err != nil {
			return err
		}
		nodes = unfuse(nodes, spanning, prog.Index)
	}

	// The boxes to draw, in order: a node, or a fused region's node in
	// place of the nodes it replaces.
	type box struct {
		id   string
		node *ir.Node
		f    *graph.Fusion
		part int
	}
	var boxes []*box
	boxOf := map[*ir.Node]*box{}
	for _, n := range nodes {
		f := fusedInto[n]
		if f == nil {
			for i := range fusions {
				if fusions[i].Node == n {
					f = &fusions[i]
				}
			}
		}
		key, part := n, partOf[n]
		if f != nil {
			key = f.Node
			part = partOf[f.Replaced[len(f.Replaced)-1]]
		}
		if boxOf[key] != nil {
			continue
		}
		b := &box{id: fmt.Sprintf("n%d", len(boxes)), node: key, f: f, part: part}
		boxes = append(boxes, b)
		boxOf[key] = b
	}
	// A box's tensors: its node's, or in the graph (not the plan, where
	// they are steps of their own), those of every node its fusion runs
	// (the Reshapes around a FusedAttention, an Attention's lowering)
	// that it does not compute itself.
	tensorsOf := func(b *box) (ins, outs []string) {
		nodes := []*ir.Node{b.node}
		if b.f != nil && len(b.f.Nodes) > 0 && !o.Plan {
			nodes = b.f.Nodes
		}
		made := map[string]bool{}
		for _, n := range nodes {
			for _, in := range n.Inputs {
				if !made[in] {
					ins = append(ins, in)
				}
			}
			for _, out := range n.Outputs {
				made[out], outs = true, append(outs, out)
			}
		}
		return ins, outs
	}
	producer := map[string]*box{}
	for _, b := range boxes {
		_, outs := tensorsOf(b)
		for _, out := range outs {
			if out != "" {
				producer[out] = b
			}
		}
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "digraph attnrun {\n")
	fmt.Fprintf(&sb, "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, labelloc=t, label=%s];\n", dotQuote(o.Title))
	fmt.Fprintf(&sb, "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", fontname=\"Helvetica\", fontsize=10];\n")
	fmt.Fprintf(&sb, "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n")
	for i, p := range parts {
		fmt.Fprintf(&sb, "  subgraph cluster_p%d {\n", i)
		fmt.Fprintf(&sb, "    label=%s; style=\"filled,rounded\"; fillcolor=%s; color=\"#888888\";\n",
			dotQuote(fmt.Sprintf("partition %d · backend %s", i, p.Backend)), dotQuote(backendColor(p.Backend)))
		for _, b := range boxes {
			if b.part != i {
				continue
			}
			label := b.node.QualifiedOp() + "\n" + b.node.Label() + "\n"
			attrs := fmt.Sprintf("fillcolor=%s", dotQuote(opColor(b.node)))
			if b.f != nil {
				label += "replaces:\n"
				for _, r := range b.f.Replaced {
					label += "  " + r.OpType + " " + r.Label() + "\n"
				}
				if len(b.f.Absorbed) > 0 {
					label += "reads/writes through views, no copy:\n"
					for _, r := range b.f.Absorbed {
						label += "  " + r.OpType + " " + r.Label() + "\n"
					}
				}
				attrs += ", style=\"filled,bold\", penwidth=2"
			}
			fmt.Fprintf(&sb, "    %s [label=%s, %s];\n", b.id, dotQuote(label), attrs)
		}
		fmt.Fprintf(&sb, "  }\n")
	}
	shape := func(name string) string { return types[name].Type.String() }
	for _, vi := range s.Inputs() {
		fmt.Fprintf(&sb, "  %s [shape=ellipse, style=filled, fillcolor=\"#ffffff\", label=%s];\n", dotQuote("in:"+vi.Name), dotQuote("input "+vi.Name+"\n"+vi.Type.String()))
	}
	for _, vi := range s.Outputs() {
		fmt.Fprintf(&sb, "  %s [shape=ellipse, style=filled, fillcolor=\"#ffffff\", label=%s];\n", dotQuote("out:"+vi.Name), dotQuote("output "+vi.Name))
	}
	inputs := map[string]bool{}
	for _, vi := range s.Inputs() {
		inputs[vi.Name] = true
	}
	seen := map[string]bool{}
	edge := func(from, to, label string) {
		e := from + " -> " + to + " [label=" + dotQuote(label) + "]"
		if !seen[e] {
			seen[e] = true
			fmt.Fprintf(&sb, "  %s;\n", e)
		}
	}
	for _, b := range boxes {
		ins, _ := tensorsOf(b)
		for _, in := range ins {
			switch p := producer[in]; {
			case in == "":
			case p != nil && p != b:
				edge(p.id, b.id, shape(in))
			case p == nil && inputs[in]:
				edge(dotQuote("in:"+in), b.id, shape(in))
			}
		}
	}
	for _, vi := range s.Outputs() {
		if p := producer[vi.Name]; p != nil {
			edge(p.id, dotQuote("out:"+vi.Name), shape(vi.Name))
		} else if inputs[vi.Name] {
			edge(dotQuote("in:"+vi.Name), dotQuote("out:"+vi.Name), shape(vi.Name))
		}
	}
	fmt.Fprintf(&sb, "}\n")
	_, err := io.WriteString(w, sb.String())
	return err
}
