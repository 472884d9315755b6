package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// msRange is 1, 2, ..., n milliseconds.
func msRange(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * time.Millisecond
	}
	return out
}

func TestSummarize(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	cases := []struct {
		name                                       string
		times                                      []time.Duration
		p50, p90, p99, min, max, mean, stddev, rps float64
	}{
		{"one", ms(2), 2, 2, 2, 2, 2, 2, 0, 500},
		// Nearest rank: p50 of 4 is the 2nd, p90 and p99 the 4th;
		// sample stddev sqrt(((1.5²+0.5²)·2)/3).
		{"four unsorted", ms(4, 1, 3, 2), 2, 4, 4, 1, 4, 2.5, math.Sqrt(5.0 / 3), 400},
		// Ten values 1..10: p50 is the 5th, p90 the 9th, p99 the 10th;
		// sample variance 82.5/9.
		{"ten", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 5, 9, 10, 1, 10, 5.5, math.Sqrt(82.5 / 9), 1000.0 / 5.5},
		// 200 values 1..200: p99 is the 198th.
		{"two hundred", msRange(200), 100, 180, 198, 1, 200, 100.5, math.Sqrt(200 * 201 / 12.0), 1000.0 / 100.5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := summarize(c.times)
			got := []float64{r.P50ms, r.P90ms, r.P99ms, r.Minms, r.Maxms, r.Meanms, r.Stddevms, r.RunsSec}
			want := []float64{c.p50, c.p90, c.p99, c.min, c.max, c.mean, c.stddev, c.rps}
			for i := range got {
				if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
					t.Errorf("summary %v, want %v", got, want)
					break
				}
			}
		})
	}
}

// TestBenchJSON runs `attnrun bench --iters 5 --json` on a model and parses
// the last line of stdout: by default the inputs and bound outputs are
// shared tensors (Session.NewTensor), not with --no-shm or --heap-tensors.
func TestBenchJSON(t *testing.T) {
	bin := binPath
	model := filepath.Join("..", "..", "models", "s003_self_attention", "model.onnx")
	for _, extra := range [][]string{nil, {"--no-shm", "--threads", "1", "--fresh-outputs"}, {"--heap-tensors"}} {
		args := append([]string{"bench", model, "--input", "x=random:3x32", "--iters", "5", "--warmup", "2", "--json"}, extra...)
		var r struct {
			P50ms     float64  `json:"p50_ms"`
			P90ms     float64  `json:"p90_ms"`
			P99ms     float64  `json:"p99_ms"`
			Maxms     float64  `json:"max_ms"`
			Stddevms  *float64 `json:"stddev_ms"`
			Minms     float64  `json:"min_ms"`
			Meanms    float64  `json:"mean_ms"`
			RunsSec   float64  `json:"runs_per_sec"`
			PeakRSS   int64    `json:"peak_rss_bytes"`
			Iters     int      `json:"iters"`
			Threads   int      `json:"threads"`
			Backend   string   `json:"backend"`
			BLAS      string   `json:"blas"`
			Transport string   `json:"transport"`
			RunsVia   string   `json:"runs_via"`
			Outputs   string   `json:"outputs"`
			Shared    bool     `json:"shared_tensors"`
		}
		stderr := benchJSON(t, bin, args, &r)
		if r.P99ms < r.P90ms || r.Maxms < r.P99ms || r.Stddevms == nil || *r.Stddevms < 0 || *r.Stddevms > r.Maxms-r.Minms {
			t.Errorf("p99 %v, max %v, stddev %v: missing or out of order", r.P99ms, r.Maxms, r.Stddevms)
		}
		if r.P50ms <= 0 || r.P90ms < r.P50ms || r.Minms <= 0 || r.Minms > r.P50ms || r.Meanms <= 0 || r.RunsSec <= 0 || r.PeakRSS <= 0 || r.Threads <= 0 {
			t.Errorf("fields not positive or out of order: %+v", r)
		}
		wantTransport, wantRunsVia, wantOutputs := "shm", "doorbell", "bound"
		if len(extra) > 1 {
			wantTransport, wantRunsVia, wantOutputs = "inline", "grpc", "fresh"
			if r.Threads != 1 {
				t.Errorf("threads %d, want 1", r.Threads)
			}
		}
		if r.Iters != 5 || r.Backend != "cpu" || r.BLAS == "" || r.Transport != wantTransport || r.RunsVia != wantRunsVia || r.Outputs != wantOutputs || r.Shared != (extra == nil) {
			t.Errorf("iters %d, backend %q, blas %q, transport %q, runs via %q, outputs %q, shared tensors %v", r.Iters, r.Backend, r.BLAS, r.Transport, r.RunsVia, r.Outputs, r.Shared)
		}
		if stderr != "" {
			t.Errorf("stderr is not a terminal, yet it got %q", stderr)
		}
	}
}

// TestBenchInstances runs `attnrun bench --instances 2` (two backend
// processes, two concurrent callers) and `--in-process`: the JSON says so,
// and with instances each process reports its peak RSS. A zero count is a
// usage error.
func TestBenchInstances(t *testing.T) {
	model := filepath.Join("..", "..", "models", "s003_self_attention", "model.onnx")
	for _, c := range []struct {
		args               []string
		instances, callers int
		inProcess          bool
		rss                []string
	}{
		{[]string{"--instances", "2"}, 2, 2, false, []string{"cpu", "cpu#1"}},
		{[]string{"--instances", "2", "--callers", "3", "--in-process"}, 2, 3, true, []string{"cpu", "cpu#1"}},
		{[]string{"--in-process"}, 1, 1, true, []string{"cpu"}},
	} {
		args := append([]string{"bench", model, "--input", "x=random:3x32", "--iters", "20", "--warmup", "4", "--json"}, c.args...)
		var r struct {
			Iters      int              `json:"iters"`
			RunsSec    float64          `json:"runs_per_sec"`
			Instances  int              `json:"instances"`
			Callers    int              `json:"callers"`
			InProcess  bool             `json:"in_process"`
			RunsVia    string           `json:"runs_via"`
			BackendRSS map[string]int64 `json:"backend_peak_rss_bytes"`
		}
		benchJSON(t, binPath, args, &r)
		var rss []string
		for name, b := range r.BackendRSS {
			if b > 0 {
				rss = append(rss, name)
			}
		}
		sort.Strings(rss)
		wantRunsVia := "doorbell" // every run of both instances
		if c.inProcess {
			wantRunsVia = "in process"
		}
		if r.Iters != 20 || r.RunsSec <= 0 || r.Instances != c.instances || r.Callers != c.callers || r.InProcess != c.inProcess || r.RunsVia != wantRunsVia || strings.Join(rss, " ") != strings.Join(c.rss, " ") {
			t.Errorf("%s: %+v", strings.Join(c.args, " "), r)
		}
	}
	for _, bad := range []string{"--instances=0", "--callers=-1"} {
		cmd := exec.Command(binPath, "bench", model, "--input", "x=random:3x32", bad)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit status 2 (%s)", bad, err, out)
		}
	}
}

// benchJSON runs `bin args...` (a bench with --json), decodes the last line
// of its stdout into v and returns its stderr.
func benchJSON(t *testing.T, bin string, args []string, v any) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("attnrun %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("last stdout line %q: %v", lines[len(lines)-1], err)
	}
	return stderr.String()
}
