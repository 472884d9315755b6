package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	cases := []struct {
		name                          string
		times                         []time.Duration
		p50, p90, min, max, mean, rps float64
	}{
		{"one", ms(2), 2, 2, 2, 2, 2, 500},
		// Nearest rank: p50 of 4 is the 2nd, p90 the 4th.
		{"four unsorted", ms(4, 1, 3, 2), 2, 4, 1, 4, 2.5, 400},
		// Ten values 1..10: p50 is the 5th, p90 the 9th.
		{"ten", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 5, 9, 1, 10, 5.5, 1000.0 / 5.5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := summarize(c.times)
			got := []float64{r.P50ms, r.P90ms, r.Minms, r.Maxms, r.Meanms, r.RunsSec}
			want := []float64{c.p50, c.p90, c.min, c.max, c.mean, c.rps}
			for i := range got {
				if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
					t.Errorf("summary %v, want %v", got, want)
					break
				}
			}
		})
	}
}

// TestBenchJSON builds attnrun, runs `attnrun bench --iters 5 --json` on a
// model and parses the last line of stdout.
func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the attnrun binary")
	}
	bin := filepath.Join(t.TempDir(), "attnrun")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	model := filepath.Join("..", "..", "models", "s003_self_attention", "model.onnx")
	for _, extra := range [][]string{nil, {"--no-shm", "--threads", "1", "--fresh-outputs"}} {
		args := append([]string{"bench", model, "--input", "x=random:3x32", "--iters", "5", "--warmup", "2", "--json"}, extra...)
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("attnrun %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr.String())
		}
		lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
		var r struct {
			P50ms     float64 `json:"p50_ms"`
			P90ms     float64 `json:"p90_ms"`
			Minms     float64 `json:"min_ms"`
			Meanms    float64 `json:"mean_ms"`
			RunsSec   float64 `json:"runs_per_sec"`
			PeakRSS   int64   `json:"peak_rss_bytes"`
			Iters     int     `json:"iters"`
			Threads   int     `json:"threads"`
			Backend   string  `json:"backend"`
			BLAS      string  `json:"blas"`
			Transport string  `json:"transport"`
			Outputs   string  `json:"outputs"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
			t.Fatalf("last stdout line %q: %v", lines[len(lines)-1], err)
		}
		if r.P50ms <= 0 || r.P90ms < r.P50ms || r.Minms <= 0 || r.Minms > r.P50ms || r.Meanms <= 0 || r.RunsSec <= 0 || r.PeakRSS <= 0 || r.Threads <= 0 {
			t.Errorf("fields not positive or out of order: %+v", r)
		}
		wantTransport, wantOutputs := "shm", "bound"
		if extra != nil {
			wantTransport, wantOutputs = "inline", "fresh"
			if r.Threads != 1 {
				t.Errorf("threads %d, want 1", r.Threads)
			}
		}
		if r.Iters != 5 || r.Backend != "cpu" || r.BLAS == "" || r.Transport != wantTransport || r.Outputs != wantOutputs {
			t.Errorf("iters %d, backend %q, blas %q, transport %q, outputs %q", r.Iters, r.Backend, r.BLAS, r.Transport, r.Outputs)
		}
		if stderr.Len() != 0 {
			t.Errorf("stderr is not a terminal, yet it got %q", stderr.String())
		}
	}
}
