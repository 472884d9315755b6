package conformance

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// ExcludeReasons are the only kinds of exclusion the expectations files
// allow; an exclusion's reason must start with one of them followed by ':'.
//
//	dtype     an element type the backend does not take (bfloat16, string,
//	          sequences, optionals...)
//	opset     an opset newer than attnrun supports (ops.MaxOpset)
//	subgraph  an "_expanded" case whose function body uses a control-flow
//	          op with a subgraph attribute (Loop, If, Scan), which attnrun's
//	          IR does not execute; the runner checks that the case's name
//	          ends in _expanded and that its model really has a subgraph
//
// Anything else must pass: fix the op.
var ExcludeReasons = []string{"dtype", "opset", "subgraph"}

// ReasonKind returns the kind of an exclusion reason ("dtype", ...).
func ReasonKind(reason string) string {
	kind, _, _ := strings.Cut(reason, ":")
	return kind
}

// Expectations is one backend's expectations file: for each case, whether
// it must pass or is excluded, and why.
type Expectations struct {
	// Pass lists the cases that must pass.
	Pass map[string]bool
	// Exclude maps excluded cases to their reason.
	Exclude map[string]string
}

// ParseExpectations reads an expectations file: one case a line, either
// "pass test_name" or "exclude test_name -- kind: why" with kind one of
// ExcludeReasons. Blank lines and lines starting with '#' are ignored.
func ParseExpectations(r io.Reader) (*Expectations, error) {
	e := &Expectations{Pass: map[string]bool{}, Exclude: map[string]string{}}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		verb, rest, _ := strings.Cut(s, " ")
		rest = strings.TrimSpace(rest)
		switch verb {
		case "pass":
			if rest == "" || strings.ContainsAny(rest, " \t") {
				return nil, fmt.Errorf("line %d: want \"pass test_name\", got %q", line, s)
			}
			if err := e.unseen(rest); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			e.Pass[rest] = true
		case "exclude":
			name, reason, ok := strings.Cut(rest, " -- ")
			name, reason = strings.TrimSpace(name), strings.TrimSpace(reason)
			if !ok || name == "" || reason == "" || strings.ContainsAny(name, " \t") {
				return nil, fmt.Errorf("line %d: want \"exclude test_name -- kind: reason\", got %q", line, s)
			}
			kind, why, ok := strings.Cut(reason, ":")
			if !ok || strings.TrimSpace(why) == "" || !allowedReason(kind) {
				return nil, fmt.Errorf("line %d: exclusion reason %q must be \"kind: why\" with kind one of %s (anything else must pass: fix the op)",
					line, reason, strings.Join(ExcludeReasons, ", "))
			}
			if err := e.unseen(name); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			e.Exclude[name] = reason
		default:
			return nil, fmt.Errorf("line %d: want \"pass\" or \"exclude\", got %q", line, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return e, nil
}

func allowedReason(kind string) bool {
	for _, k := range ExcludeReasons {
		if kind == k {
			return true
		}
	}
	return false
}

func (e *Expectations) unseen(name string) error {
	if e.Pass[name] || e.Exclude[name] != "" {
		return fmt.Errorf("case %s is listed twice", name)
	}
	return nil
}

// Format writes the expectations sorted by case name, with a header.
func (e *Expectations) Format(w io.Writer, header string) error {
	names := make([]string, 0, len(e.Pass)+len(e.Exclude))
	for n := range e.Pass {
		names = append(names, n)
	}
	for n := range e.Exclude {
		names = append(names, n)
	}
	sort.Strings(names)
	bw := bufio.NewWriter(w)
	for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		fmt.Fprintf(bw, "# %s\n", l)
	}
	for _, n := range names {
		if e.Pass[n] {
			fmt.Fprintf(bw, "pass %s\n", n)
		} else {
			fmt.Fprintf(bw, "exclude %s -- %s\n", n, e.Exclude[n])
		}
	}
	return bw.Flush()
}

// ReadExpectations parses the expectations file at path.
func ReadExpectations(path string) (*Expectations, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	e, err := ParseExpectations(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}
