package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/onnx"
)

// renderDOT checks that Graphviz parses and lays out src, when dot is
// installed (scripts/install-test-deps.sh installs it).
func renderDOT(t *testing.T, src string) {
	t.Helper()
	bin, err := exec.LookPath("dot")
	if err != nil {
		t.Log("Graphviz's dot is not installed: the DOT text is not rendered (apt-get install graphviz)")
		return
	}
	cmd := exec.Command(bin, "-Tsvg")
	cmd.Stdin = strings.NewReader(src)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("dot -Tsvg: %v\n%s\n%s", err, stderr.String(), src)
	}
	if !strings.Contains(out.String(), "<title>cluster_p0</title>") {
		t.Errorf("the SVG has no partition cluster:\n%.1000s", out.String())
	}
}

var symbolicEdge = regexp.MustCompile(`-> .*\[label="[^"]*[a-z_]+[,\]]`)

var dotNodeLine = regexp.MustCompile(`(?m)^    n\d+ \[label="([^"\\]|\\.)*"`)

// TestInspectDOT: `inspect --dot` draws every model as a graph Graphviz
// parses, with its partition as a cluster and its fused regions as boxes;
// with --dim it draws the plan, concrete shapes on the edges.
func TestInspectDOT(t *testing.T) {
	models, _ := filepath.Glob(filepath.Join(modelsDir, "*", "model.onnx"))
	if len(models) < 20 {
		t.Fatalf("%d models", len(models))
	}
	for _, m := range models {
		t.Run(filepath.Base(filepath.Dir(m)), func(t *testing.T) {
			t.Parallel()
			r := attnrun(t, "inspect", m, "--dot")
			r.wantOK(t)
			for _, want := range []string{"digraph attnrun {", "subgraph cluster_p0 {", `label="partition 0 · backend cpu"`, "replaces:", "com.attnrun:FusedAttention", `"in:`, `-> "out:`} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("no %q in\n%s", want, r.stdout)
				}
			}
			renderDOT(t, r.stdout)
			args := []string{"inspect", m, "--dot"}
			model, err := onnx.Load(m, onnx.Options{})
			if err != nil {
				t.Fatal(err)
			}
			bound := map[string]bool{}
			for _, vi := range model.Graph.Inputs {
				for _, d := range vi.Type.Shape {
					if d.Param != "" && !bound[d.Param] {
						bound[d.Param] = true
						size := 5 + len(bound)%3
						if d.Param == "nw" {
							size = 3 // Swin's bw windows must be a multiple of nw
						}
						args = append(args, "--dim", fmt.Sprintf("%s=%d", d.Param, size))
					}
				}
			}
			plan := attnrun(t, args...)
			plan.wantOK(t)
			if !strings.Contains(plan.stdout, ": plan at ") || symbolicEdge.MatchString(plan.stdout) {
				t.Errorf("the plan is not drawn with concrete shapes:\n%s", plan.stdout)
			}
			// An ONNX Attention node becomes several steps (its KV-cache
			// Concat, a head split); otherwise folding and fusion only
			// remove boxes.
			lowersAttention := strings.Contains(r.stdout, `replaces:\l  Attention `)
			if n, all := len(dotNodeLine.FindAllString(plan.stdout, -1)), len(dotNodeLine.FindAllString(r.stdout, -1)); n == 0 || n > all && !lowersAttention {
				t.Errorf("the plan has %d boxes, the graph %d: folding and fusion remove boxes", n, all)
			}
			renderDOT(t, plan.stdout)
		})
	}
}

// TestInspectDOTPartitions: with a backend that refuses Softmax, the plan
// has three partitions, coloured by backend, and the attention chain that
// crosses them is drawn unfused, as the backends run it.
func TestInspectDOTPartitions(t *testing.T) {
	dir := pluginDir(t)
	r := attnrun(t, "inspect", filepath.Join(modelsDir, "s002_self_attention_v1", "model.onnx"), "--dot",
		"--plugin-dir", dir, "--backend", "picky", "--dim", "batch=2", "--dim", "seq=5")
	r.wantOK(t)
	for _, want := range []string{
		`label="partition 0 · backend picky"; style="filled,rounded"; fillcolor="#`,
		`label="partition 1 · backend cpu"; style="filled,rounded"; fillcolor="#dbe9f6"`,
		`label="partition 2 · backend picky"`,
		`label="Softmax\l/Softmax\l"`,
		`[label="float32[2, 5, 5]"]`,
		`com.attnrun:FusedMatMul`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no %q in\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "FusedAttention") {
		t.Errorf("attention fused across partitions:\n%s", r.stdout)
	}
	cluster := r.stdout[strings.Index(r.stdout, "subgraph cluster_p1"):]
	cluster = cluster[:strings.Index(cluster, "  }")]
	if !strings.Contains(cluster, "Softmax") || strings.Contains(cluster, "MatMul") {
		t.Errorf("partition 1 should hold just the Softmax:\n%s", cluster)
	}
	renderDOT(t, r.stdout)
}
