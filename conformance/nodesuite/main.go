// Command nodesuite runs ONNX's backend node tests for every op a backend
// claims and checks the results against the backend's expectations file
// (conformance/expectations/<backend>.txt). It exits 1 when an expected pass
// fails, when a case of a claimed op is in neither list, or when the file
// names a case that does not exist. `make node-suite` runs it.
//
//	go run ./conformance/nodesuite --attnrun bin/attnrun --backend cpu
//
// With --update it rewrites the expectations file instead: passing cases
// become "pass", existing exclusions stay, and failing cases that are not
// excluded are printed (they need a fix or an allowed exclusion).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"

	"github.com/attnrun/attnrun/conformance"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		cfg    conformance.Config
		expect string
		update bool
	)
	flag.StringVar(&cfg.Attnrun, "attnrun", "bin/attnrun", "attnrun executable")
	flag.StringVar(&cfg.Backend, "backend", "cpu", "backend under test")
	flag.StringVar(&cfg.PluginDir, "plugin-dir", "", "directory of attnrun-backend-* plugins (default $ATTNRUN_PLUGIN_DIR)")
	flag.StringVar(&cfg.SuiteDir, "suite", conformance.DefaultSuiteDir, "directory of ONNX node test cases (test_*/model.onnx)")
	flag.StringVar(&expect, "expectations", "", "expectations file (default conformance/expectations/<backend>.txt)")
	flag.Float64Var(&cfg.Rtol, "rtol", conformance.SuiteRtol, "relative tolerance (attnrun conform's default; ONNX's backend tests use 1e-3)")
	flag.Float64Var(&cfg.Atol, "atol", conformance.SuiteAtol, "absolute tolerance (attnrun conform's default; ONNX's backend tests use 1e-7)")
	flag.BoolVar(&update, "update", false, "rewrite the expectations file from this run's passes (exclusions are kept)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "nodesuite: takes no arguments (see -h)")
		return 2
	}
	if expect == "" {
		expect = filepath.Join("conformance", "expectations", cfg.Backend+".txt")
	}
	exp, err := conformance.ReadExpectations(expect)
	switch {
	case err == nil:
	case update && os.IsNotExist(err):
		exp = &conformance.Expectations{Pass: map[string]bool{}, Exclude: map[string]string{}}
	default:
		fmt.Fprintln(os.Stderr, "nodesuite:", err)
		return 1
	}
	cfg.Expectations = exp
	cfg.Stderr = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite:", err)
		return 1
	}
	if update {
		return writeUpdate(expect, exp, rep)
	}
	for _, p := range rep.Problems {
		fmt.Println("PROBLEM", p)
	}
	fmt.Println(rep.Summary())
	if len(rep.Problems) > 0 {
		fmt.Printf("%d problems against %s\n", len(rep.Problems), expect)
		return 1
	}
	return 0
}

// writeUpdate rewrites the expectations file from the report.
func writeUpdate(path string, old *conformance.Expectations, rep *conformance.Report) int {
	next := &conformance.Expectations{Pass: map[string]bool{}, Exclude: map[string]string{}}
	var failing []string
	for c := range rep.Cases {
		switch {
		case rep.Outcomes[c].Pass:
			next.Pass[c] = true
		case old.Exclude[c] != "":
			next.Exclude[c] = old.Exclude[c]
		default:
			failing = append(failing, c)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite:", err)
		return 1
	}
	header := fmt.Sprintf(`ONNX node-suite expectations for the %s backend (see conformance/cases.go).
One line per case of every op the backend claims: "pass NAME", or
"exclude NAME -- KIND: why" with KIND dtype, opset or subgraph, the only
allowed reasons (see ExcludeReasons in conformance/expectations.go).
Regenerate with: go run ./conformance/nodesuite --backend %s --update`, rep.Backend, rep.Backend)
	if err := next.Format(f, header); err != nil {
		f.Close()
		fmt.Fprintln(os.Stderr, "nodesuite:", err)
		return 1
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite:", err)
		return 1
	}
	sort.Strings(failing)
	for _, c := range failing {
		fmt.Printf("UNLISTED FAIL %s (%s): %s\n", c, rep.Cases[c], rep.Outcomes[c].Detail)
	}
	fmt.Printf("wrote %s: %d pass, %d excluded, %d failing cases left out\n", path, len(next.Pass), len(next.Exclude), len(failing))
	if len(failing) > 0 {
		return 1
	}
	return 0
}
