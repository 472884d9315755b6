package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/session"
)

// defaultInspectDim is the size given to unbound symbolic dims when inspect
// builds a plan to show fusions.
const defaultInspectDim = 8

// inspectInputBudget bounds the bytes of the zero input tensors inspect
// builds to plan the model and show its fusions.
const inspectInputBudget = 64 << 20

func newInspectCmd(g *globalFlags) *cobra.Command {
	var dimFlags []string
	cmd := &cobra.Command{
		Use:   "inspect MODEL.onnx",
		Short: "Show a model: metadata, inputs/outputs, ops, notes, backend per node, fusions",
		Args:  cobra.ExactArgs(1),
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
			printInspect(cmd.OutOrStdout(), args[0], s, dims, !g.noFuse)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&dimFlags, "dim", nil, fmt.Sprintf("bind a symbolic dim when showing fusions, e.g. --dim seq=128 (default %d)", defaultInspectDim))
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
		weightBytes += t.Bytes()
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

// printFusions shows the attention fusions made for one set of input shapes.
func printFusions(w io.Writer, s *session.Session, dims map[string]int) {
	inputs := map[string]*ir.Tensor{}
	var shapes []string
	var budgetUsed int64
	for _, vi := range s.Inputs() {
		if !vi.Type.RankKnown {
			fmt.Fprintf(w, "fusions:  not shown (input %q has no declared shape)\n", vi.Name)
			return
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
			fmt.Fprintf(w, "fusions:  not shown (input %q at [%s] would need more than the %d bytes inspect allocates for this)\n", vi.Name, ir.ShapeString(shape), inspectInputBudget)
			return
		}
		budgetUsed += n * size
		inputs[vi.Name] = ir.NewTensor(vi.Type.DType, shape)
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
		fmt.Fprintf(w, "  %s replaces %s\n", f.Node.Label(), strings.Join(replaced, " "))
	}
}

// backendSummary names the session's backends and their processes.
func backendSummary(s *session.Session) string {
	var parts []string
	for _, b := range s.Backends() {
		parts = append(parts, fmt.Sprintf("backend %s (pid %d)", b.Name, b.Pid))
	}
	return strings.Join(parts, ", ")
}
