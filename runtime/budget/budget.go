// Package budget is attnrun's memory budget: one byte count that every
// allocation decision of a session consults (planned arenas, folded
// constants, kernel scratch, the plan cache, the shared tensor region), so
// that a model cannot grow memory past it and a plan that cannot fit is
// refused before anything is allocated.
//
// A Budget counts reservations; it does not allocate. Code that is about to
// hold memory for a while reserves it first (Reserve) and releases it when
// the memory is dropped (Release). A nil *Budget has no limit.
//
// The default limit (DefaultLimit) is half of the smallest of the
// machine's memory (MemTotal), the memory limit of the process's cgroup
// (memory.max, or memory.limit_in_bytes under cgroup v1) and its
// address-space limit (ulimit -v): the host and its backend process each
// keep to the budget, so together they stay within the machine.
package budget

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// ErrExceeded is wrapped by errors about memory the budget does not allow.
var ErrExceeded = errors.New("over the memory budget")

// LimitName is how errors name the budget's setting. The CLI rewrites it
// to its flag (--max-memory).
const LimitName = "Options.MaxMemoryBytes"

// Budget is a memory budget shared by one session's allocations (one per
// process: the host's and each backend's). It is safe for concurrent use.
type Budget struct {
	limit atomic.Int64 // ≤ 0: unlimited
	used  atomic.Int64
}

// New returns a budget of limit bytes; limit ≤ 0 means no limit (Reserve
// always succeeds, Left is math.MaxInt64).
func New(limit int64) *Budget {
	b := &Budget{}
	b.limit.Store(limit)
	return b
}

// Limit returns the budget's limit (≤ 0: none).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit.Load()
}

// SetLimit changes the limit; reservations already made stand.
func (b *Budget) SetLimit(limit int64) { b.limit.Store(limit) }

// Used returns the bytes reserved.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Left returns the bytes that can still be reserved (0 when the
// reservations exceed the limit; math.MaxInt64 without a limit).
func (b *Budget) Left() int64 {
	lim := b.Limit()
	if lim <= 0 {
		return math.MaxInt64
	}
	return max(lim-b.Used(), 0)
}

// Reserve reserves n bytes if they fit and reports whether they did.
func (b *Budget) Reserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		lim, used := b.limit.Load(), b.used.Load()
		if lim > 0 && (n > lim || used > lim-n) {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Release returns n reserved bytes.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.used.Add(-n)
}

// Describe names the budget in messages: "the memory budget
// (Options.MaxMemoryBytes 8 GiB)".
func (b *Budget) Describe() string {
	return fmt.Sprintf("the memory budget (%s %s)", LimitName, Format(b.Limit()))
}

// Exceeded returns the error for need bytes of what (e.g. `output "y"
// float32[1024x1024]`) that the budget cannot give, saying how much is
// left; it matches ErrExceeded.
func (b *Budget) Exceeded(what string, need, left int64) error {
	return Errorf("%s needs %s; %s has %s left", what, FormatExact(need), b.Describe(), Format(left))
}

// Errorf formats an error about memory the budget does not allow; it
// matches ErrExceeded (errors.Is).
func Errorf(format string, args ...any) error {
	return &exceededError{fmt.Sprintf(format, args...)}
}

type exceededError struct{ msg string }

func (e *exceededError) Error() string        { return e.msg }
func (e *exceededError) Is(target error) bool { return target == ErrExceeded }

// Format renders a byte count for people: "512 MiB", "8 GiB", "1.5 GiB",
// "100 bytes".
func Format(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v, u = v/1024, u+1
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + units[u]
}

// FormatExact renders a byte count with its exact value when Format
// rounds it: "4294967296 bytes (4 GiB)".
func FormatExact(n int64) string {
	if n < 1024 {
		return Format(n)
	}
	return fmt.Sprintf("%d bytes (%s)", n, Format(n))
}

// Parse reads a byte count: a plain number of bytes, or a number with a
// unit: KiB, MiB, GiB, TiB (powers of 1024; K, M, G, T and KB, MB, GB, TB
// are read the same way), case-insensitive, with an optional space:
// "8GiB", "512 MiB", "1.5g", "1000000".
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%q is not a byte count (want e.g. 8GiB, 512MiB or 1000000)", s)
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20,
		"g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (want KiB, MiB, GiB or TiB)", s, unit)
	}
	v *= float64(uint64(1) << sh)
	if v >= math.MaxInt64 || v < 1 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return int64(v), nil
}

// DefaultLimit returns the default budget: half of the smallest of the
// machine's memory, the process's cgroup memory limit and its
// address-space limit (see Machine).
func DefaultLimit() int64 {
	m, _ := Machine()
	return m / 2
}

// Machine returns the memory this process may use, and where the number
// comes from ("MemTotal", "cgroup memory.max", "ulimit -v"): the
// smallest of the machine's memory and the limits on the process.
func Machine() (int64, string) {
	best, from := int64(math.MaxInt64), "no limit found"
	consider := func(v int64, what string) {
		if v > 0 && v < best {
			best, from = v, what
		}
	}
	consider(memTotal(), "MemTotal")
	for _, c := range cgroupLimits() {
		consider(c.bytes, c.file)
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) == nil && rl.Cur != math.MaxUint64 && rl.Cur < math.MaxInt64 {
		consider(int64(rl.Cur), "ulimit -v")
	}
	if best == math.MaxInt64 {
		best = 8 << 30 // nothing readable (not Linux?): a modest guess
	}
	return best, from
}

// memTotal reads MemTotal from /proc/meminfo (0 when unreadable).
func memTotal() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

type cgroupLimit struct {
	file  string
	bytes int64
}

// cgroupLimits reads the memory limits of the process's cgroup: v2
// memory.max and v1 memory.limit_in_bytes, at the cgroup's own path and
// at the mount's root (what a container sees).
func cgroupLimits() []cgroupLimit {
	var files []string
	if data, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				files = append(files, "/sys/fs/cgroup"+f[2]+"/memory.max")
			case strings.Contains(","+f[1]+",", ",memory,"):
				files = append(files, "/sys/fs/cgroup/memory"+f[2]+"/memory.limit_in_bytes")
			}
		}
	}
	files = append(files, "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
	var out []cgroupLimit
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil { // "max": no limit
			continue
		}
		name := "cgroup memory.max"
		if strings.HasSuffix(f, "limit_in_bytes") {
			name = "cgroup memory.limit_in_bytes"
		}
		out = append(out, cgroupLimit{name, v})
	}
	return out
}
