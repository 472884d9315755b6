package plugins

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins/backendpb"
	"github.com/attnrun/attnrun/runtime/budget"
)

func TestShmTensor(t *testing.T) {
	mem := make([]byte, 256)
	in := ir.FromSlice([]int{2, 2}, []float32{1, -2, 3.5, 4})
	w := putShm(mem, 64, in, 2)
	if w.Shm.Offset != 64 || w.Shm.Length != 16 || len(w.Raw) != 0 || !reflect.DeepEqual(w.Dims, []int64{2, 2}) {
		t.Fatalf("descriptor %v", w)
	}
	for _, copyOut := range []bool{false, true} {
		got, err := shmTensor(w, mem, copyOut, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Data, in.Data) || !reflect.DeepEqual(got.Shape, in.Shape) {
			t.Errorf("copyOut=%v: got %v %v", copyOut, got.Shape, got.Data)
		}
		if aliased := overlaps(bytesOf(got.Data), mem); aliased == copyOut {
			t.Errorf("copyOut=%v: tensor aliases the region: %v", copyOut, aliased)
		}
	}
	b, err := shmTensor(putShm(mem, 128, ir.FromSlice([]int{3}, []bool{true, false, true}), 1), mem, false, 1)
	if err != nil || !reflect.DeepEqual(b.Data, []bool{true, false, true}) {
		t.Errorf("bools: %v, %v", b, err)
	}

	bad := []struct {
		name string
		w    *backendpb.Tensor
		want string
	}{
		{"past end", &backendpb.Tensor{Dtype: 1, Dims: []int64{4}, Shm: &backendpb.ShmRef{Offset: 250, Length: 16}}, "shared-memory slice [250, +16) lies outside the 256-byte region"},
		{"offset past end", &backendpb.Tensor{Dtype: 1, Dims: []int64{0}, Shm: &backendpb.ShmRef{Offset: 1 << 40}}, "shared-memory slice [1099511627776, +0) lies outside the 256-byte region"},
		{"wrapping length", &backendpb.Tensor{Dtype: 1, Dims: []int64{4}, Shm: &backendpb.ShmRef{Offset: 8, Length: 1<<64 - 4}}, "shared-memory slice [8, +18446744073709551612) lies outside the 256-byte region"},
		{"length disagrees", &backendpb.Tensor{Dtype: 1, Dims: []int64{4}, Shm: &backendpb.ShmRef{Offset: 0, Length: 12}}, "float32 dims [4] need 16 bytes, got 12"},
		{"dtype", &backendpb.Tensor{Dtype: 99, Dims: []int64{4}, Shm: &backendpb.ShmRef{Offset: 0, Length: 16}}, "unsupported dtype dtype(99)"},
	}
	for _, c := range bad {
		for _, copyOut := range []bool{false, true} {
			if _, err := shmTensor(c.w, mem, copyOut, 1); err == nil || err.Error() != c.want {
				t.Errorf("%s (copyOut=%v): error %v, want %q", c.name, copyOut, err, c.want)
			}
		}
	}
}

func TestHostShmReserve(t *testing.T) {
	h, err := newHostShm(1<<20, 8<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	copy(h.mem, "kept")
	steps := []struct{ need, want int64 }{
		{100, 1 << 20}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20}, {5 << 20, 8 << 20}, {100 << 20, 8 << 20},
	}
	for _, s := range steps {
		if got, err := h.reserve(s.need, 0); err != nil || got != s.want || int64(len(h.mem)) != s.want {
			t.Errorf("reserve(%d) = %d, %v (mapped %d), want %d", s.need, got, err, len(h.mem), s.want)
		}
	}
	if string(h.mem[:4]) != "kept" {
		t.Errorf("growth lost the region's contents: %q", h.mem[:4])
	}
	if _, err := newHostShm(0, 1, nil); err == nil {
		t.Error("a zero-byte region was accepted")
	}
}

// TestHostShmBudget: the region's size is reserved from the host's budget:
// it grows only as far as the budget leaves, a Run whose inputs cannot fit
// is an error, and an idle region shrinks back, returning its bytes.
func TestHostShmBudget(t *testing.T) {
	b := budget.New(6 << 20)
	h, err := newHostShm(1<<20, 64<<20, b)
	if err != nil {
		t.Fatal(err)
	}
	if b.Used() != 1<<20 {
		t.Fatalf("the initial region reserved %d bytes, want %d", b.Used(), 1<<20)
	}
	if got, err := h.reserve(32<<20, 3<<20); err != nil || got != 6<<20 || b.Used() != 6<<20 {
		t.Fatalf("reserve(32 MiB, 3 MiB) = %d, %v (budget used %d), want the whole 6 MiB", got, err, b.Used())
	}
	if _, err := h.reserve(32<<20, 7<<20); !errors.Is(err, budget.ErrExceeded) {
		t.Fatalf("reserve with 7 MiB of inputs in a 6 MiB budget: %v, want the budget's error", err)
	}
	h.shrinkIdle()
	if len(h.mem) != 1<<20 || b.Used() != 1<<20 {
		t.Fatalf("after shrinking: %d bytes mapped, %d reserved, want 1 MiB", len(h.mem), b.Used())
	}
	if got, _ := h.reserve(4<<20, 0); got != 4<<20 {
		t.Fatalf("regrown to %d", got)
	}
	h.close()
	if b.Used() != 0 {
		t.Fatalf("after close %d bytes reserved", b.Used())
	}
	// A small budget makes a small initial region.
	small, err := newHostShm(64<<20, 64<<20, budget.New(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer small.close()
	if len(small.mem) != 2<<20 {
		t.Errorf("initial region in an 8 MiB budget: %d bytes, want 2 MiB", len(small.mem))
	}
}

// TestShrinkIdleTakesTurn: the idle shrink takes the region as a Run
// does, without waiting: it leaves alone a region that a Run (or the drain
// of an abandoned Run, which holds the region the same way) holds, and a
// broken one, whose backend may still write to it; the holder's release
// arms the next shrink, which then takes the region back to its initial
// size.
func TestShrinkIdleTakesTurn(t *testing.T) {
	t.Setenv(IdleReleaseEnv, "20ms")
	b := budget.New(64 << 20)
	h, err := newHostShm(1<<20, 64<<20, b)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	ctx := context.Background()
	if err := h.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := h.reserve(8<<20, 0); err != nil || got != 8<<20 {
		t.Fatalf("reserve(8 MiB) = %d, %v", got, err)
	}
	// Held: the shrink returns at once and changes nothing.
	done := make(chan struct{})
	go func() { h.shrinkIdle(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("shrinkIdle waited for the Run holding the region")
	}
	if len(h.mem) != 8<<20 || b.Used() != 8<<20 {
		t.Fatalf("shrunk under a Run: %d bytes mapped, %d reserved", len(h.mem), b.Used())
	}
	// Broken (an abandoned Run never confirmed): never armed, never shrunk.
	h.broken = true
	h.release()
	if h.idle.Load() != nil {
		t.Error("a broken region armed the idle shrink")
	}
	h.shrinkIdle()
	if len(h.mem) != 8<<20 {
		t.Fatalf("a broken region was shrunk to %d bytes", len(h.mem))
	}
	if err := h.acquire(ctx); err == nil {
		t.Fatal("a broken region was handed to a Run")
	}
	// Released by its holder: the shrink comes IdleRelease later.
	h.broken = false
	if err := h.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	h.release()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := h.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		size := len(h.mem)
		h.release()
		if size == 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle region is still %d bytes", size)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b.Used() != 1<<20 {
		t.Errorf("after the shrink %d bytes reserved, want 1 MiB", b.Used())
	}
}

func TestWithin(t *testing.T) {
	mem := make([]byte, 100)
	other := make([]byte, 10)
	cases := []struct {
		name string
		b    []byte
		off  int64
		ok   bool
	}{
		{"whole", mem, 0, true},
		{"middle", mem[10:20], 10, true},
		{"tail", mem[99:], 99, true},
		{"empty", mem[5:5], 0, false},
		{"other", other, 0, false},
		{"past end", mem[90:100:100][:10], 90, true},
	}
	for _, c := range cases {
		off, ok := within(c.b, mem)
		if off != c.off || ok != c.ok {
			t.Errorf("%s: within = %d, %v; want %d, %v", c.name, off, ok, c.off, c.ok)
		}
		if ok != overlaps(c.b, mem) {
			t.Errorf("%s: overlaps disagrees", c.name)
		}
	}
	if _, ok := within(mem[50:60], mem[:55]); ok {
		t.Error("a slice sticking out of the region counted as inside")
	}
	if !overlaps(mem[50:60], mem[:55]) {
		t.Error("a partly overlapping slice does not overlap")
	}
}

// TestExpectOutput: the region reserves room for a Run's outputs from the
// partition's last Run, scaled by how its inputs grew (a small Run then a
// large one sent the large one's outputs inline).
func TestExpectOutput(t *testing.T) {
	h := &hostShm{max: 1 << 30, outBytes: map[PartitionID]ioBytes{}}
	if got := h.expectOutput(1, 1000); got != 1000 {
		t.Errorf("first Run: expect %d, want the inputs' 1000", got)
	}
	h.learnOutput(1, 1000, 500)
	for _, c := range [][2]int64{{4000, 2000}, {1000, 500}, {10, 500}} {
		if got := h.expectOutput(1, c[0]); got != c[1] {
			t.Errorf("inputs %d: expect %d, want %d", c[0], got, c[1])
		}
	}
}

// TestDoorbellNeedsReadyBackend: the host rings only a backend that said it
// serves the doorbell (one built before it never answers), and only for
// requests whose tensors all lie in the region.
func TestDoorbellNeedsReadyBackend(t *testing.T) {
	b, err := newHostBell()
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	shmReq := &backendpb.RunRequest{Shm: &backendpb.SharedRun{Size: 1 << 20, Seq: 1},
		Inputs: []*backendpb.NamedTensor{{Name: "x", Tensor: &backendpb.Tensor{Dtype: 1, Dims: []int64{4}, Shm: &backendpb.ShmRef{Length: 16}}}}}
	if b.fits(shmReq) {
		t.Error("rings a backend that never said it serves the doorbell")
	}
	atomic.StoreUint32(b.u32(bellReady), bellReadyMagic)
	if !b.fits(shmReq) {
		t.Error("does not ring a ready backend")
	}
	inline := &backendpb.RunRequest{Shm: shmReq.Shm,
		Inputs: []*backendpb.NamedTensor{{Name: "x", Tensor: &backendpb.Tensor{Dtype: 1, Dims: []int64{4}, Raw: make([]byte, 16)}}}}
	if b.fits(inline) {
		t.Error("rings with a tensor inline")
	}
}
