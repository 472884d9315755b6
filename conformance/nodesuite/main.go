// Command nodesuite runs ONNX's backend node tests for every op a backend
// claims and checks the results against the backend's expectations files.
// There are two suites: Debian's onnx 1.12 data (libonnx-testdata, checked
// against conformance/expectations/<backend>.txt) and ONNX 1.22's
// shared/onnx-node tree (../shared/onnx-node beside the repository, checked
// against conformance/expectations/<backend>-onnx122.txt with upstream's
// tolerance). It exits 1 when an expected pass fails, when a case of a
// claimed op is in neither list, or when a file names a case that does not
// exist or passes though excluded. `make node-suite` runs it.
//
//	go run ./conformance/nodesuite --attnrun bin/attnrun --backend cpu
//
// With --update (and one --suite) it rewrites that suite's expectations
// file instead: passing cases become "pass", existing exclusions stay, and
// failing cases that are not excluded are printed (they need a fix or an
// allowed exclusion).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"

	"github.com/attnrun/attnrun/conformance"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		cfg                conformance.Config
		which, expect      string
		debianDir, onnx122 string
		rtol, atol         float64
		update             bool
	)
	flag.StringVar(&cfg.Attnrun, "attnrun", "bin/attnrun", "attnrun executable")
	flag.StringVar(&cfg.Backend, "backend", "cpu", "backend under test")
	flag.StringVar(&cfg.PluginDir, "plugin-dir", "", "directory of attnrun-backend-* plugins (default $ATTNRUN_PLUGIN_DIR)")
	flag.StringVar(&which, "suite", "all", "suite to run: debian, onnx122 or all")
	flag.StringVar(&debianDir, "debian", conformance.DefaultSuiteDir, "directory of Debian's onnx 1.12 node tests (test_*/model.onnx)")
	flag.StringVar(&onnx122, "onnx122", "", "the shared/onnx-node tree (default $ONNX122_NODE_SUITE or ../shared/onnx-node beside the repository)")
	flag.StringVar(&expect, "expectations", "", "expectations file (with one --suite; default conformance/expectations/<backend>[-onnx122].txt)")
	flag.Float64Var(&rtol, "rtol", 0, "relative tolerance (0: the suite's: 1e-4 for debian, attnrun conform's default; 1e-3 for onnx122, upstream's)")
	flag.Float64Var(&atol, "atol", 0, "absolute tolerance (0: the suite's: 1e-5 for debian; 1e-7 for onnx122)")
	flag.BoolVar(&update, "update", false, "rewrite the suite's expectations file from this run's passes (exclusions are kept; needs one --suite)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "nodesuite: takes no arguments (see -h)")
		return 2
	}
	if which != "debian" && which != "onnx122" && which != "all" {
		fmt.Fprintf(os.Stderr, "nodesuite: --suite %q: want debian, onnx122 or all\n", which)
		return 2
	}
	if (update || expect != "") && which == "all" {
		fmt.Fprintln(os.Stderr, "nodesuite: --update and --expectations need one --suite (debian or onnx122)")
		return 2
	}
	var suites []conformance.Suite
	if which != "onnx122" {
		suites = append(suites, conformance.DebianSuite(debianDir))
	}
	if which != "debian" {
		dir, tried := onnx122, []string(nil)
		if dir == "" {
			dir, tried = conformance.FindONNX122(".")
		}
		switch {
		case dir != "":
			suites = append(suites, conformance.ONNX122Suite(dir))
		case which == "onnx122":
			fmt.Fprintln(os.Stderr, "nodesuite:", conformance.MissingMessage("onnx-1.22", tried))
			return 1
		default:
			fmt.Fprintln(os.Stderr, "!!!!!!!! nodesuite:", conformance.MissingMessage("onnx-1.22", tried), "!!!!!!!!")
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg.Stderr = os.Stderr
	status := 0
	for _, s := range suites {
		if rtol > 0 {
			s.Rtol = rtol
		}
		if atol > 0 {
			s.Atol = atol
		}
		path := expect
		if path == "" {
			path = s.ExpectationsFile(cfg.Backend)
		}
		exp, err := conformance.ReadExpectations(path)
		switch {
		case err == nil:
		case update && os.IsNotExist(err):
			exp = &conformance.Expectations{Pass: map[string]bool{}, Exclude: map[string]string{}}
		default:
			fmt.Fprintln(os.Stderr, "nodesuite:", err)
			return 1
		}
		cfg.Suite, cfg.Expectations = s, exp
		rep, err := conformance.Run(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "nodesuite:", err)
			return 1
		}
		if update {
			return writeUpdate(path, s, exp, rep)
		}
		for _, p := range rep.Problems {
			fmt.Println("PROBLEM", p)
		}
		fmt.Println(rep.Summary())
		if len(rep.Problems) > 0 {
			fmt.Printf("%d problems against %s\n", len(rep.Problems), path)
			status = 1
		}
	}
	return status
}

// writeUpdate rewrites the expectations file from the report.
func writeUpdate(path string, s conformance.Suite, old *conformance.Expectations, rep *conformance.Report) int {
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
	header := fmt.Sprintf(`ONNX node-suite expectations: suite %s, %s backend (see conformance/cases.go).
Tolerance: rtol %g, atol %g.
One line per case of every op the backend claims: "pass NAME", or
"exclude NAME -- KIND: why" with KIND dtype, opset or subgraph, the only
allowed reasons (see ExcludeReasons in conformance/expectations.go).
Regenerate with: go run ./conformance/nodesuite --backend %s --suite %s --update`,
		s.Name, rep.Backend, s.Rtol, s.Atol, rep.Backend, s.ID)
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
