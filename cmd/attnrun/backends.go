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
		Short: "List the backends attnrun can find: name, version, executable, SHA-256, ops",
		Long: `backends lists the built-in cpu backend and every attnrun-backend-* file in the
plugin directory. Each plugin is verified before it runs (a regular file, or a
symlink to one inside the directory; not writable by group or others, nor its
directory; owned by root or you; not setuid or setgid; and, when a lock file is
in effect, its SHA-256 pinned there); a refused file is listed with the reason
and never executed. The others are started, asked for their Info and stopped.`,
		Args: cobra.NoArgs,
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
				sum := ""
				if b.SHA256 != "" {
					sum = "\n  sha256: " + b.SHA256
				}
				if !b.Available {
					fmt.Fprintf(w, "%s  unavailable: %s\n  executable: %s%s\n", b.Name, b.Reason, exe, sum)
					continue
				}
				fmt.Fprintf(w, "%s %s\n  executable: %s%s\n", b.Name, b.Version, exe, sum)
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
