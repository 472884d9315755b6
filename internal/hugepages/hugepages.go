// Package hugepages backs large, long-lived float32 buffers (weights
// packed for the GEMM, a run's arena buffers and scratch, the GEMM's
// packing buffers) with the kernel's transparent huge pages where it
// allows them.
//
// With 4 KiB pages a GEMM that reads a 7 MiB packed weight, streams a
// 1.5 MiB activation whose rows lie 3 KiB apart, and stores tiles whose
// eight rows lie in eight pages misses the TLB often enough to show: seed
// 000's QKV projection (512×768 · 768×2304, 2 threads, called on two
// copies of its operands in turn) took 2.5–3.1% less time with its three
// operands in huge pages, 0.6–2.7% with one; in the model the step took 4%
// less (2-core Zen 4 VM, 2026-11-29; docs/performance-notes.md, session
// 30).
//
// Most Linux systems set /sys/kernel/mm/transparent_hugepage/enabled to
// "madvise": only ranges advised with MADV_HUGEPAGE get huge pages, and Go
// advises none of its heap. Floats allocates from the Go heap as make
// does (the garbage collector owns the memory, so slices of it stay safe
// however long they live), starts the slice at a 2 MiB boundary inside a
// slightly larger allocation, and advises its whole 2 MiB pages. Memory
// not touched yet then faults in as huge pages; memory the heap had used
// before is collapsed into them at once (MADV_COLLAPSE, Linux 6.1 and
// later; an older kernel's khugepaged does it in the background). The
// slice's last partial 2 MiB stays in small pages, so no page holds more
// than the slice uses, and the allocation's pages outside the slice are
// handed back (MADV_DONTNEED), so that RSS does not grow. Where the kernel
// refuses ("never") the buffers are plain memory and nothing else changes;
// on other systems Floats is make.
//
// ATTNRUN_HUGE_PAGES=off in the environment (read once, at start; backend
// processes inherit it) turns it off, to measure the difference.
package hugepages

import (
	"os"
	"unsafe"
)

// Size is the huge page size Floats aligns to (x86-64's and arm64's
// 2 MiB transparent huge pages).
const Size = 2 << 20

// MinBytes is the smallest buffer Floats asks huge pages for: a smaller
// one holds no whole huge page.
const MinBytes = Size

// Env names the environment variable that turns huge pages off
// (ATTNRUN_HUGE_PAGES=off).
const Env = "ATTNRUN_HUGE_PAGES"

// enabled is fixed at start from Env and the OS; nothing changes it
// afterwards.
var enabled = supported && os.Getenv(Env) != "off"

// Enabled reports whether Floats asks for huge pages: on Linux, unless
// Env is "off".
func Enabled() bool { return enabled }

// Floats returns a zeroed []float32 of length and capacity n, like
// make([]float32, n). When n float32s fill at least one huge page and
// Enabled, the slice starts at a huge page boundary inside a larger
// allocation, its whole huge pages are advised for the kernel to back
// with huge pages (advise), and the pages of the allocation outside the
// slice are handed back (release: the heap may have touched them before).
func Floats(n int) []float32 {
	if !enabled || n*4 < MinBytes {
		return make([]float32, n)
	}
	// A huge page boundary lies within the first Size bytes of any
	// allocation.
	whole := make([]float32, n+Size/4)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&whole[0])), len(whole)*4)
	head := int(-uintptr(unsafe.Pointer(&mem[0])) & (Size - 1)) // bytes before the boundary
	end := head + n*4
	advise(mem[head : head+n*4&^(Size-1)])
	release(wholePages(mem, 0, head))
	release(wholePages(mem, end, len(mem)))
	return whole[head/4 : head/4+n : head/4+n]
}

// wholePages returns the whole pages (of the system's page size, aligned
// in memory) within mem[lo:hi]: madvise needs an aligned start, and
// rounds the length up, which must not reach past hi.
func wholePages(mem []byte, lo, hi int) []byte {
	page := uintptr(os.Getpagesize())
	base := uintptr(unsafe.Pointer(&mem[0]))
	from := int((base+uintptr(lo)+page-1)&^(page-1) - base)
	to := int((base+uintptr(hi))&^(page-1) - base)
	if to <= from {
		return nil
	}
	return mem[from:to]
}
