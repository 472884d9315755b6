package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/session"
	"github.com/attnrun/attnrun/viz"
)

// defaultInspectDim is the size given to unbound symbolic dims when inspect
// builds a plan to show fusions.
const defaultInspectDim = 8

// inspectInputBudget bounds the bytes of the zero input tensors inspect
// builds to plan the model and show its fusions.
const inspectInputBudget = 64 << 20

func newInspectCmd(g *globalFlags) *cobra.Command {
	var dimFlags []string
	var dot bool
	cmd := &cobra.Command{
		Use:   "inspect MODEL.onnx",
		Short: "Show a model: metadata, inputs/outputs, ops, notes, backend per node, fusions",
		Long: `inspect opens a model on its backends, without running it, and prints its
metadata (IR version, opsets, producer), inputs and outputs with symbolic
shapes (and the output types inferred), initializers, an op histogram, notes
(what attnrun runs differently from the file's letter), the partitions and the
backend of each, the fusions of a plan, an "attention:" section for ONNX
Attention nodes (the kernel each runs as, or why not), and every node in
execution order with its backend and output types.

Fusions are shown for a plan at concrete shapes: each symbolic dim is 8 unless
--dim binds it. --no-fuse shows the graph unfused. --dot prints Graphviz DOT
instead; with --dim, the plan for those shapes.`,
		Example: `  attnrun inspect models/s000_causal/model.onnx
  attnrun inspect models/llama_block_gqa/model.onnx --dim batch=1 --dim seq=16 --dim past=48
  attnrun inspect models/s000_causal/model.onnx --dot --dim batch=2 --dim seq=16 | dot -Tpng -o plan.png`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dims, err := parseDims(dimFlags)
			if err != nil {
				return err
			}
			s, err := g.open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer g.close(s)
			if err := checkDimNames(dims, s.Inputs()); err != nil {
				return err
			}
			if dot {
				return printDOT(cmd.OutOrStdout(), args[0], s, dims)
			}
			printInspect(cmd.OutOrStdout(), args[0], s, dims, !g.noFuse)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&dimFlags, "dim", nil, fmt.Sprintf("bind a symbolic dim when showing fusions, e.g. --dim seq=128 (default %d); with --dot, draw the plan for those shapes", defaultInspectDim))
	cmd.Flags().BoolVar(&dot, "dot", false, "print the graph as Graphviz DOT (render with: dot -Tpng): partitions as clusters coloured by backend, fused nodes as one box, shapes on the edges")
	return cmd
}

func printInspect(w io.Writer, path string, s *session.Session, dims map[string]int, fuse bool) {
	m := s.Model()
	prog := s.Program()
	fmt.Fprintf(w, "model:    %s\n", path)
	fmt.Fprintf(w, "ir:       version %d\n", m.IRVersion)
	var opsets []string
	for d, v := range m.Opsets {
		if d == "" {
			d = "ai.onnx"
		}
		opsets = append(opsets, fmt.Sprintf("%s %d", d, v))
	}
	sort.Strings(opsets)
	fmt.Fprintf(w, "opsets:   %s\n", strings.Join(opsets, ", "))
	fmt.Fprintf(w, "producer: %s %s\n", m.ProducerName, m.ProducerVersion)
	fmt.Fprintln(w, "inputs:")
	for _, vi := range s.Inputs() {
		fmt.Fprintf(w, "  %-12s %v\n", vi.Name, vi.Type)
	}
	fmt.Fprintln(w, "outputs:")
	for _, vi := range s.Outputs() {
		inferred := prog.Types[vi.Name].Type
		fmt.Fprintf(w, "  %-12s %v (inferred %v)\n", vi.Name, vi.Type, inferred)
	}
	var weightBytes int64
	for _, t := range m.Graph.Initializers {
		if t.Released() { // loaded by reference: in its file
			weightBytes += t.External.Length
		} else {
			weightBytes += t.Bytes()
		}
	}
	fmt.Fprintf(w, "weights:  %d initializers, %d bytes\n", len(m.Graph.Initializers), weightBytes)

	hist := map[string]int{}
	for _, n := range prog.Order {
		hist[n.QualifiedOp()]++
	}
	keys := make([]string, 0, len(hist))
	for k := range hist {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if hist[keys[i]] != hist[keys[j]] {
			return hist[keys[i]] > hist[keys[j]]
		}
		return keys[i] < keys[j]
	})
	fmt.Fprintf(w, "ops:      %d nodes:", len(prog.Order))
	for _, k := range keys {
		fmt.Fprintf(w, " %s×%d", k, hist[k])
	}
	fmt.Fprintln(w)

	if notes := modelNotes(s); len(notes) > 0 {
		fmt.Fprintln(w, "notes:")
		for _, n := range notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}

	fmt.Fprintln(w, "partitions:")
	for i, p := range s.Partitions() {
		fmt.Fprintf(w, "  %d: backend %s, %d nodes, inputs %s, outputs %s\n", i, p.Backend, len(p.Nodes), strings.Join(p.Inputs, " "), strings.Join(p.Outputs, " "))
	}

	if fuse {
		printFusions(w, s, dims)
	}
	printAttentionKernels(w, s, dims)

	assign := s.Assignments()
	fmt.Fprintln(w, "nodes (execution order):")
	for i, n := range prog.Order {
		var outs []string
		for _, o := range n.Outputs {
			if o != "" {
				outs = append(outs, prog.Types[o].Type.String())
			}
		}
		fmt.Fprintf(w, "  %3d %-6s %-22s %-30s → %s\n", i, assign[n], n.QualifiedOp(), n.Label(), strings.Join(outs, ", "))
	}
}

// modelNotes lists what a user should know about how attnrun runs the model.
func modelNotes(s *session.Session) []string {
	prog := s.Program()
	var notes []string
	for _, n := range prog.Order {
		if n.OpType == "Add" && n.Domain == "" && len(n.Inputs) == 2 && prog.Types[n.Inputs[0]].Type.DType == ir.Bool {
			notes = append(notes, fmt.Sprintf("node %q (Add) adds bool tensors: ONNX defines no Add on bool and ONNX Runtime refuses to load this model; attnrun runs it as logical or, PyTorch's meaning of bool + bool", n.Label()))
		}
	}
	return notes
}

// printFusions shows the attention fusions made for one set of input
// shapes; under each FusedAttention made from primitive ops, what it
// computes (an ONNX Attention node's is in the attention: section).
func printFusions(w io.Writer, s *session.Session, dims map[string]int) {
	inputs, shapes, ok := planInputs(w, "fusions: ", s, dims)
	if !ok {
		return
	}
	fusions, err := s.Program().Fusions(inputs)
	if err != nil {
		fmt.Fprintf(w, "fusions:  not shown: %v\n", err)
		return
	}
	fmt.Fprintf(w, "fusions:  %d (at %s; --no-fuse turns them off)\n", len(fusions), strings.Join(shapes, " "))
	for _, f := range fusions {
		var replaced []string
		for _, n := range f.Replaced {
			replaced = append(replaced, fmt.Sprintf("%s(%s)", n.OpType, n.Label()))
		}
		label := f.Node.Label()
		if a, _ := f.Node.AttrString("approximate", ""); f.Node.OpType == "Gelu" && a != "" {
			label += " (approximate " + a + ")"
		}
		if f.Node.OpType == ops.FusedMatMulOp {
			label += fusedMatMulEpilogue(f.Node)
		}
		fmt.Fprintf(w, "  %s replaces %s\n", label, strings.Join(replaced, " "))
		if f.Node.OpType != ops.FusedAttentionOp || len(f.Replaced) == 1 && f.Replaced[0].OpType == "Attention" {
			continue // an ONNX Attention node's is in the attention: section
		}
		fmt.Fprintf(w, "      streaming: %s\n", describeFusedAttention(f.Node))
		when := "before" // the steps the fusion adds around its node
		for _, n := range f.Nodes {
			if n == f.Node {
				when = "after"
				continue
			}
			fmt.Fprintf(w, "      runs %s it %s(%s): %s\n", when, n.OpType, n.Label(), n.Doc)
		}
	}
	missed, err := s.Program().MissedAttention(inputs)
	if err != nil || len(missed) == 0 {
		return
	}
	fmt.Fprintf(w, "unfused:  %d attention core(s) run node by node, building the scores and weights in full:\n", len(missed))
	for _, m := range missed {
		fmt.Fprintf(w, "  %s(%s) → %s(%s): %s\n", m.Softmax.OpType, m.Softmax.Label(), m.Product.OpType, m.Product.Label(), m.Reason)
	}
}

// fusedMatMulEpilogue describes what a FusedMatMul's GEMM does in its
// epilogue (ops/matmul_epilogue.go), in the order it does it:
// " (activation Silu, gate g, residual x)", or "" for nothing.
func fusedMatMulEpilogue(n *ir.Node) string {
	var parts []string
	if a, _ := n.AttrString("activation", ""); a != "" {
		parts = append(parts, "activation "+a)
	}
	if g := n.Input(4); g != "" {
		parts = append(parts, "gate "+g)
	}
	if r := n.Input(3); r != "" {
		parts = append(parts, "residual "+r)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// printAttentionKernels shows, for each ONNX Attention node, the kernel it
// runs with: the FusedAttention step the plan-time rewrite made (and what
// it computes), or why the node runs its own kernel.
func printAttentionKernels(w io.Writer, s *session.Session, dims map[string]int) {
	count := 0
	for _, n := range s.Program().Order {
		if n.OpType == "Attention" && (n.Domain == "" || n.Domain == "ai.onnx") {
			count++
		}
	}
	if count == 0 {
		return
	}
	const label = "attention:"
	inputs, shapes, ok := planInputs(w, label, s, dims)
	if !ok {
		return
	}
	kernels, err := s.Program().AttentionKernels(inputs)
	if err != nil {
		fmt.Fprintf(w, "%s not shown: %v\n", label, err)
		return
	}
	fmt.Fprintf(w, "%s %d Attention node(s) (at %s)\n", label, len(kernels), strings.Join(shapes, " "))
	fusions, _ := s.Program().Fusions(inputs)
	for _, k := range kernels {
		if k.Fused == nil {
			fmt.Fprintf(w, "  %s: not rewritten (%s); the Attention kernel runs its lowering, the same streaming FusedAttention kernel\n", k.Node.Label(), k.Reason)
			continue
		}
		fmt.Fprintf(w, "  %s: com.attnrun:FusedAttention %q, streaming: %s\n", k.Node.Label(), k.Fused.Label(), describeFusedAttention(k.Fused))
		for _, f := range fusions {
			if f.Node != k.Fused {
				continue
			}
			hist := map[string]int{}
			var order []string
			for _, n := range f.Nodes {
				if n == f.Node {
					continue
				}
				if hist[n.OpType] == 0 {
					order = append(order, n.OpType)
				}
				hist[n.OpType]++
			}
			var extra []string
			for _, op := range order {
				extra = append(extra, fmt.Sprintf("%s×%d", op, hist[op]))
			}
			if len(extra) > 0 {
				fmt.Fprintf(w, "      with %s around it\n", strings.Join(extra, " "))
			}
			var absorbed []string
			for _, n := range f.Absorbed {
				absorbed = append(absorbed, fmt.Sprintf("%s(%s)", n.OpType, n.Label()))
			}
			if len(absorbed) > 0 {
				fmt.Fprintf(w, "      reads through %s (not run)\n", strings.Join(absorbed, " "))
			}
		}
	}
}

// describeFusedAttention says in words what a FusedAttention node computes.
func describeFusedAttention(n *ir.Node) string {
	var parts []string
	scale, _ := n.AttrFloat("scale", 1)
	parts = append(parts, fmt.Sprintf("scale %.6g", scale))
	if g, _ := n.AttrInt("kv_group", 1); g > 1 {
		parts = append(parts, fmt.Sprintf("grouped KV heads (%d query heads per KV head)", g))
	}
	if c, _ := n.AttrFloat("softcap", 0); c > 0 {
		parts = append(parts, fmt.Sprintf("softcap %g", c))
	}
	if c, _ := n.AttrInt("causal", 0); c == 1 {
		off, _ := n.AttrInt("causal_offset", 0)
		if f, _ := n.AttrFloat("causal_fill", float32(math.Inf(-1))); !math.IsInf(float64(f), -1) {
			parts = append(parts, fmt.Sprintf("causal (offset %d; cut for the fill %g, checked per row)", off, f))
		} else {
			parts = append(parts, fmt.Sprintf("causal (offset %d)", off))
		}
	}
	if u, _ := n.AttrInt("masked_rows_uniform", 0); u == 1 {
		parts = append(parts, "rows that see no key: mean of V")
	}
	if z, _ := n.AttrInt("masked_rows_zero", 0); z == 1 {
		parts = append(parts, "rows that see no key: zeros (weights zeroed after the softmax)")
	}
	if kind, _ := n.AttrString("mask_kind", ""); kind != "" && len(n.Inputs) > 3 && n.Inputs[3] != "" {
		m := kind + " mask " + n.Inputs[3]
		if p, _ := n.AttrInt("mask_pad_keys", 0); p == 1 {
			m += " (keys past it padded)"
		}
		parts = append(parts, m)
	}
	if len(n.Inputs) > 4 && n.Inputs[4] != "" {
		parts = append(parts, "key lengths "+n.Inputs[4])
	}
	if len(n.Inputs) > 5 && n.Inputs[5] != "" {
		when := "after"
		if f, _ := n.AttrInt("bias_first", 0); f == 1 {
			when = "before"
		}
		how := ""
		if d, _ := n.AttrInt("bias_diagonals", 0); d == 1 {
			how = " (by its diagonals: a term of j − i)"
		}
		if kw, _ := n.AttrInt("bias_grid", 0); kw > 0 {
			how = fmt.Sprintf(" (by a key grid %d keys wide: a term by the key's grid row plus one by its column)", kw)
		}
		if n.Attr("mask_kind") == nil || len(n.Inputs) < 4 || n.Inputs[3] == "" {
			parts = append(parts, fmt.Sprintf("bias %s%s", n.Inputs[5], how))
		} else {
			parts = append(parts, fmt.Sprintf("bias %s%s added %s the mask", n.Inputs[5], how, when))
		}
	}
	if lo, _ := n.AttrFloat("scores_min", float32(math.Inf(-1))); !math.IsInf(float64(lo), -1) {
		parts = append(parts, fmt.Sprintf("scores floored at %g after the masks", lo))
	}
	if len(n.Inputs) > 6 && n.Inputs[6] != "" {
		parts = append(parts, "sink logits "+n.Inputs[6]+" in every row's softmax")
	}
	var views []string
	for i, a := range []string{"q_view", "k_view", "v_view"} {
		if n.Attr(a) != nil {
			views = append(views, fmt.Sprintf("%s from %s", []string{"Q", "K", "V"}[i], n.Inputs[i]))
		}
	}
	if len(views) > 0 {
		parts = append(parts, "reads "+strings.Join(views, ", ")+" through views (no copies)")
	}
	if n.Attr("out_view") != nil {
		parts = append(parts, "writes heads merged")
	}
	if len(n.Outputs) > 1 && n.Outputs[1] != "" {
		mode, _ := n.AttrString("scores_mode", "")
		parts = append(parts, fmt.Sprintf("also writes the %s scores to %s (Sq×Sk)", mode, n.Outputs[1]))
	} else {
		parts = append(parts, "no Sq×Sk buffer")
	}
	return strings.Join(parts, "; ")
}

// planInputs makes zero inputs of the declared shapes (symbolic dims from
// dims, else defaultInspectDim) to plan the model with; when it cannot, it
// prints why after label and returns false.
func planInputs(w io.Writer, label string, s *session.Session, dims map[string]int) (map[string]*ir.Tensor, []string, bool) {
	inputs := map[string]*ir.Tensor{}
	var shapes []string
	var budgetUsed int64
	for _, vi := range s.Inputs() {
		if !vi.Type.RankKnown {
			fmt.Fprintf(w, "%s not shown (input %q has no declared shape)\n", label, vi.Name)
			return nil, nil, false
		}
		shape := make([]int, len(vi.Type.Shape))
		for i, d := range vi.Type.Shape {
			switch {
			case d.Known():
				shape[i] = int(d.Value)
			case d.Param != "" && dims[d.Param] > 0:
				shape[i] = dims[d.Param]
			default:
				shape[i] = defaultInspectDim
			}
		}
		shapes = append(shapes, fmt.Sprintf("%s=[%s]", vi.Name, ir.ShapeString(shape)))
		// The plan needs real (zero) input tensors: never build big ones
		// just to show fusions.
		n, size := ir.NumElements(shape), int64(vi.Type.DType.Size())
		if n < 0 || size <= 0 || n > (inspectInputBudget-budgetUsed)/size {
			fmt.Fprintf(w, "%s not shown (input %q at [%s] would need more than the %d bytes inspect allocates for this)\n", label, vi.Name, ir.ShapeString(shape), inspectInputBudget)
			return nil, nil, false
		}
		budgetUsed += n * size
		inputs[vi.Name] = ir.NewTensor(vi.Type.DType, shape)
	}
	return inputs, shapes, true
}

// printDOT prints the model as Graphviz DOT: the whole graph with symbolic
// shapes, or with --dim the plan for those shapes.
func printDOT(w io.Writer, path string, s *session.Session, dims map[string]int) error {
	var why strings.Builder
	inputs, shapes, ok := planInputs(&why, "inputs for the plan", s, dims)
	plan := len(dims) > 0
	if !ok && plan {
		return errors.New(strings.TrimSpace(why.String()))
	}
	title := path + ": graph, symbolic shapes"
	switch {
	case plan:
		title = fmt.Sprintf("%s: plan at %s", path, strings.Join(shapes, " "))
	case !ok:
		title += fmt.Sprintf(", no fusions shown (%s)", strings.TrimSpace(why.String()))
		inputs = nil
	default:
		title += fmt.Sprintf(", fusions as planned at %s", strings.Join(shapes, " "))
	}
	return viz.GraphDOT(w, s, viz.DOTOptions{Inputs: inputs, Plan: plan, Title: title})
}

// backendSummary names the session's backends and their processes.
func backendSummary(s *session.Session) string {
	var parts []string
	for _, b := range s.Backends() {
		parts = append(parts, fmt.Sprintf("backend %s (pid %d)", b.Name, b.Pid))
	}
	return strings.Join(parts, ", ")
}
