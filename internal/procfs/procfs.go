// Package procfs reads the few facts about processes that attnrun's
// lifecycle tests and soak test check, from Linux's /proc.
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// State is the state letter of /proc/PID/stat ("R", "S", "T" for stopped,
// "Z" for a zombie) and the parent's pid; "" when the process is gone.
func State(pid int) (state string, ppid int) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0
	}
	s := string(stat)
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return "", 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid
}

// Gone reports whether pid has ended (a zombie has).
func Gone(pid int) bool {
	st, _ := State(pid)
	return st == "" || st == "Z"
}

// Children lists pid's child processes (from /proc/PID/task/*/children).
func Children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// RSS is the process's resident set size (VmRSS) in bytes, 0 when unknown.
func RSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
