package budget

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestParseFormat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"8GiB", 8 << 30}, {"512MiB", 512 << 20}, {"512 mib", 512 << 20}, {"1.5G", 3 << 29},
		{"1000000", 1000000}, {"4k", 4096}, {"2TB", 2 << 40}, {"64b", 64},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "GiB", "8XB", "-1", "0", "1e99", "9999999TiB"} {
		if v, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", bad, v)
		}
	}
	for _, c := range []struct {
		n    int64
		want string
	}{{100, "100 bytes"}, {8 << 30, "8 GiB"}, {3 << 29, "1.5 GiB"}, {512 << 20, "512 MiB"}, {4 << 40, "4 TiB"}} {
		if got := Format(c.n); got != c.want {
			t.Errorf("Format(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestReserve(t *testing.T) {
	b := New(1000)
	if !b.Reserve(600) || b.Reserve(500) || b.Left() != 400 {
		t.Fatalf("after 600: used %d left %d", b.Used(), b.Left())
	}
	b.Release(600)
	// Concurrent reservations never exceed the limit.
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Reserve(30) {
				mu.Lock()
				got++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got != 33 || b.Used() != 990 {
		t.Fatalf("%d reservations of 30 in 1000 (used %d), want 33", got, b.Used())
	}
	var none *Budget
	if !none.Reserve(1<<62) || none.Left() <= 1<<62 {
		t.Fatal("a nil budget limits")
	}
	err := b.Exceeded(`output "y"`, 4<<30, 10)
	if !errors.Is(err, ErrExceeded) || !strings.Contains(err.Error(), `output "y" needs 4294967296 bytes (4 GiB); the memory budget (Options.MaxMemoryBytes 1000 bytes) has 10 bytes left`) {
		t.Fatalf("error %v", err)
	}
}

func TestMachine(t *testing.T) {
	m, from := Machine()
	if m <= 0 || from == "" {
		t.Fatalf("Machine() = %d, %q", m, from)
	}
	if d := DefaultLimit(); d != m/2 {
		t.Fatalf("DefaultLimit() = %d, want half of %d", d, m)
	}
	t.Logf("machine memory %s (%s); default budget %s", Format(m), from, Format(DefaultLimit()))
}
