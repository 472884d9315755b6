package plugins

import "syscall"

// ProcessMaxRSS is the calling process's peak resident set size in bytes
// (Linux reports ru_maxrss in KiB), or -1 when unknown. Backends report it
// in Stats; `attnrun bench` prints it.
func ProcessMaxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return int64(ru.Maxrss) * 1024
}
