package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/session"
)

func newOpsCmd(g *globalFlags) *cobra.Command {
	var markdown bool
	cmd := &cobra.Command{
		Use:   "ops",
		Short: "List the ops attnrun knows: opset ranges, element types, and the backends that take them",
		Long: `ops prints every op in attnrun's registry with the opset ranges it covers,
the element types its kernels take, and which of the available backends take
it (each backend is started and asked, as in "attnrun backends"). With
--markdown it prints the table docs/ops.md holds (make ops-table).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := session.ListBackends(cmd.Context(), g.sessionOptions())
			if err != nil {
				return err
			}
			var backends []opsBackend
			for _, b := range list {
				if b.Available {
					backends = append(backends, opsBackend{b.Name, b.Ops})
				}
			}
			rows := opsRows(ops.Schemas(), backends)
			if markdown {
				return writeOpsMarkdown(cmd.OutOrStdout(), rows)
			}
			return writeOpsText(cmd.OutOrStdout(), rows)
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print a Markdown table (the one in docs/ops.md)")
	return cmd
}

// opsBackend is a backend's name and the ops it reports.
type opsBackend struct {
	name string
	ops  []plugins.OpSupport
}

// opsRange is one registered opset range of an op.
type opsRange struct {
	since, until int
	types        string
	dtypes       []ir.DType // nil: any type
	doc          string
	notes        []string // Schema.Notes: choices and limits, for docs/ops.md
}

// opsRow is one op: its ranges and the backends taking each.
type opsRow struct {
	key    string
	ranges []opsRange
	// backends lists, for each backend taking some range, "name" or
	// "name (since-until, ...)" when it takes only some of the ranges.
	backends []string
}

// opsRows groups schemas by op and works out which backends take them: a
// backend takes a range when one of its reported ops has the same domain and
// type and an opset range covering it.
func opsRows(schemas []*ops.Schema, backends []opsBackend) []opsRow {
	var rows []opsRow
	idx := map[string]int{}
	for _, s := range schemas {
		i, ok := idx[s.Key()]
		if !ok {
			i = len(rows)
			idx[s.Key()] = i
			rows = append(rows, opsRow{key: s.Key()})
		}
		types := "any"
		var dtypes []ir.DType
		if s.TypeInput >= 0 {
			types, dtypes = describeDTypes(s.DTypes), s.DTypes
		}
		rows[i].ranges = append(rows[i].ranges, opsRange{since: s.Since, until: s.Until, types: types, dtypes: dtypes, doc: s.Doc, notes: s.Notes})
	}
	for i := range rows {
		r := &rows[i]
		domain, opType, ok := strings.Cut(r.key, ":")
		if !ok {
			domain, opType = "", r.key
		}
		for _, b := range backends {
			var taken []string
			for _, rg := range r.ranges {
				if backendTakes(b.ops, domain, opType, rg.since, rg.until) {
					taken = append(taken, opsetText(rg.since, rg.until))
				}
			}
			switch {
			case len(taken) == len(r.ranges):
				r.backends = append(r.backends, b.name)
			case len(taken) > 0:
				r.backends = append(r.backends, fmt.Sprintf("%s (%s)", b.name, strings.Join(taken, ", ")))
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		// Default-domain ops first, then the others by domain.
		ci, cj := strings.Contains(rows[i].key, ":"), strings.Contains(rows[j].key, ":")
		if ci != cj {
			return !ci
		}
		return rows[i].key < rows[j].key
	})
	return rows
}

func backendTakes(list []plugins.OpSupport, domain, opType string, since, until int) bool {
	for _, op := range list {
		d := op.Domain
		if d == "ai.onnx" {
			d = ""
		}
		if d == domain && op.OpType == opType && op.Since <= since && until <= op.Until {
			return true
		}
	}
	return false
}

func opsetText(since, until int) string {
	if since == until {
		return fmt.Sprint(since)
	}
	return fmt.Sprintf("%d-%d", since, until)
}

// dtypeGroups name families of element types, so that a type list reads
// "float, int, uint, bool" instead of eleven names.
var dtypeGroups = []struct {
	name  string
	types []ir.DType
}{
	{"float", []ir.DType{ir.Float, ir.Double, ir.Float16}},
	{"int", []ir.DType{ir.Int8, ir.Int16, ir.Int32, ir.Int64}},
	{"uint", []ir.DType{ir.Uint8, ir.Uint16, ir.Uint32, ir.Uint64}},
	{"float8", []ir.DType{ir.Float8E4M3FN, ir.Float8E4M3FNUZ, ir.Float8E5M2, ir.Float8E5M2FNUZ}},
	{"int4", []ir.DType{ir.Uint4, ir.Int4}},
	{"int2", []ir.DType{ir.Uint2, ir.Int2}},
}

// describeDTypes writes a dtype list compactly: "float" for float32,
// float64 and float16 together, "int" for int8..int64, "uint" for
// uint8..uint64, "float8" for its e4m3fn, e4m3fnuz, e5m2 and e5m2fnuz
// encodings, "int4" and "int2" for the signed and unsigned pairs, other
// types by name.
func describeDTypes(dts []ir.DType) string {
	have := map[ir.DType]bool{}
	for _, d := range dts {
		have[d] = true
	}
	var parts []string
	used := map[ir.DType]bool{}
	for _, g := range dtypeGroups {
		all := true
		for _, d := range g.types {
			all = all && have[d]
		}
		if all {
			parts = append(parts, g.name)
			for _, d := range g.types {
				used[d] = true
			}
		}
	}
	for _, d := range dts {
		if !used[d] {
			parts = append(parts, d.String())
			used[d] = true
		}
	}
	return strings.Join(parts, ", ")
}

// opsets and types render a row's ranges: "7-13, 14-18" and, when the types
// differ between ranges, "7-13: float; 14-18: float, int".
func (r opsRow) opsets() string {
	parts := make([]string, len(r.ranges))
	for i, rg := range r.ranges {
		parts[i] = opsetText(rg.since, rg.until)
	}
	return strings.Join(parts, ", ")
}

// types renders the ranges' element types, merging neighbouring ranges
// that take the same types ("1-10, 11, 12: float") and writing a range that
// only adds types to the previous one as the additions ("20-27: + bool").
func (r opsRow) types() string {
	type group struct {
		opsets []string
		types  string
		dtypes []ir.DType
	}
	var groups []group
	for _, rg := range r.ranges {
		if k := len(groups); k > 0 && groups[k-1].types == rg.types {
			groups[k-1].opsets = append(groups[k-1].opsets, opsetText(rg.since, rg.until))
			continue
		}
		groups = append(groups, group{[]string{opsetText(rg.since, rg.until)}, rg.types, rg.dtypes})
	}
	if len(groups) == 1 {
		return groups[0].types
	}
	parts := make([]string, len(groups))
	for i, g := range groups {
		text := g.types
		if i > 0 && g.dtypes != nil && groups[i-1].dtypes != nil {
			if added, ok := addedDTypes(groups[i-1].dtypes, g.dtypes); ok {
				text = "+ " + describeDTypes(added)
			}
		}
		parts[i] = strings.Join(g.opsets, ", ") + ": " + text
	}
	return strings.Join(parts, "; ")
}

// addedDTypes returns the types of next that prev lacks, and whether next
// keeps every type of prev.
func addedDTypes(prev, next []ir.DType) ([]ir.DType, bool) {
	for _, d := range prev {
		if !slices.Contains(next, d) {
			return nil, false
		}
	}
	var added []ir.DType
	for _, d := range next {
		if !slices.Contains(prev, d) {
			added = append(added, d)
		}
	}
	return added, true
}

func (r opsRow) doc() string { return r.ranges[len(r.ranges)-1].doc }

func (r opsRow) backendList() string {
	if len(r.backends) == 0 {
		return "none"
	}
	return strings.Join(r.backends, ", ")
}

func writeOpsText(w io.Writer, rows []opsRow) error {
	for _, r := range rows {
		fmt.Fprintf(w, "%s\n  opsets:   %s\n  types:    %s\n  backends: %s\n", r.key, r.opsets(), r.types(), r.backendList())
		if d := r.doc(); d != "" {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	_, err := fmt.Fprintf(w, "%d ops\n", len(rows))
	return err
}

// writeOpsMarkdown writes the docs/ops.md table.
func writeOpsMarkdown(w io.Writer, rows []opsRow) error {
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("<!-- Generated by `make ops-table` (attnrun ops --markdown). Do not edit by hand. -->\n")
	fmt.Fprintf(&b, "# Supported ops\n\nattnrun's op registry: %d ops. Opsets are the default ONNX domain's versions each kernel covers\n", len(rows))
	b.WriteString("(attnrun reads models importing opsets " + opsetText(ops.MinOpset, ops.MaxOpset) + "); types are the element types the kernel takes\n")
	b.WriteString("(float = float32, float64, float16; int = int8..int64; uint = uint8..uint64; float8 = float8e4m3fn, float8e4m3fnuz,\n")
	b.WriteString("float8e5m2, float8e5m2fnuz; int4 = int4, uint4; int2 = int2, uint2; \"+ t\" lists what a version adds to the one before);\n")
	b.WriteString("backends are those that take the op.\n\n")
	b.WriteString("| Op | Opsets | Types | Backends | Notes |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", esc(r.key), r.opsets(), esc(r.types()), esc(r.backendList()), esc(r.doc()))
	}
	writeOpsNotes(&b, rows)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeOpsNotes appends the ops' notes (Schema.Notes of each op's newest
// range): how attnrun reads an op where its specification leaves room.
func writeOpsNotes(b *strings.Builder, rows []opsRow) {
	first := true
	for _, r := range rows {
		notes := r.ranges[len(r.ranges)-1].notes
		if len(notes) == 0 {
			continue
		}
		if first {
			b.WriteString("\n## Notes\n\nHow attnrun reads these ops where the operator's text leaves room or disagrees with ONNX's reference implementation.\n")
			first = false
		}
		fmt.Fprintf(b, "\n### %s\n\n", r.key)
		for _, n := range notes {
			fmt.Fprintf(b, "- %s\n", n)
		}
	}
}
