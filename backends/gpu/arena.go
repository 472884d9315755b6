package gpu

import (
	"fmt"
	"sort"
)

// arenaAlign is the alignment of every buffer in a device region (cuBLAS
// and vector loads like 256-byte alignment; cuMemAlloc returns 256-aligned
// addresses).
const arenaAlign = 256

// interval is one buffer to place in an arena: its size and the steps during
// which it is live, inclusive (first = -1 for partition inputs, written
// before the first step).
type interval struct {
	name        string
	bytes       int64
	first, last int
}

// alignUp rounds n up to a multiple of arenaAlign.
func alignUp(n int64) int64 { return (n + arenaAlign - 1) / arenaAlign * arenaAlign }

// planArena assigns each buffer a byte offset so that buffers live at the
// same time never overlap, and returns the offsets and the arena's size.
// It places buffers largest first, each at the lowest aligned offset that
// fits between the buffers already placed whose lifetimes intersect its own
// (greedy by size, as TensorFlow Lite's and ONNX Runtime's planners).
func planArena(bufs []interval) (map[string]int64, int64, error) {
	order := make([]int, len(bufs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := bufs[order[x]], bufs[order[y]]
		if a.bytes != b.bytes {
			return a.bytes > b.bytes
		}
		return a.first < b.first
	})
	type placed struct {
		off, end    int64
		first, last int
	}
	var done []placed
	offs := make(map[string]int64, len(bufs))
	var total int64
	for _, i := range order {
		b := bufs[i]
		if b.bytes < 0 || b.first > b.last {
			return nil, 0, fmt.Errorf("buffer %q: bad size %d or lifetime [%d, %d]", b.name, b.bytes, b.first, b.last)
		}
		if _, dup := offs[b.name]; dup {
			return nil, 0, fmt.Errorf("buffer %q planned twice", b.name)
		}
		size := alignUp(max(b.bytes, 1))
		var busy []placed
		for _, p := range done {
			if p.first <= b.last && b.first <= p.last {
				busy = append(busy, p)
			}
		}
		sort.Slice(busy, func(x, y int) bool { return busy[x].off < busy[y].off })
		off := int64(0)
		for _, p := range busy {
			if off+size <= p.off {
				break
			}
			off = max(off, p.end)
		}
		offs[b.name] = off
		done = append(done, placed{off: off, end: off + size, first: b.first, last: b.last})
		total = max(total, off+size)
	}
	return offs, total, nil
}

// packRegion places buffers one after another (aligned), for regions whose
// contents all live together (weights, per-plan constants).
func packRegion(names []string, bytes map[string]int64) (map[string]int64, int64) {
	offs := make(map[string]int64, len(names))
	var total int64
	for _, n := range names {
		offs[n] = total
		total += alignUp(max(bytes[n], 1))
	}
	return offs, total
}
