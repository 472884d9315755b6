package parallel

import (
	"fmt"
	"sync"
	"testing"
)

// TestRunGroups: every task of every group runs exactly once, for worker
// and group counts alike and unlike; each worker takes its own group's
// tasks in order from the front before any other group's, and the
// others' in order from the back; next names the task the worker tries
// for after each.
func TestRunGroups(t *testing.T) {
	for _, c := range []struct{ workers, groups int }{
		{1, 1}, {1, 3}, {2, 1}, {2, 2}, {3, 2}, {2, 5}, {4, 4},
	} {
		t.Run(fmt.Sprintf("%dworkers/%dgroups", c.workers, c.groups), func(t *testing.T) {
			count := func(g int) int { return 50 + 7*g }
			var mu sync.Mutex
			seen := map[[2]int]int{}
			type call struct{ g, i, next int }
			calls := make([][]call, c.workers)
			RunGroups(c.workers, c.groups, count, func(w int) func(g, i, next int) {
				return func(g, i, next int) {
					mu.Lock()
					seen[[2]int{g, i}]++
					mu.Unlock()
					calls[w] = append(calls[w], call{g, i, next})
				}
			})
			for g := range c.groups {
				for i := range count(g) {
					if n := seen[[2]int{g, i}]; n != 1 {
						t.Fatalf("group %d task %d ran %d times", g, i, n)
					}
				}
			}
			for w, cs := range calls {
				own := w % c.groups
				left := false // the worker has taken another group's task
				for k, cl := range cs {
					if cl.next >= count(cl.g) || cl.next == cl.i {
						t.Fatalf("worker %d: group %d task %d has next %d", w, cl.g, cl.i, cl.next)
					}
					forward := c.workers == 1 || cl.g == own
					if cl.g == own && left && c.workers > 1 {
						t.Fatalf("worker %d took its own group's task %d after another group's", w, cl.i)
					}
					left = left || cl.g != own
					if k == 0 || cs[k-1].g != cl.g {
						continue
					}
					if prev := cs[k-1].i; forward && cl.i <= prev || !forward && cl.i >= prev {
						t.Fatalf("worker %d: group %d task %d after task %d (from the front: %v)", w, cl.g, cl.i, prev, forward)
					}
					// Only a group's owner takes from its front, so where
					// each group has one owner, next is the owner's next task.
					if (c.workers == 1 || forward && c.workers <= c.groups) && cs[k-1].next != cl.i {
						t.Fatalf("worker %d: group %d task %d named next %d, then ran %d", w, cl.g, cs[k-1].i, cs[k-1].next, cl.i)
					}
					if next := cs[k-1].next; next >= 0 && (forward && next <= cs[k-1].i || !forward && next >= cs[k-1].i) {
						t.Fatalf("worker %d: group %d task %d named next %d, against its direction", w, cl.g, cs[k-1].i, next)
					}
				}
			}
		})
	}
}

// TestTaskQueue: the two ends meet without losing or repeating a task,
// from one goroutine per end.
func TestTaskQueue(t *testing.T) {
	for _, n := range []int{0, 1, 2, 1000} {
		var q taskQueue
		q.ends.Store(uint64(n))
		var front, back []int
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, ok := q.popFront(); ok; i, ok = q.popFront() {
				front = append(front, i)
			}
		}()
		go func() {
			defer wg.Done()
			for i, ok := q.popBack(); ok; i, ok = q.popBack() {
				back = append(back, i)
			}
		}()
		wg.Wait()
		if len(front)+len(back) != n {
			t.Fatalf("n=%d: %d from the front and %d from the back", n, len(front), len(back))
		}
		for k, i := range front {
			if i != k {
				t.Fatalf("n=%d: front's %dth task is %d", n, k, i)
			}
		}
		for k, i := range back {
			if i != n-1-k {
				t.Fatalf("n=%d: back's %dth task is %d", n, k, i)
			}
		}
		if q.peekFront() != -1 || q.peekBack() != -1 {
			t.Fatalf("n=%d: empty queue peeks %d, %d", n, q.peekFront(), q.peekBack())
		}
	}
}
