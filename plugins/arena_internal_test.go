package plugins

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/attnrun/attnrun/runtime/budget"
)

// TestArenaAlloc walks the arena's allocator through a table of steps:
// page-aligned first-fit blocks, reuse of freed ones (zeroed), coalescing,
// growth, the limit, the budget, and the truncation of an empty arena.
func TestArenaAlloc(t *testing.T) {
	type step struct {
		alloc    int64 // bytes to allocate (0: free block free instead)
		free     int   // index of the block to free (alloc == 0)
		wantOff  int64 // offset of the new block
		wantErr  bool
		wantSize int64 // the file's size after the step
	}
	const mib = 1 << 20
	cases := []struct {
		name   string
		limit  int64
		budget int64
		steps  []step
	}{
		{name: "first fit and reuse", limit: 8 * mib, steps: []step{
			{alloc: 100, wantOff: 0, wantSize: mib},
			{alloc: 5000, wantOff: 4096, wantSize: mib},
			{alloc: 4096, wantOff: 3 * 4096, wantSize: mib},
			{free: 1, wantSize: mib},
			{alloc: 3000, wantOff: 4096, wantSize: mib}, // first fit: the freed hole
			{alloc: 4096, wantOff: 2 * 4096, wantSize: mib},
		}},
		{name: "coalescing", limit: 8 * mib, steps: []step{
			{alloc: 4096, wantOff: 0, wantSize: mib},
			{alloc: 4096, wantOff: 4096, wantSize: mib},
			{alloc: 4096, wantOff: 8192, wantSize: mib},
			{alloc: 4096, wantOff: 12288, wantSize: mib},
			{free: 1, wantSize: mib},
			{free: 2, wantSize: mib},
			{alloc: 8192, wantOff: 4096, wantSize: mib}, // the two holes as one
		}},
		{name: "growth and limit", limit: 3 * mib, steps: []step{
			{alloc: mib + 1, wantOff: 0, wantSize: 2 * mib},
			{alloc: mib / 2, wantOff: mib + 4096, wantSize: 2 * mib},
			{alloc: mib, wantOff: mib + 4096 + mib/2, wantSize: 3 * mib},
			{alloc: mib, wantErr: true, wantSize: 3 * mib},
		}},
		{name: "budget", limit: 8 * mib, budget: 2 * mib, steps: []step{
			{alloc: mib, wantOff: 0, wantSize: mib},
			{alloc: mib, wantOff: mib, wantSize: 2 * mib},
			{alloc: 4096, wantErr: true, wantSize: 2 * mib},
		}},
		{name: "empty arena truncated", limit: 8 * mib, steps: []step{
			{alloc: 4096, wantOff: 0, wantSize: mib},
			{alloc: 2 * mib, wantOff: 4096, wantSize: 3 * mib},
			{free: 0, wantSize: 3 * mib},
			{free: 1, wantSize: 0},
			{alloc: 4096, wantOff: 0, wantSize: mib},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := budget.New(c.budget)
			a, err := NewArena(c.limit, b)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			var blocks [][]byte
			for i, s := range c.steps {
				if s.alloc == 0 {
					if err := a.Free(blocks[s.free]); err != nil {
						t.Fatalf("step %d: free: %v", i, err)
					}
				} else {
					got, err := a.Alloc(s.alloc)
					if (err != nil) != s.wantErr {
						t.Fatalf("step %d: alloc %d: error %v, want error %v", i, s.alloc, err, s.wantErr)
					}
					if err == nil {
						off, _ := within(got, a.mem)
						if off != s.wantOff || int64(len(got)) != s.alloc {
							t.Errorf("step %d: alloc %d at %d (%d bytes), want at %d", i, s.alloc, off, len(got), s.wantOff)
						}
						for j, v := range got {
							if v != 0 {
								t.Fatalf("step %d: byte %d of a new block is %d, want 0", i, j, v)
							}
						}
						for j := range got {
							got[j] = 0xAB // dirty it: a reuse must be zeroed
						}
						blocks = append(blocks, got)
					}
				}
				if a.Size() != s.wantSize {
					t.Errorf("step %d: arena size %d, want %d", i, a.Size(), s.wantSize)
				}
				if c.budget > 0 && b.Used() != a.Size() {
					t.Errorf("step %d: budget holds %d, the arena %d", i, b.Used(), a.Size())
				}
			}
		})
	}
}

// TestArenaFreeErrors: freeing twice, or bytes the arena did not hand
// out, is an error; Alloc after Close is too, while a block still held
// stays readable and writable until freed.
func TestArenaFreeErrors(t *testing.T) {
	a, err := NewArena(4<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := a.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(make([]byte, 10)); err == nil {
		t.Error("freeing heap bytes: no error")
	}
	if err := a.Free(blk); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(blk); err == nil {
		t.Error("freeing twice: no error")
	}
	held, err := a.Alloc(8192)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, err := a.Alloc(10); err == nil {
		t.Error("alloc after Close: no error")
	}
	held[8191] = 7 // still mapped
	if held[8191] != 7 || a.file() != nil {
		t.Errorf("after Close: held block reads %d, file %v", held[8191], a.file())
	}
	if err := a.Free(held); err != nil {
		t.Fatal(err)
	}
	if a.mem != nil || a.f != nil {
		t.Error("the last free after Close left the arena mapped")
	}
}

// TestArenaPins: a block a Run pins goes back only when the Run lets go;
// an abandoned Run's blocks make a later Run wait until it is drained, and
// that Run gives up when its context ends first.
func TestArenaPins(t *testing.T) {
	a, err := NewArena(4<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	x, _ := a.Alloc(4096)
	y, _ := a.Alloc(4096)
	run := arenaPins{a: a}
	if _, ok := run.ref(x, nil, ""); !ok {
		t.Fatal("x not found in the arena")
	}
	if _, ok := run.ref(y, map[string][]byte{"out": y[10:20]}, ""); ok {
		t.Error("y overlaps a bound output, yet it was passed by reference")
	}
	if _, err := run.pin(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(x); err != nil {
		t.Fatal(err)
	}
	if !a.Contains(y) || a.Contains(x) {
		t.Error("after Free: x still live, or y gone")
	}
	if z, _ := a.Alloc(4096); &z[0] == &x[0] {
		t.Fatal("x's block was handed out again while a Run used it")
	}
	run.unpin()
	if z, _ := a.Alloc(4096); &z[0] != &x[0] {
		t.Error("x's block did not come back after the Run let go")
	}

	// An abandoned Run holding y.
	old := arenaPins{a: a}
	old.ref(y, nil, "")
	if _, err := old.pin(context.Background()); err != nil {
		t.Fatal(err)
	}
	letGo := old.abandon()
	next := arenaPins{a: a}
	next.ref(y, nil, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := next.pin(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("pin while an abandoned Run holds the block: %v, want the context's deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := next.pin(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("pin returned (%v) before the abandoned Run was drained", err)
	case <-time.After(20 * time.Millisecond):
	}
	letGo()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	next.unpin()
}
