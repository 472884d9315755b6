package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/session"
)

// DefaultSuiteDir is where Debian's libonnx-testdata installs ONNX's node
// tests.
const DefaultSuiteDir = "/usr/share/libonnx-testdata/data/node"

// Node-suite tolerances. ONNX's own backend tests compare with
// numpy.testing.assert_allclose(rtol=1e-3, atol=1e-7); the node suite uses
// `attnrun conform`'s defaults instead (rtol 1e-4, atol 1e-5: ten times
// stricter for large values, looser only near zero), because every case
// passes under both, and then a case checked here passes `attnrun conform`
// run by hand too. Pass --rtol 1e-3 --atol 1e-7 to nodesuite for ONNX's.
const (
	SuiteRtol = 1e-4
	SuiteAtol = 1e-5
)

// Config describes one run of the node suite on one backend.
type Config struct {
	// Attnrun is the attnrun executable to run `attnrun conform` with.
	Attnrun string
	// Backend names the backend under test ("cpu", "gpu", ...).
	Backend string
	// PluginDir is passed as --plugin-dir ("" leaves attnrun's default).
	PluginDir string
	// Suite is the node-test collection to run (DebianSuite,
	// ONNX122Suite); its Rtol and Atol are the comparison tolerances.
	Suite Suite
	// Expectations are the backend's expected outcomes for the suite.
	Expectations *Expectations
	// Stderr receives attnrun's diagnostics (nil: discarded).
	Stderr io.Writer
	// Parallel is how many `attnrun conform` processes share the cases
	// (0: one per CPU, at most 4).
	Parallel int
}

// Outcome is one case's result as `attnrun conform` printed it.
type Outcome struct {
	Pass   bool
	Detail string // the rest of the PASS/FAIL line
}

// Report is the result of a node-suite run checked against expectations.
type Report struct {
	Backend string
	Suite   string // the suite's name
	// Ops are the claimed ops; Cases maps each of their cases to its op.
	Ops   []string
	Cases map[string]string
	// Outcomes are the results of the cases run.
	Outcomes map[string]Outcome
	// Passed and Excluded count cases of claimed ops.
	Passed, Excluded int
	// Problems lists every way the run disagrees with the expectations;
	// the run is good when it is empty.
	Problems []string
	// Elapsed is the time `attnrun conform` took.
	Elapsed time.Duration
}

// Summary is the one-line count: "node suite onnx-1.12 (Debian) (cpu): N
// of M cases of K claimed ops pass, E excluded".
func (r *Report) Summary() string {
	return fmt.Sprintf("node suite %s (%s): %d of %d cases of %d claimed ops pass, %d excluded (%.1fs)",
		r.Suite, r.Backend, r.Passed, len(r.Cases), len(r.Ops), r.Excluded, r.Elapsed.Seconds())
}

// ClaimedOps returns the default-domain ops the backend reports, by starting
// it through session.ListBackends with attnrun as the cpu backend's
// executable. ok is false (with the reason) when the backend is not
// available.
func ClaimedOps(ctx context.Context, attnrun, backend, pluginDir string) (opTypes []string, ok bool, reason string, err error) {
	list, err := session.ListBackends(ctx, session.Options{
		SelfExe: attnrun, PluginDir: pluginDir, Logf: func(string, ...any) {},
	})
	if err != nil {
		return nil, false, "", fmt.Errorf("listing backends: %w", err)
	}
	for _, b := range list {
		if b.Name != backend {
			continue
		}
		if !b.Available {
			return nil, false, b.Reason, nil
		}
		seen := map[string]bool{}
		for _, op := range b.Ops {
			if (op.Domain == ops.DomainONNX || op.Domain == "ai.onnx") && !seen[op.OpType] {
				seen[op.OpType] = true
				opTypes = append(opTypes, op.OpType)
			}
		}
		sort.Strings(opTypes)
		return opTypes, true, "", nil
	}
	return nil, false, "not found (see attnrun backends)", nil
}

// SuiteCases lists the case directory names (test_*) in dir.
func SuiteCases(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "test_") {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "model.onnx")); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no test_*/model.onnx cases in %s", dir)
	}
	return out, nil
}

// RunConform runs `attnrun conform` over the given case directories (each
// case in its own backend session), split over cfg.Parallel processes, and
// parses its PASS/FAIL lines by case name (the directory's base name).
func RunConform(ctx context.Context, cfg Config, dirs []string) (map[string]Outcome, error) {
	par := cfg.Parallel
	if par <= 0 {
		par = min(runtime.NumCPU(), 4)
	}
	par = max(1, min(par, len(dirs)))
	chunks := make([][]string, par)
	for i, d := range dirs {
		chunks[i%par] = append(chunks[i%par], d)
	}
	results := make([]map[string]Outcome, par)
	errs := make([]error, par)
	var wg sync.WaitGroup
	for i := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = runConform(ctx, cfg, chunks[i])
		}()
	}
	wg.Wait()
	out := map[string]Outcome{}
	for i := range results {
		if errs[i] != nil {
			return nil, errs[i]
		}
		for k, v := range results[i] {
			out[k] = v
		}
	}
	return out, nil
}

// failedSummary is the last line `attnrun conform` writes to stderr when
// some case failed.
var failedSummary = regexp.MustCompile(`^attnrun: \d+ of \d+ cases failed\n?$`)

// runConform runs one `attnrun conform` process.
func runConform(ctx context.Context, cfg Config, dirs []string) (map[string]Outcome, error) {
	args := []string{"conform", "--backend", cfg.Backend, "--no-fallback",
		"--rtol", fmt.Sprint(cfg.Suite.Rtol), "--atol", fmt.Sprint(cfg.Suite.Atol)}
	if cfg.PluginDir != "" {
		args = append(args, "--plugin-dir", cfg.PluginDir)
	}
	args = append(args, dirs...)
	cmd := exec.CommandContext(ctx, cfg.Attnrun, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if cfg.Stderr != nil {
		// Forward attnrun's diagnostics, less its "N of M cases failed"
		// summary: the report says which failures matter.
		for _, l := range strings.SplitAfter(stderr.String(), "\n") {
			if l != "" && !failedSummary.MatchString(l) {
				_, _ = io.WriteString(cfg.Stderr, l)
			}
		}
	}
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return nil, fmt.Errorf("%s conform: %w\n%s%s", cfg.Attnrun, err, stdout.String(), stderr.String())
	}
	out := map[string]Outcome{}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		verdict, rest, _ := strings.Cut(sc.Text(), " ")
		if verdict != "PASS" && verdict != "FAIL" {
			continue
		}
		// "FAIL name max_abs=… max_rel=…: why", or "FAIL name: why" for
		// a case that failed before comparing anything.
		name, detail, _ := strings.Cut(rest, " ")
		if n, ok := strings.CutSuffix(name, ":"); ok {
			name, detail = n, strings.TrimSpace(detail)
		}
		out[name] = Outcome{Pass: verdict == "PASS", Detail: detail}
	}
	return out, sc.Err()
}

// Run runs every case of the backend's claimed ops and checks the outcomes
// against cfg.Expectations.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	claimed, ok, reason, err := ClaimedOps(ctx, cfg.Attnrun, cfg.Backend, cfg.PluginDir)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("backend %s is not available: %s", cfg.Backend, reason)
	}
	var names []string
	cases := map[string]string{}
	outcomes := map[string]Outcome{}
	start := time.Now()
	for _, d := range cfg.Suite.Dirs {
		dirNames, err := SuiteCases(d.Path)
		if err != nil {
			return nil, err
		}
		assigned, err := Assign(dirNames, claimed)
		if err != nil {
			return nil, err
		}
		for _, n := range dirNames {
			names = append(names, d.caseKey(n))
		}
		dirs := make([]string, 0, len(assigned))
		for c, op := range assigned {
			cases[d.caseKey(c)] = op
			dirs = append(dirs, filepath.Join(d.Path, c))
		}
		sort.Strings(dirs)
		got, err := RunConform(ctx, cfg, dirs)
		if err != nil {
			return nil, err
		}
		for c, o := range got {
			outcomes[d.caseKey(c)] = o
		}
	}
	r := &Report{Backend: cfg.Backend, Suite: cfg.Suite.Name, Ops: claimed, Cases: cases, Outcomes: outcomes, Elapsed: time.Since(start)}
	subgraphs := map[string]bool{}
	for c, reason := range cfg.Expectations.Exclude {
		if _, ok := cases[c]; ok && ReasonKind(reason) == "subgraph" {
			has, err := hasSubgraph(filepath.Join(cfg.Suite.CaseDir(c), "model.onnx"))
			if err != nil {
				return nil, err
			}
			subgraphs[c] = has
		}
	}
	r.check(names, cfg.Expectations, subgraphs)
	return r, nil
}

// hasSubgraph reports whether a model has a node with a graph attribute
// (a Loop, If or Scan body).
func hasSubgraph(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	m, err := onnx.Decode(data, onnx.Options{BaseDir: filepath.Dir(path)})
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	for _, n := range m.Graph.Nodes {
		for _, a := range n.Attrs {
			if a.Type == ir.AttrGraph || a.Type == ir.AttrGraphs {
				return true, nil
			}
		}
	}
	return false, nil
}

// check fills Passed, Excluded and Problems. subgraphs says, for each case
// excluded with kind "subgraph", whether its model has a subgraph.
func (r *Report) check(all []string, e *Expectations, subgraphs map[string]bool) {
	exists := map[string]bool{}
	for _, n := range all {
		exists[n] = true
	}
	var probs []string
	for _, c := range sortedKeys(r.Cases) {
		o, ran := r.Outcomes[c]
		switch {
		case !ran:
			probs = append(probs, fmt.Sprintf("%s (%s): attnrun conform printed no result", c, r.Cases[c]))
		case e.Pass[c]:
			if o.Pass {
				r.Passed++
			} else {
				probs = append(probs, fmt.Sprintf("%s (%s): expected to pass, FAIL %s", c, r.Cases[c], o.Detail))
			}
		case e.Exclude[c] != "":
			r.Excluded++
			switch {
			case o.Pass:
				probs = append(probs, fmt.Sprintf("%s (%s): excluded (%s) but passes: list it as pass", c, r.Cases[c], e.Exclude[c]))
			case ReasonKind(e.Exclude[c]) == "subgraph" && (!strings.HasSuffix(c, "_expanded") || !subgraphs[c]):
				probs = append(probs, fmt.Sprintf("%s (%s): excluded as subgraph, but only _expanded cases whose model has a Loop/If/Scan body may be", c, r.Cases[c]))
			}
		default:
			status := "FAIL " + o.Detail
			if o.Pass {
				status = "PASS"
			}
			probs = append(probs, fmt.Sprintf("%s (%s): a case of a claimed op is in neither list (%s)", c, r.Cases[c], status))
		}
	}
	for _, c := range sortedKeys(e.Pass) {
		if !exists[c] {
			probs = append(probs, fmt.Sprintf("%s: listed as pass but no such case in the suite", c))
		} else if _, ok := r.Cases[c]; !ok {
			probs = append(probs, fmt.Sprintf("%s: listed as pass but it is not a case of a claimed op", c))
		}
	}
	for _, c := range sortedKeys(e.Exclude) {
		if !exists[c] {
			probs = append(probs, fmt.Sprintf("%s: listed as excluded but no such case in the suite", c))
		} else if _, ok := r.Cases[c]; !ok {
			probs = append(probs, fmt.Sprintf("%s: listed as excluded but it is not a case of a claimed op", c))
		}
	}
	r.Problems = probs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
