// Package batch queues a model's requests and runs them on its instances,
// stacking requests that arrive close together into one run (dynamic
// batching).
//
// With batching on (Config.MaxBatch > 1), requests whose inputs have the
// same element types and the same dims after the first are stacked along
// dim 0, run once, and the outputs split back along dim 0. Requests with
// other trailing dims are batched separately: nothing is ever padded. The
// model must treat rows of dim 0 independently (a batch dim); the caller
// decides that (package serve only batches models whose inputs and outputs
// all lead with one symbolic batch dim, and only when configured to).
package batch

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnrun/attnrun/ir"
)

// RunFunc runs the model once.
type RunFunc func(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error)

// Config configures a Scheduler.
type Config struct {
	// Slots is how many runs may proceed at once (the model's instances).
	Slots int
	// MaxBatch is the largest number of dim-0 rows stacked into one run;
	// ≤ 1 turns batching off. A request with more rows runs alone.
	MaxBatch int
	// MaxDelay is how long the oldest queued request may wait for others
	// to join its batch once an instance is free.
	MaxDelay time.Duration
	// MaxQueue bounds the requests waiting for an instance; Submit refuses
	// more with ErrQueueFull.
	MaxQueue int
	// OnRun, if set, is called after every run with the number of requests
	// and rows it carried, how long it took and its error.
	OnRun func(requests, rows int, compute time.Duration, err error)
}

// ErrQueueFull is Submit's error when MaxQueue requests are waiting.
var ErrQueueFull = errors.New("queue is full")

// ErrClosed is Submit's error after Close.
var ErrClosed = errors.New("model is being unloaded")

// Scheduler queues requests for one model and runs them.
type Scheduler struct {
	cfg   Config
	run   RunFunc
	slots chan struct{}

	mu       sync.Mutex
	queue    []*item
	arrivals int // requests ever queued
	closing  bool
	wake     chan struct{} // signalled when queue or closing changes
	stopped  chan struct{} // closed when the dispatcher has returned
	running  sync.WaitGroup
	runs     atomic.Int32 // runs in progress
}

// item is one queued request.
type item struct {
	ctx  context.Context
	in   map[string]*ir.Tensor
	key  string // requests with equal keys can be stacked; "" never is
	rows int
	enq  time.Time
	done chan result
}

type result struct {
	out    map[string]*ir.Tensor
	queued time.Duration
	err    error
}

// New starts a scheduler that runs requests with run.
func New(cfg Config, run RunFunc) *Scheduler {
	cfg.Slots = max(cfg.Slots, 1)
	s := &Scheduler{cfg: cfg, run: run, slots: make(chan struct{}, cfg.Slots), wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go s.dispatch()
	return s
}

// Submit queues one request and waits for its outputs. queued is how long
// it waited for an instance (and for its batch to form).
func (s *Scheduler) Submit(ctx context.Context, in map[string]*ir.Tensor) (out map[string]*ir.Tensor, queued time.Duration, err error) {
	it := &item{ctx: ctx, in: in, enq: time.Now(), done: make(chan result, 1)}
	if s.cfg.MaxBatch > 1 {
		it.key, it.rows = batchKey(in)
	}
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return nil, 0, ErrClosed
	case len(s.queue) >= s.cfg.MaxQueue:
		s.mu.Unlock()
		return nil, 0, ErrQueueFull
	case s.cfg.MaxBatch <= 1 && len(s.queue) == 0:
		// Without batching, a request that finds an instance free and
		// nobody waiting runs at once in its own goroutine: no hand-off.
		select {
		case s.slots <- struct{}{}:
			s.arrivals++
			s.running.Add(1)
			s.runs.Add(1)
			s.mu.Unlock()
			s.execute([]*item{it})
			s.release()
			r := <-it.done
			return r.out, r.queued, r.err
		default:
		}
	}
	s.queue = append(s.queue, it)
	s.arrivals++
	s.mu.Unlock()
	s.signal()
	select {
	case r := <-it.done:
		return r.out, r.queued, r.err
	case <-ctx.Done():
		// The dispatcher drops it unrun if it is still queued.
		return nil, time.Since(it.enq), ctx.Err()
	}
}

// QueueLength is the number of requests waiting.
func (s *Scheduler) QueueLength() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Running is the number of runs in progress.
func (s *Scheduler) Running() int { return int(s.runs.Load()) }

// Close refuses new requests, runs the queued ones and waits for every run
// to finish.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.signal()
	<-s.stopped
	s.running.Wait()
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dispatch forms batches: it waits for a queued request, then for a free
// slot, then gathers the oldest request and those it can stack with
// (waiting up to MaxDelay from the oldest one's arrival for more), and
// starts the run. Requests that queue while every slot is busy make the
// next batch.
func (s *Scheduler) dispatch() {
	defer close(s.stopped)
	for {
		if !s.awaitWork() {
			return
		}
		s.slots <- struct{}{}
		batch := s.next()
		if batch == nil {
			<-s.slots
			continue
		}
		s.running.Add(1)
		s.runs.Add(1)
		go func() {
			s.execute(batch)
			s.release()
		}()
	}
}

// release ends a run: it frees its slot.
func (s *Scheduler) release() {
	s.runs.Add(-1)
	<-s.slots
	s.running.Done()
}

// awaitWork waits until a request is queued; false when closing with
// nothing queued.
func (s *Scheduler) awaitWork() bool {
	for {
		s.mu.Lock()
		n, closing := len(s.queue), s.closing
		s.mu.Unlock()
		switch {
		case n > 0:
			return true
		case closing:
			return false
		}
		<-s.wake
	}
}

// next returns the next batch to run, nil when the queue is empty.
func (s *Scheduler) next() []*item {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		s.dropCanceled()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return nil
		}
		first := s.queue[0]
		picked, rows := s.gather(first)
		wait := time.Until(first.enq.Add(s.cfg.MaxDelay))
		if first.key == "" || rows >= s.cfg.MaxBatch || wait <= 0 || s.closing {
			s.take(picked)
			s.mu.Unlock()
			return picked
		}
		s.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// dropCanceled answers queued requests whose clients gave up. s.mu is held.
func (s *Scheduler) dropCanceled() {
	kept := s.queue[:0]
	for _, it := range s.queue {
		if err := it.ctx.Err(); err != nil {
			it.done <- result{err: err, queued: time.Since(it.enq)}
			continue
		}
		kept = append(kept, it)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// gather picks, in arrival order, the queued requests that stack with
// first, up to MaxBatch rows. s.mu is held.
func (s *Scheduler) gather(first *item) (picked []*item, rows int) {
	picked, rows = []*item{first}, first.rows
	if first.key == "" {
		return picked, rows
	}
	for _, it := range s.queue[1:] {
		if rows >= s.cfg.MaxBatch {
			break
		}
		if it.key == first.key && rows+it.rows <= s.cfg.MaxBatch {
			picked = append(picked, it)
			rows += it.rows
		}
	}
	return picked, rows
}

// take removes picked from the queue. s.mu is held.
func (s *Scheduler) take(picked []*item) {
	in := make(map[*item]bool, len(picked))
	for _, it := range picked {
		in[it] = true
	}
	kept := s.queue[:0]
	for _, it := range s.queue {
		if !in[it] {
			kept = append(kept, it)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// execute runs a batch and answers each of its requests.
func (s *Scheduler) execute(batch []*item) {
	start := time.Now()
	rows := 0
	for _, it := range batch {
		rows += it.rows
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	var outs []map[string]*ir.Tensor
	var err error
	if len(batch) == 1 {
		var out map[string]*ir.Tensor
		out, err = s.run(ctx, batch[0].in)
		outs = []map[string]*ir.Tensor{out}
	} else {
		outs, err = s.runStacked(ctx, batch, rows)
	}
	compute := time.Since(start)
	if s.cfg.OnRun != nil {
		s.cfg.OnRun(len(batch), rows, compute, err)
	}
	for i, it := range batch {
		r := result{queued: start.Sub(it.enq), err: err}
		if err == nil {
			r.out = outs[i]
		}
		it.done <- r
	}
}

// batchContext is the context a batch runs under: a lone request's own,
// or for a stacked batch one that ends when every request in it has given
// up (its deadline passed or its client cancelled), so that the run stops
// and frees its instance; requests that gave up while others still wait get
// their outputs discarded.
func batchContext(batch []*item) (context.Context, context.CancelFunc) {
	if len(batch) == 1 {
		return batch[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(batch[0].ctx))
	var left atomic.Int32
	left.Store(int32(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, it := range batch {
		stops[i] = context.AfterFunc(it.ctx, func() {
			if left.Add(-1) == 0 {
				cancel(context.Cause(it.ctx))
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}

// runStacked stacks the batch's inputs along dim 0, runs once and splits
// every output back along dim 0.
func (s *Scheduler) runStacked(ctx context.Context, batch []*item, rows int) ([]map[string]*ir.Tensor, error) {
	in := make(map[string]*ir.Tensor, len(batch[0].in))
	for name := range batch[0].in {
		parts := make([]*ir.Tensor, len(batch))
		for i, it := range batch {
			parts[i] = it.in[name]
		}
		in[name] = stack(parts, rows)
	}
	out, err := s.run(ctx, in)
	if err != nil {
		return nil, err
	}
	outs := make([]map[string]*ir.Tensor, len(batch))
	for i := range outs {
		outs[i] = make(map[string]*ir.Tensor, len(out))
	}
	for name, t := range out {
		if len(t.Shape) == 0 || t.Shape[0] != rows {
			return nil, fmt.Errorf("output %q has shape %v for a batch of %d rows: its dim 0 is not the batch dim, so this model cannot be batched", name, t.Shape, rows)
		}
		row := 0
		for i, it := range batch {
			outs[i][name] = sliceRows(t, row, row+it.rows)
			row += it.rows
		}
	}
	return outs, nil
}

// batchKey says which requests can be stacked with this one: all inputs
// need a dim 0 of the same size (the request's rows) and equal element
// types and trailing dims. "" means the request runs alone.
func batchKey(in map[string]*ir.Tensor) (key string, rows int) {
	names := make([]string, 0, len(in))
	for name := range in {
		names = append(names, name)
	}
	sort.Strings(names)
	rows = -1
	var b []byte
	for _, name := range names {
		t := in[name]
		if len(t.Shape) == 0 || (rows >= 0 && t.Shape[0] != rows) || t.Shape[0] == 0 {
			return "", 0
		}
		rows = t.Shape[0]
		b = strconv.AppendQuote(b, name)
		b = strconv.AppendInt(b, int64(t.DType), 10)
		for _, d := range t.Shape[1:] {
			b = append(b, 'x')
			b = strconv.AppendInt(b, int64(d), 10)
		}
		b = append(b, ';')
	}
	return string(b), rows
}

// stack concatenates tensors of equal type and trailing dims along dim 0.
func stack(parts []*ir.Tensor, rows int) *ir.Tensor {
	shape := append([]int{rows}, parts[0].Shape[1:]...)
	out := ir.NewTensor(parts[0].DType, shape)
	dst := reflect.ValueOf(out.Data)
	off := 0
	for _, p := range parts {
		off += reflect.Copy(dst.Slice(off, dst.Len()), reflect.ValueOf(p.Data))
	}
	return out
}

// sliceRows is rows [from, to) of t along dim 0, sharing t's data.
func sliceRows(t *ir.Tensor, from, to int) *ir.Tensor {
	per := 1
	for _, d := range t.Shape[1:] {
		per *= d
	}
	shape := append([]int{to - from}, t.Shape[1:]...)
	data := reflect.ValueOf(t.Data).Slice3(from*per, to*per, to*per).Interface()
	return &ir.Tensor{DType: t.DType, Shape: shape, Data: data}
}
