package hugepages

import "golang.org/x/sys/unix"

// supported: Linux has transparent huge pages that a process can ask for.
const supported = true

// advise asks the kernel to back b (whole, aligned huge pages) with huge
// pages: MADV_HUGEPAGE for pages not touched yet, MADV_COLLAPSE for those
// already there. Both fail harmlessly where the kernel does not allow or
// know them (MADV_COLLAPSE also refuses a range with no page touched yet,
// which MADV_HUGEPAGE has covered); the buffer is then plain memory.
func advise(b []byte) {
	if unix.Madvise(b, unix.MADV_HUGEPAGE) != nil {
		return
	}
	_ = unix.Madvise(b, unix.MADV_COLLAPSE)
}

// release hands b's whole pages back to the kernel (MADV_DONTNEED): they
// read as zeros if touched again. Floats calls it on the parts of its
// allocation outside the slice it returns, which nothing reads.
func release(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_DONTNEED)
	}
}
