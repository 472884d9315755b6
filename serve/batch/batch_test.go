package batch

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ir"
)

// double is a row-wise model: y = 2x, plus a per-run record of what it saw.
type double struct {
	mu    sync.Mutex
	runs  [][]int // input shape of each run
	gate  chan struct{}
	extra bool // add an output whose dim 0 is not the batch
}

func (d *double) run(_ context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	if d.gate != nil {
		<-d.gate
	}
	x := in["x"]
	d.mu.Lock()
	d.runs = append(d.runs, append([]int(nil), x.Shape...))
	d.mu.Unlock()
	src := x.Data.([]float32)
	y := make([]float32, len(src))
	for i, v := range src {
		y[i] = 2 * v
	}
	out := map[string]*ir.Tensor{"y": ir.FromSlice(x.Shape, y)}
	if d.extra {
		out["n"] = ir.Scalar(int64(len(src)))
	}
	return out, nil
}

func rowsTensor(rows, width int, base float32) *ir.Tensor {
	d := make([]float32, rows*width)
	for i := range d {
		d[i] = base + float32(i)
	}
	return ir.FromSlice([]int{rows, width}, d)
}

type reply struct {
	out map[string]*ir.Tensor
	err error
}

// submitAll submits each input from its own goroutine, in order, a little
// apart so that they queue in that order.
func submitAll(s *Scheduler, ins []*ir.Tensor) []reply {
	replies := make([]reply, len(ins))
	var wg sync.WaitGroup
	for i, x := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _, err := s.Submit(context.Background(), map[string]*ir.Tensor{"x": x})
			replies[i] = reply{out, err}
		}()
		waitFor(func() bool { return arrivals(s) >= i+1 })
	}
	wg.Wait()
	return replies
}

func arrivals(s *Scheduler) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrivals
}

func waitFor(cond func() bool) {
	for deadline := time.Now().Add(5 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

func checkDoubled(t *testing.T, in *ir.Tensor, r reply) {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	y := r.out["y"]
	if !reflect.DeepEqual(y.Shape, in.Shape) {
		t.Fatalf("output shape %v for input %v", y.Shape, in.Shape)
	}
	for i, v := range in.Data.([]float32) {
		if y.Data.([]float32)[i] != 2*v {
			t.Fatalf("output %d is %v, want %v (rows went to the wrong request)", i, y.Data.([]float32)[i], 2*v)
		}
	}
}

func TestStacksQueuedRequestsAndSplitsOutputs(t *testing.T) {
	m := &double{gate: make(chan struct{})}
	s := New(Config{Slots: 1, MaxBatch: 8, MaxQueue: 16}, m.run)
	defer s.Close()
	// The first request holds the only slot; the next five queue behind it.
	var ins []*ir.Tensor
	for i, rows := range []int{1, 2, 1, 3, 1, 2} {
		ins = append(ins, rowsTensor(rows, 4, float32(100*i)))
	}
	done := make(chan []reply)
	go func() { done <- submitAll(s, ins) }()
	waitFor(func() bool { return s.QueueLength() == 5 })
	close(m.gate)
	replies := <-done
	for i := range ins {
		checkDoubled(t, ins[i], replies[i])
	}
	// Run 1: the first request alone. Run 2: the next four (2+1+3+1 = 7
	// rows; the last request's 2 rows would make 9 > 8). Run 3: the rest.
	want := [][]int{{1, 4}, {7, 4}, {2, 4}}
	if !reflect.DeepEqual(m.runs, want) {
		t.Fatalf("runs %v, want %v", m.runs, want)
	}
}

func TestDifferentTrailingShapesAreBatchedSeparately(t *testing.T) {
	m := &double{gate: make(chan struct{})}
	s := New(Config{Slots: 1, MaxBatch: 8, MaxQueue: 16}, m.run)
	defer s.Close()
	ins := []*ir.Tensor{rowsTensor(1, 4, 0), rowsTensor(1, 4, 10), rowsTensor(1, 3, 20), rowsTensor(2, 4, 30), rowsTensor(1, 3, 40)}
	done := make(chan []reply)
	go func() { done <- submitAll(s, ins) }()
	waitFor(func() bool { return s.QueueLength() == 4 })
	close(m.gate)
	replies := <-done
	for i := range ins {
		checkDoubled(t, ins[i], replies[i])
	}
	want := [][]int{{1, 4}, {3, 4}, {2, 3}}
	if !reflect.DeepEqual(m.runs, want) {
		t.Fatalf("runs %v, want %v (width 3 and width 4 must never share a run, and nothing is padded)", m.runs, want)
	}
}

func TestMaxDelayGathersLateArrivals(t *testing.T) {
	m := &double{}
	s := New(Config{Slots: 1, MaxBatch: 4, MaxDelay: time.Second, MaxQueue: 16}, m.run)
	defer s.Close()
	ins := []*ir.Tensor{rowsTensor(1, 2, 0), rowsTensor(1, 2, 5), rowsTensor(2, 2, 9)}
	replies := submitAll(s, ins)
	for i := range ins {
		checkDoubled(t, ins[i], replies[i])
	}
	// The slot was free, but the first request waited for the batch to
	// fill (4 rows) rather than the whole second.
	if !reflect.DeepEqual(m.runs, [][]int{{4, 2}}) {
		t.Fatalf("runs %v, want one run of 4 rows", m.runs)
	}
}

func TestUnbatchedAndOversizedRunAlone(t *testing.T) {
	m := &double{gate: make(chan struct{})}
	s := New(Config{Slots: 1, MaxBatch: 2, MaxQueue: 16}, m.run)
	defer s.Close()
	ins := []*ir.Tensor{rowsTensor(1, 2, 0), rowsTensor(3, 2, 5), rowsTensor(1, 2, 9), rowsTensor(1, 2, 13)}
	done := make(chan []reply)
	go func() { done <- submitAll(s, ins) }()
	waitFor(func() bool { return s.QueueLength() == 3 })
	close(m.gate)
	replies := <-done
	for i := range ins {
		checkDoubled(t, ins[i], replies[i])
	}
	if want := [][]int{{1, 2}, {3, 2}, {2, 2}}; !reflect.DeepEqual(m.runs, want) {
		t.Fatalf("runs %v, want %v", m.runs, want)
	}

	m2 := &double{}
	s2 := New(Config{Slots: 1, MaxBatch: 1, MaxQueue: 4}, m2.run)
	defer s2.Close()
	replies = submitAll(s2, ins[:2])
	checkDoubled(t, ins[1], replies[1])
	if len(m2.runs) != 2 {
		t.Fatalf("batching off: %d runs for 2 requests", len(m2.runs))
	}
}

func TestQueueFullAndCancel(t *testing.T) {
	m := &double{gate: make(chan struct{})}
	s := New(Config{Slots: 1, MaxBatch: 1, MaxQueue: 2}, m.run)
	go s.Submit(context.Background(), map[string]*ir.Tensor{"x": rowsTensor(1, 1, 0)}) // runs, blocked on the gate
	waitFor(func() bool { return arrivals(s) == 1 && s.QueueLength() == 0 })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() {
		_, _, err := s.Submit(ctx, map[string]*ir.Tensor{"x": rowsTensor(1, 1, 1)})
		errc <- err
	}()
	waitFor(func() bool { return arrivals(s) == 2 })
	go func() {
		_, _, err := s.Submit(context.Background(), map[string]*ir.Tensor{"x": rowsTensor(1, 1, 2)})
		errc <- err
	}()
	waitFor(func() bool { return s.QueueLength() == 2 })
	if _, _, err := s.Submit(context.Background(), map[string]*ir.Tensor{"x": rowsTensor(1, 1, 3)}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third queued request: %v, want ErrQueueFull", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled request: %v", err)
	}
	close(m.gate)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	s.Close()
	if len(m.runs) != 2 {
		t.Fatalf("%d runs, want 2 (the canceled request must not run)", len(m.runs))
	}
	if _, _, err := s.Submit(context.Background(), map[string]*ir.Tensor{"x": rowsTensor(1, 1, 3)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestCloseRunsQueuedRequests(t *testing.T) {
	m := &double{gate: make(chan struct{})}
	s := New(Config{Slots: 1, MaxBatch: 4, MaxDelay: time.Hour, MaxQueue: 8}, m.run)
	ins := []*ir.Tensor{rowsTensor(1, 2, 0), rowsTensor(1, 2, 4)}
	done := make(chan []reply)
	go func() { done <- submitAll(s, ins) }()
	waitFor(func() bool { return s.QueueLength() == 2 })
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	close(m.gate)
	replies := <-done
	<-closed
	for i := range ins {
		checkDoubled(t, ins[i], replies[i])
	}
}

func TestOutputWithoutBatchDimIsAnError(t *testing.T) {
	m := &double{gate: make(chan struct{}), extra: true}
	s := New(Config{Slots: 1, MaxBatch: 4, MaxQueue: 8}, m.run)
	defer s.Close()
	ins := []*ir.Tensor{rowsTensor(1, 2, 0), rowsTensor(1, 2, 4), rowsTensor(1, 2, 8)}
	done := make(chan []reply)
	go func() { done <- submitAll(s, ins) }()
	waitFor(func() bool { return s.QueueLength() == 2 })
	close(m.gate)
	replies := <-done
	if replies[0].err != nil {
		t.Fatalf("a request alone needs no split: %v", replies[0].err)
	}
	for _, r := range replies[1:] {
		if r.err == nil || !strings.Contains(r.err.Error(), `output "n" has shape [] for a batch of 2 rows`) {
			t.Fatalf("stacked: %v", r.err)
		}
	}
}

func TestBatchKey(t *testing.T) {
	a := map[string]*ir.Tensor{"x": rowsTensor(2, 3, 0), "m": ir.FromSlice([]int{2, 5}, make([]bool, 10))}
	b := map[string]*ir.Tensor{"x": rowsTensor(1, 3, 0), "m": ir.FromSlice([]int{1, 5}, make([]bool, 5))}
	ka, ra := batchKey(a)
	kb, rb := batchKey(b)
	if ka == "" || ka != kb || ra != 2 || rb != 1 {
		t.Fatalf("%q/%d %q/%d", ka, ra, kb, rb)
	}
	mismatched := map[string]*ir.Tensor{"x": rowsTensor(2, 3, 0), "m": ir.FromSlice([]int{1, 5}, make([]bool, 5))}
	scalar := map[string]*ir.Tensor{"x": ir.Scalar(float32(1))}
	empty := map[string]*ir.Tensor{"x": rowsTensor(0, 3, 0)}
	for _, in := range []map[string]*ir.Tensor{mismatched, scalar, empty} {
		if k, _ := batchKey(in); k != "" {
			t.Fatalf("batchKey(%v) = %q, want \"\" (runs alone)", in, k)
		}
	}
}

// TestBatchRunStopsWhenAllItsRequestsGiveUp: a stacked run that does not
// finish by itself (a stuck backend, here a run waiting for its context)
// goes on while one of its requests still waits, stops when the last one
// gives up, and frees its slot for the next request.
func TestBatchRunStopsWhenAllItsRequestsGiveUp(t *testing.T) {
	m := &double{}
	ended := make(chan error, 1)
	var first sync.Once
	run := func(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
		stuck := false
		first.Do(func() { stuck = true })
		if !stuck {
			return m.run(ctx, in)
		}
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	}
	s := New(Config{Slots: 1, MaxBatch: 4, MaxDelay: time.Second, MaxQueue: 8}, run)
	defer s.Close()
	var ctxs [2]context.Context
	var cancels [2]context.CancelFunc
	errc := make(chan error, 2)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		defer cancels[i]()
		go func() {
			_, _, err := s.Submit(ctxs[i], map[string]*ir.Tensor{"x": rowsTensor(1, 2, float32(i))})
			errc <- err
		}()
		waitFor(func() bool { return arrivals(s) == i+1 })
	}
	waitFor(func() bool { return s.Running() == 1 })
	if s.Running() != 1 || s.QueueLength() != 0 {
		t.Fatalf("%d runs, %d queued: want the two requests stacked in one run", s.Running(), s.QueueLength())
	}
	cancels[0]()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("first request: %v", err)
	}
	select {
	case err := <-ended:
		t.Fatalf("the run stopped (%v) while the second request still waited", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancels[1]()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("second request: %v", err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the run's context ended with %v", err)
	}
	in := rowsTensor(1, 2, 5)
	out, _, err := s.Submit(context.Background(), map[string]*ir.Tensor{"x": in})
	checkDoubled(t, in, reply{out, err})
}
