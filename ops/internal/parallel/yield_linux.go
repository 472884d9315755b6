package parallel

import "syscall"

// yield gives the CPU to any other runnable thread on this one
// (sched_yield): an OS-level yield, because runtime.Gosched only lets other
// goroutines of this process run, not the host process's threads.
func yield() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}
