package plugins

import (
	"runtime"
	"sync"
)

// Copying tensors across the process boundary: the host writes inputs into
// the shared region and copies outputs out of it, and a backend copies the
// outputs it could not compute in place into the region. A large tensor is
// copied by several threads: one core's copy does not saturate the memory
// bandwidth of the machine.

// ParallelCopyBytes is the size from which copyBytes splits a copy over
// threads. BenchmarkCopyBytes places it: on the 2-core AMD EPYC machine
// of the project (2026-11-24) one thread's copy runs at 75-87 GB/s up to
// 6 MiB (in the 32 MiB L3) and at the memory's 28 GB/s at 64 MiB, and two
// threads were slower at every size from 64 KiB to 24 MiB (by 10-70%) and
// only tied at 64 MiB: one core saturates what the machine has. The
// threshold is therefore that tie; a machine with more memory channels
// per core gains from splitting earlier.
const ParallelCopyBytes = 64 << 20

// copyChunk keeps the pieces of a parallel copy whole cache lines (the
// region aligns tensors to shmAlign).
const copyChunk = shmAlign

// copyBytes copies src into dst (as copy does: min of both lengths) with
// up to threads threads (a session's thread count; 0: its default, every
// core) when it is at least ParallelCopyBytes long. threads is capped at
// the machine's cores.
func copyBytes(dst, src []byte, threads int) int {
	return copySplit(dst, src, copyThreads(min(len(dst), len(src)), threads))
}

// copySplit copies src into dst in up to threads pieces, each but the last
// a multiple of copyChunk long, one on the calling thread.
func copySplit(dst, src []byte, threads int) int {
	n := min(len(dst), len(src))
	if threads <= 1 || n < threads*copyChunk {
		return copy(dst, src)
	}
	per := ((n+threads-1)/threads + copyChunk - 1) &^ (copyChunk - 1) // at most threads pieces
	var wg sync.WaitGroup
	for lo := per; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	copy(dst[:min(per, n)], src[:min(per, n)])
	wg.Wait()
	return n
}

// copyThreads is how many threads copy n bytes: one below
// ParallelCopyBytes, else threads capped at the cores the process may use
// and at one per ParallelCopyBytes/2 (so that every thread copies enough
// to pay for starting it).
func copyThreads(n, threads int) int {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	if n < ParallelCopyBytes || threads <= 1 {
		return 1
	}
	return min(threads, runtime.GOMAXPROCS(0), runtime.NumCPU(), n/(ParallelCopyBytes/2))
}
