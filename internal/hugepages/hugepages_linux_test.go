package hugepages

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestFloatsGetsHugePages checks with the kernel that a buffer from Floats
// is backed by huge pages once written: the AnonHugePages of its mapping
// in /proc/self/smaps grows by its whole huge pages. It skips where the
// kernel gives none to advised memory (transparent_hugepage "never") or
// had none free (its fallback counters in /proc/vmstat moved).
func TestFloatsGetsHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages are off here (%q, %v)", strings.TrimSpace(string(mode)), err)
	}
	if !Enabled() {
		t.Skipf("%s=off", Env)
	}
	fallbacks := thpFallbacks(t)
	const pages = 4
	s := Floats(pages*Size/4 + 1000)
	before := anonHugeAt(t, uintptr(unsafe.Pointer(&s[0])))
	for i := range s {
		s[i] = float32(i)
	}
	after := anonHugeAt(t, uintptr(unsafe.Pointer(&s[0])))
	for i, v := range s {
		if v != float32(i) {
			t.Fatalf("s[%d] = %v after writing %d", i, v, i)
		}
	}
	if got := after - before; got < pages*Size {
		if thpFallbacks(t) > fallbacks {
			t.Skipf("the kernel had no free huge page (AnonHugePages of the mapping %d → %d bytes)", before, after)
		}
		t.Fatalf("AnonHugePages of the buffer's mapping grew by %d bytes, want at least %d", got, pages*Size)
	}
}

// anonHugeAt returns the AnonHugePages, in bytes, of the mapping in
// /proc/self/smaps that holds addr.
func anonHugeAt(t *testing.T, addr uintptr) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(addr) >= l && uint64(addr) < h
				continue
			}
		}
		if in && fields[0] == "AnonHugePages:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping in /proc/self/smaps holds %#x (%v)", addr, sc.Err())
	return 0
}

// thpFallbacks returns how often the kernel found no free huge page for
// a fault or a collapse: the sum of /proc/vmstat's thp_fault_fallback and
// thp_collapse_alloc_failed (0 where it cannot be read).
func thpFallbacks(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && (k == "thp_fault_fallback" || k == "thp_collapse_alloc_failed") {
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
	}
	return n
}
