package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ops"
)

// TestWorkerSpin checks that Options.WorkerSpin reaches the backend
// process (its Info reports the spin its workers use, read from its
// environment at start), that nil leaves the backend's default, and that
// the invalid settings are refused before anything starts.
func TestWorkerSpin(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	in, want := tinyInputs()
	for _, c := range []struct {
		name string
		spin *time.Duration
		want string
	}{
		{"default", nil, ops.SpinTime().String()}, // the test binary's own: same environment
		{"park at once", d(0), "0s"},
		{"50us", d(50 * time.Microsecond), "50µs"},
		{"10ms", d(10 * time.Millisecond), "10ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := openTiny(t, Options{WorkerSpin: c.spin})
			bs := s.Backends()
			if len(bs) != 1 {
				t.Fatalf("%d backends, want 1", len(bs))
			}
			if got := bs[0].Details["spin"]; got != c.want {
				t.Fatalf("the backend's workers spin %q, want %s", got, c.want)
			}
			out, err := s.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "y", out["y"], []int{2, 3}, want, 1e-6)
		})
	}
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"negative", Options{WorkerSpin: d(-time.Millisecond)}, "worker spin -1ms is negative"},
		{"in process", Options{WorkerSpin: d(0), InProcess: true}, "an in-process backend's workers spin as this process's ATTNRUN_SPIN says"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Logf = t.Logf
			s, err := Open(context.Background(), saveModel(t, tinyModel()), c.opts)
			if err == nil {
				s.Close()
				t.Fatal("opened; want an error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to say %q", err, c.want)
			}
		})
	}
}
