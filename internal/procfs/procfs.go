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
	return parseStat(fmt.Sprintf("/proc/%d/stat", pid))
}

// parseStat reads the state letter and the parent's pid from a stat file.
func parseStat(path string) (state string, ppid int) {
	stat, err := os.ReadFile(path)
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

// Stopped reports whether every thread of pid is stopped (state "T").
// SIGSTOP returns before the signal has reached every thread, and a
// process whose main thread shows "T" may still answer from another one;
// tests that need a backend that cannot answer wait for Stopped.
func Stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			return false
		}
		if st, _ := threadState(pid, tid); st != "T" {
			return false
		}
	}
	return true
}

// threadState is State for thread tid of process pid.
func threadState(pid, tid int) (state string, ppid int) {
	return parseStat(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
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
	n, _ := Size(pid, "VmRSS")
	return n
}

// Size reads a size field of /proc/PID/status ("VmRSS", "VmHWM", ...) in
// bytes.
func Size(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, field, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// WithEnv lists the live processes (zombies left out) whose environment
// holds the entry "KEY=value" exactly: a test marks the processes it starts
// with a variable of its own, which their children inherit, and counts them
// wherever they are in the process tree. Only processes whose environment
// this one may read (its user's) are seen.
func WithEnv(entry string) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, e := range strings.Split(string(env), "\x00") {
			if e == entry {
				if !Gone(pid) {
					out = append(out, pid)
				}
				break
			}
		}
	}
	return out
}
