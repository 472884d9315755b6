//go:build !linux

package parallel

import "runtime"

// yield lets other goroutines run (no portable OS-level yield).
func yield() { runtime.Gosched() }
