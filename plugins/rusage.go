package plugins

import (
	"os"
	"syscall"

	"github.com/attnrun/attnrun/internal/procfs"
)

// ProcessMaxRSS is the calling process's peak resident set size in bytes,
// or -1 when unknown. Backends report it in Stats; `attnrun bench` prints
// it.
//
// On Linux it is VmHWM, the high-water mark of the process's own memory
// map. getrusage's ru_maxrss, which it was until 2026-11-25, carries the
// parent's resident set across fork and exec: a child that holds 2 MiB
// reads 403 MiB started from a Node.js process of 400 MiB, and 302 MiB
// from a Go process of 300 MiB (VmHWM 2 MiB in both), so a backend read
// at least its host's size and `attnrun bench` at least its caller's.
// Where /proc is missing it falls back to ru_maxrss.
func ProcessMaxRSS() int64 {
	if n, err := procfs.Size(os.Getpid(), "VmHWM"); err == nil && n > 0 {
		return n
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return int64(ru.Maxrss) * 1024 // Linux reports ru_maxrss in KiB
}
