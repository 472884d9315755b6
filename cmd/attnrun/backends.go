package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/runtime/session"
)

func newBackendsCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "backends",
		Short: "List the backends attnrun can find: name, version, executable, ops",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := session.ListBackends(cmd.Context(), g.sessionOptions())
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, b := range list {
				exe := b.Path
				if exe == "" {
					exe = "(built in: attnrun re-executed)"
				}
				if !b.Available {
					fmt.Fprintf(w, "%s  unavailable: %s\n  executable: %s\n", b.Name, b.Reason, exe)
					continue
				}
				fmt.Fprintf(w, "%s %s\n  executable: %s\n", b.Name, b.Version, exe)
				keys := make([]string, 0, len(b.Details))
				for k := range b.Details {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(w, "  %s: %s\n", k, b.Details[k])
				}
				names := map[string]bool{}
				for _, op := range b.Ops {
					key := op.OpType
					if op.Domain != "" {
						key = op.Domain + ":" + op.OpType
					}
					names[key] = true
				}
				ops := make([]string, 0, len(names))
				for k := range names {
					ops = append(ops, k)
				}
				sort.Strings(ops)
				fmt.Fprintf(w, "  ops (%d): %s\n", len(ops), wrap(strings.Join(ops, " "), 76, "    "))
			}
			return nil
		},
	}
}

// wrap breaks s into lines of at most width characters, indenting
// continuation lines.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if line+1+len(word) > width {
				b.WriteString("\n" + indent)
				line = len(indent)
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}
