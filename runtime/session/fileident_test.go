package session

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/onnx"
)

// TestReplacedModelFileRefused: a backend restarted after the model's
// weights file was replaced (a same-shaped model with other weights
// renamed over it, as one replaces a model) refuses to compile, and the
// Run that needed it fails with an error naming the weight and the file
// and saying what to do, rather than returning the new weights' answer;
// each later Run fails so too, promptly. Without the replacement, a
// killed backend restarts and computes as before. Weights embedded in the
// model file (at offsets aligned and not: mapped, and loaded by reference)
// and weights in external-data files both.
func TestReplacedModelFileRefused(t *testing.T) {
	const k, layers = 512, 4 // 1 MiB weights: the least that is referenced
	cases := []struct {
		name string
		// write writes the model into dir and returns its path; replace
		// renames a same-shaped file with every weight doubled over the
		// file the weights come from, and returns that file's path.
		write   func(t *testing.T, dir string) string
		replace func(t *testing.T, path string) string
		// scale is what the replaced model's output is, over the old one's.
		scale float32
	}{
		{"embedded", func(t *testing.T, dir string) string {
			return writeEmbeddedMLP(t, dir, k, layers)
		}, func(t *testing.T, path string) string {
			m := embeddedMLP(k, layers)
			for _, w := range m.Graph.Initializers {
				for i, v := range w.Float32s() {
					w.Float32s()[i] = 2 * v
				}
			}
			data, err := onnx.Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			renameOver(t, path, data)
			return path
		}, 1 << layers},
		{"external data", func(t *testing.T, dir string) string {
			return writeExternalMLP(t, dir, k, layers)
		}, func(t *testing.T, path string) string {
			w := filepath.Join(filepath.Dir(path), "w1.bin")
			data, err := os.ReadFile(w)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+4 <= len(data); i += 4 {
				v := math.Float32frombits(binary.LittleEndian.Uint32(data[i:]))
				binary.LittleEndian.PutUint32(data[i:], math.Float32bits(2*v))
			}
			renameOver(t, w, data)
			return w
		}, 2},
	}
	ones := make([]float32, k)
	for i := range ones {
		ones[i] = 1
	}
	in := map[string]*tensor.Dense{"x": dense([]int{1, k}, ones)}
	output := fmt.Sprintf("h%d", layers-1)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.write(t, t.TempDir())
			var failedRestarts atomic.Int64
			logf := func(format string, args ...any) {
				if line := fmt.Sprintf(format, args...); strings.HasPrefix(line, "restarting backend") {
					failedRestarts.Add(1)
				}
				t.Logf(format, args...)
			}
			s := runMLP(t, path, k, layers, Options{Threads: 1, Logf: logf})
			defer s.Close()
			// Unchanged files: the restarted backend computes as before.
			killBackend(t, s)
			out, err := s.Run(context.Background(), in)
			if err != nil {
				t.Fatalf("run after the backend was killed: %v", err)
			}
			checkClose(t, output, out[output], []int{1, k}, mlpWant(k, layers), 1e-3)
			file := c.replace(t, path)
			killBackend(t, s)
			// Twenty Runs in quick succession: every one fails, and the
			// replacement is not launched again for each (restartBackoff).
			start := time.Now()
			for try := 1; try <= 20; try++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				out, err := s.Run(ctx, in)
				cancel()
				if err == nil {
					t.Fatalf("run %d after the weights file was replaced and the backend killed: no error (output %v…, the old weights' %v…)",
						try, out[output].Data().([]float32)[:2], mlpWant(k, layers)[:2])
				}
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("run %d after the weights file was replaced: %v", try, err)
				}
				for _, part := range []string{`initializer "w`, file, "changed since the model was loaded", "another file", "open a new session"} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("run %d: error %q does not say %q", try, err, part)
					}
				}
				var restart *RestartError
				if !errors.As(err, &restart) || restart.Backend != CPU {
					t.Errorf("run %d: error %T is not a *RestartError of backend cpu", try, err)
				}
			}
			if n, took := failedRestarts.Load(), time.Since(start); n > 1+int64(took/(100*time.Millisecond)) || n < 1 {
				t.Errorf("%d failed restarts in %v for 20 runs; want 1, and at most one per 100 ms backoff", n, took)
			} else {
				t.Logf("%d failed restart(s) in %v for 20 runs", n, took)
			}
			if b := s.Backends()[0]; b.Available || !strings.Contains(b.Reason, "changed since the model was loaded") {
				t.Errorf("Backends: available %v, reason %q", b.Available, b.Reason)
			}
			// What a silent restart would have answered: a new session
			// computes with the new weights.
			fresh, err := Open(context.Background(), path, Options{Threads: 1, Logf: t.Logf})
			if err != nil {
				t.Fatalf("a new session on the replaced model: %v", err)
			}
			defer fresh.Close()
			out, err = fresh.Run(context.Background(), in)
			if err != nil {
				t.Fatalf("a new session on the replaced model: %v", err)
			}
			want := mlpWant(k, layers)
			for i := range want {
				want[i] *= c.scale
			}
			checkClose(t, output+" (new session, new weights)", out[output], []int{1, k}, want, 1e-3*float64(c.scale))
		})
	}
}

// renameOver writes data to a new file beside path and renames it over
// path (mv), as one replaces a model.
func renameOver(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// killBackend SIGKILLs the session's (only) backend process and waits for
// the session to see it gone.
func killBackend(t *testing.T, s *Session) {
	t.Helper()
	pid := s.Backends()[0].Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, s, pid)
}
