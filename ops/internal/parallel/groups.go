package parallel

import "sync/atomic"

// RunGroups runs groups of tasks on workers workers (at least one): group
// g has count(g) tasks, numbered from 0, and start(w) returns worker w's
// function, which it calls for every task it takes with the task's group
// g and number i, and next, the task the worker will try for after it
// (i+1 or i-1 in the same group; -1 when there is none), for a kernel that
// prefetches the next task's data.
//
// Worker w owns group w mod groups: it takes that group's tasks from the
// front, in order, and then helps with the other groups' from their back.
// The worker that owns a group so runs related tasks in order on one core
// (a GEMM's row blocks over one column group, an attention's query blocks
// of one head: the data one leaves in cache the next reads), while a
// worker that ends early (on a shared VM the vCPUs do not run at one
// speed) takes over another's last tasks, where they disturb its order
// least. With one worker the groups run one after another, front to back.
func RunGroups(workers, groups int, count func(g int) int, start func(w int) func(g, i, next int)) {
	if groups <= 0 {
		return
	}
	if workers <= 1 {
		do := start(0)
		for g := range groups {
			n := count(g)
			for i := range n {
				next := i + 1
				if next == n {
					next = -1
				}
				do(g, i, next)
			}
		}
		return
	}
	queues := make([]taskQueue, groups)
	for g := range queues {
		queues[g].ends.Store(uint64(count(g)))
	}
	Run(workers, func(w int) {
		do := start(w)
		own := w % groups
		q := &queues[own]
		for i, ok := q.popFront(); ok; i, ok = q.popFront() {
			do(own, i, q.peekFront())
		}
		for k := 1; k < groups; k++ {
			g := (own + k) % groups
			q := &queues[g]
			for i, ok := q.popBack(); ok; i, ok = q.popBack() {
				do(g, i, q.peekBack())
			}
		}
	})
}

// taskQueue hands out tasks [front, back) from both ends; both live in
// one word (front in the high half), changed by compare-and-swap.
type taskQueue struct{ ends atomic.Uint64 }

// load returns the queue's ends.
func (q *taskQueue) load() (v, front, back uint64) {
	v = q.ends.Load()
	return v, v >> 32, v & 0xffffffff
}

// popFront takes the first task left; ok is false when none is.
func (q *taskQueue) popFront() (i int, ok bool) {
	for {
		v, front, back := q.load()
		if front >= back {
			return 0, false
		}
		if q.ends.CompareAndSwap(v, (front+1)<<32|back) {
			return int(front), true
		}
	}
}

// popBack takes the last task left; ok is false when none is.
func (q *taskQueue) popBack() (i int, ok bool) {
	for {
		v, front, back := q.load()
		if front >= back {
			return 0, false
		}
		if q.ends.CompareAndSwap(v, front<<32|(back-1)) {
			return int(back - 1), true
		}
	}
}

// peekFront returns the task popFront would take now, or -1.
func (q *taskQueue) peekFront() int {
	if _, front, back := q.load(); front < back {
		return int(front)
	}
	return -1
}

// peekBack returns the task popBack would take now, or -1.
func (q *taskQueue) peekBack() int {
	if _, front, back := q.load(); front < back {
		return int(back - 1)
	}
	return -1
}
