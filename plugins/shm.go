package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins/backendpb"
	"github.com/attnrun/attnrun/runtime/budget"
	"golang.org/x/sys/unix"
)

// Shared-memory tensors.
//
// Launch creates a second memfd besides the status page, the tensor region,
// and passes it to the backend (SharedFDEnv names the fd). The host owns the
// region; both processes map it MAP_SHARED, and gRPC then carries only
// descriptors (dtype, dims, offset, length) instead of tensor bytes.
//
// One Run uses the region like this (Run calls on one Process are
// serialized by the region's lock, so a Run owns the whole region):
//
//	[0, in)          inputs, written by the host, each at a 64-byte aligned offset
//	[in, size)       the output area, offered to the backend in RunRequest.shm
//
// The backend reads inputs in place (zero copy: its kernels see slices over
// the mapping; they keep no references after the Run, see below) and runs.
// A Server that can computes float32 outputs straight into the output area
// (OutputInto hands out its slices while they fit: no copy in the backend);
// every other output is copied into the output area while it fits. Each
// output in the region is returned as its descriptor; outputs that do not
// fit travel inline as bytes. The response
// reports the bytes all outputs needed (output_bytes); the host remembers it
// per partition so that the next Run reserves enough room.
//
// Outputs are copied out of the region by the host into fresh tensors (or
// the caller's bound ones) before Run returns, so results stay valid
// whatever later Runs write: safer than handing out views, for one memcpy
// per output. Large copies may use several threads (copyBytes). Inputs and
// bound outputs the caller allocated in the session's tensor arena skip
// the region and both copies (arena.go).
//
// Growth: when a Run's inputs plus its expected outputs exceed the region,
// the host grows the memfd with ftruncate (doubling its size until they fit,
// at most to the LaunchSpec's SharedMaxBytes) and remaps it; RunRequest.shm.size
// tells the backend, which remaps its side when its mapping is smaller. The
// region's bytes are reserved from the host's memory budget (LaunchSpec.Budget):
// a Run whose inputs cannot fit in what the budget leaves fails with an
// error saying so. A tensor that does not fit in the region (or a string
// tensor, or an empty one) falls back to inline bytes in the gRPC message.
//
// Shrinking: once no Run has used the region for IdleRelease, a region
// grown past its initial size is truncated to nothing and back to its
// initial size (which frees its pages in both processes: the memfd is their
// only backing) and remapped, and its bytes go back to the budget. The next
// large Run grows it again. The shrink takes the region like a Run does,
// but never waits for it: a Run in flight, or an abandoned Run whose
// backend has not yet confirmed it let go (see "Abandoned Runs" below),
// keeps the region as it is, and a broken region is never shrunk.
//
// Lifetime of input views in the backend: graph.Program.Run keeps input
// tensors only in its per-run slots, and plans are built from shapes alone,
// so nothing refers to the region once Run returns. A backend Server that
// caches input tensors must copy them.

// SharedFDEnv names the environment variable that tells a backend which file
// descriptor holds the shared tensor region.
const SharedFDEnv = "ATTNRUN_SHM_FD"

// NoSharedMemoryEnv, set to 1 in the host's environment, makes Launch pass no
// tensor region: tensors then travel as bytes inside the gRPC messages (the
// protocol's fallback; useful for measuring the difference).
const NoSharedMemoryEnv = "ATTNRUN_NO_SHM"

// DefaultSharedBytes is the tensor region's initial size.
const DefaultSharedBytes = 64 << 20

// DefaultSharedMaxBytes bounds the region's growth; tensors beyond it travel
// inline (up to MaxMessageBytes per message).
const DefaultSharedMaxBytes = 2 << 30

// shmAlign aligns every tensor in the region (cache line; covers every
// element size).
const shmAlign = 64

func alignUp(n int64) int64 { return (n + shmAlign - 1) &^ (shmAlign - 1) }

// IdleReleaseEnv names the environment variable that sets IdleRelease (a Go
// duration, e.g. 500ms; the host's environment reaches its backends too).
const IdleReleaseEnv = "ATTNRUN_IDLE_RELEASE"

// DefaultIdleRelease is how long memory kept for the next run (the grown
// shared region in the host, arenas in the CPU backend) stays after the
// last run before it is given back.
const DefaultIdleRelease = 2 * time.Second

// IdleRelease returns $ATTNRUN_IDLE_RELEASE when it is a positive duration,
// else DefaultIdleRelease.
func IdleRelease() time.Duration {
	v := os.Getenv(IdleReleaseEnv)
	if v == "" { // every run asks: no parse error to allocate
		return DefaultIdleRelease
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	return DefaultIdleRelease
}

// hostShm is the host's side of a tensor region.
type hostShm struct {
	mu  sync.Mutex // held for a whole Run: one Run at a time uses the region
	f   *os.File
	mem []byte
	max int64
	// initial is the size the region shrinks back to when idle.
	initial int64
	// budget is the host's memory budget; reserved is what the region
	// holds of it (its size).
	budget   *budget.Budget
	reserved int64
	// idle shrinks the region once no Run has held it for IdleRelease
	// (idleLater, shrinkIdle).
	// It is atomic because shrinkIdle re-arms it without mu.
	idle atomic.Pointer[time.Timer]
	// outBytes remembers, per partition, the input and output bytes of its
	// last Run (see expectOutput).
	outBytes map[PartitionID]ioBytes
	// turn queues Runs for mu so that a waiting Run can give up when its
	// context ends (acquire). Whoever holds the region holds both: a Run,
	// the drain of an abandoned Run, or the idle shrink.
	turn chan struct{}
	// seq numbers Runs (SharedRun.seq); broken is set when a Run was
	// abandoned and the backend never confirmed it let go of the region.
	seq    uint64
	broken bool
}

// Abandoned Runs. A Run whose context ends returns at once, but the backend
// may still be reading its inputs from the region or writing its outputs
// there, or may not even have started it. So the abandoning Run hands its
// hold on the region to a goroutine that sends Ping with fence = the Run's
// seq: the backend answers once no Run holds its side of the region, and
// refuses any Run numbered up to the fence that arrives later. Only then is
// the region released for the next Run. A backend that does not answer
// within PingTimeout is killed, and the region is never used again (nor
// shrunk: the backend may still write to it).

// errQueued marks a Run that gave up while waiting for the region.
var errQueued = errors.New("waiting for an earlier run on this backend")

// acquire takes the region for one Run, waiting at most until ctx ends.
func (h *hostShm) acquire(ctx context.Context) error {
	select {
	case h.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("run: %w: %w", errQueued, ctx.Err())
	}
	h.mu.Lock()
	switch {
	case h.mem == nil:
		h.release()
		return errors.New("run: the backend's tensor region is closed")
	case h.broken:
		h.release()
		return errors.New("run: the backend did not let go of its tensor region after an abandoned run")
	}
	return nil
}

// release gives the region to the next Run, arming the idle shrink first:
// the region was last used now.
func (h *hostShm) release() {
	h.idleLater()
	h.mu.Unlock()
	<-h.turn
}

// newHostShm creates a region of size bytes (a memfd mapped shared) that may
// grow to max bytes, reserved from b (nil: no budget). A budget with less
// left than size makes the initial region smaller.
func newHostShm(size, limit int64, b *budget.Budget) (*hostShm, error) {
	if size <= 0 || limit < size {
		return nil, fmt.Errorf("tensor region: bad size %d (max %d)", size, limit)
	}
	if left := b.Left() / 4; left < size {
		size = max(alignPage(left), minSharedBytes)
	}
	fd, err := unix.MemfdCreate("attnrun-tensors", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("tensor region: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "attnrun-tensors")
	h := &hostShm{f: f, max: limit, initial: size, budget: b, outBytes: map[PartitionID]ioBytes{}, turn: make(chan struct{}, 1)}
	if err := h.resize(size); err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

// minSharedBytes is the smallest region: a tiny budget still gets one.
const minSharedBytes = 64 << 10

func alignPage(n int64) int64 { return n &^ (4096 - 1) }

// resize sets the memfd's size and maps it whole, adjusting the budget
// reservation (the caller holds mu or owns h alone). Growing past what the
// budget has left fails without changing anything.
func (h *hostShm) resize(size int64) error {
	if size > int64(^uint(0)>>1) {
		return fmt.Errorf("tensor region: %d bytes do not fit in the address space", size)
	}
	if grow := size - h.reserved; grow > 0 && !h.budget.Reserve(grow) {
		return h.budget.Exceeded(fmt.Sprintf("the shared tensor region of %s", budget.Format(size)), grow, h.budget.Left())
	}
	if err := h.f.Truncate(size); err != nil {
		h.budget.Release(size - h.reserved)
		return fmt.Errorf("tensor region: resizing to %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(int(h.f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		h.budget.Release(size - h.reserved)
		return fmt.Errorf("tensor region: mmap %d bytes: %w", size, err)
	}
	if h.mem != nil {
		_ = unix.Munmap(h.mem)
	}
	h.mem = mem
	if shrink := h.reserved - size; shrink > 0 {
		h.budget.Release(shrink)
	}
	h.reserved = size
	return nil
}

// reserve makes the region hold at least need bytes when the limits allow,
// doubling its size until need fits, capped at h.max and at what the
// budget leaves. It returns the region's size afterwards. When even must
// bytes (what has to travel through the region) cannot fit because of the
// budget, it returns the budget's error; other failures leave the region
// as it was (the caller then sends what does not fit inline).
func (h *hostShm) reserve(need, must int64) (int64, error) {
	size := int64(len(h.mem))
	if need <= size || size >= h.max {
		return size, nil
	}
	grown := size
	for grown < need && grown < h.max {
		grown *= 2
	}
	limit := h.max
	if left := h.budget.Left(); left < limit-h.reserved {
		limit = h.reserved + left
	}
	grown = alignPage(max(min(grown, limit), size))
	if grown <= size {
		grown = size
	} else if err := h.resize(grown); err != nil && !errors.Is(err, budget.ErrExceeded) {
		return int64(len(h.mem)), nil
	}
	if size = int64(len(h.mem)); size < must && must <= h.max {
		return size, h.budget.Exceeded(fmt.Sprintf("the shared tensor region, for %s of inputs,", budget.Format(must)), must-size, h.budget.Left())
	}
	return size, nil
}

// ioBytes are a Run's input and output bytes in the region.
type ioBytes struct{ in, out int64 }

// expectOutput guesses the output bytes of a Run of partition id with in
// bytes of inputs: as much as the inputs the first time, then the last
// Run's outputs scaled by how the inputs grew (outputs grow with the
// sequence length like inputs do), so that a larger request finds room
// for its outputs instead of sending them inline. The caller holds mu.
func (h *hostShm) expectOutput(id PartitionID, in int64) int64 {
	last, ok := h.outBytes[id]
	switch {
	case !ok:
		return in
	case last.in > 0 && in > last.in:
		return int64(float64(last.out) * float64(in) / float64(last.in))
	}
	return last.out
}

// learnOutput records what a Run of partition id had (the caller holds mu).
func (h *hostShm) learnOutput(id PartitionID, in int64, out uint64) {
	h.outBytes[id] = ioBytes{in, int64(min(out, uint64(h.max)))}
}

// idleLater arranges for the region to shrink back to its initial size
// once no Run has used it for IdleRelease (the caller holds mu; release
// calls it). A closed or broken region is left alone.
func (h *hostShm) idleLater() {
	if h.mem == nil || h.broken || int64(len(h.mem)) <= h.initial {
		return
	}
	t := h.idle.Load()
	if t == nil {
		t = time.AfterFunc(time.Hour, h.shrinkIdle) // armed once stored
		h.idle.Store(t)
	}
	t.Reset(IdleRelease())
}

// shrinkIdle truncates an idle region back to its initial size, and then
// returns the freed heap to the system too: the host's large buffers of the
// same request (decoded outputs the caller dropped) are garbage by then.
//
// It takes the region's turn without waiting: when a Run holds the region,
// or the drain of an abandoned Run does (the backend may still be using it
// for that Run), it only arms itself again (whoever holds the region also
// arms it when it lets go, in release, but a moment before it does). A broken region (a backend that
// never confirmed it let go of an abandoned Run's tensors) is never
// shrunk: the backend may still write to it.
func (h *hostShm) shrinkIdle() {
	select {
	case h.turn <- struct{}{}:
	default:
		// Its holder armed this timer in release, before letting go of
		// the turn; on a loaded machine the timer can fire in between,
		// and no release comes after it: look again later.
		if t := h.idle.Load(); t != nil {
			t.Reset(IdleRelease())
		}
		return
	}
	// Without the turn, mu is only ever held for a moment (close,
	// SharedBytes): no Run or drain is behind it.
	h.mu.Lock()
	if h.mem == nil || h.broken || int64(len(h.mem)) <= h.initial {
		h.mu.Unlock()
		<-h.turn
		return
	}
	// Truncating to zero first frees the pages below the initial size too:
	// the backend's mapping still holds those of the last large Run.
	_ = h.f.Truncate(0)
	err := h.resize(h.initial)
	if err != nil {
		// Still mapped at its old size: give the memfd that size back, or
		// the next Run would fault (SIGBUS) past the file's end.
		_ = h.f.Truncate(int64(len(h.mem)))
	}
	h.release()
	if err == nil {
		FreeOSMemory() // after release: a Run need not wait for the collector
	}
}

// copyOutFits checks that copying the output w out of the region into new
// memory fits in what the host's budget leaves (the region itself is
// reserved already), so that a huge output is an error rather than the
// host running out of memory.
func (h *hostShm) copyOutFits(w *backendpb.Tensor) error {
	if n := int64(w.Shm.Length); n > h.budget.Left() {
		return h.budget.Exceeded(fmt.Sprintf("copying a %v output out of the shared region", ir.DType(w.Dtype)), n, h.budget.Left())
	}
	return nil
}

// FreeOSMemory returns the process's free memory to the system, after a
// large request's memory was dropped (the host's region, a backend's
// arenas). It collects twice: buffers gRPC keeps in sync.Pools (a large
// inline message's) survive one collection.
func FreeOSMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// close unmaps the region and closes the memfd, waiting for a Run in flight.
func (h *hostShm) close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.idle.Load(); t != nil {
		t.Stop()
	}
	if h.mem != nil {
		_ = unix.Munmap(h.mem)
		h.mem = nil
	}
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
	h.budget.Release(h.reserved)
	h.reserved = 0
}

// shmEligible reports whether a tensor can travel through the region.
func shmEligible(t *ir.Tensor) bool {
	return t.DType != ir.String && t.Len() > 0
}

// putShm copies t's bytes into mem at off (with up to threads threads,
// see copyBytes) and returns its descriptor.
func putShm(mem []byte, off int64, t *ir.Tensor, threads int) *backendpb.Tensor {
	raw := bytesOf(t.Data)
	copyBytes(mem[off:off+int64(len(raw))], raw, threads)
	return shmRef(t, off)
}

// shmRef describes t as lying at off in the region.
func shmRef(t *ir.Tensor, off int64) *backendpb.Tensor {
	w := &backendpb.Tensor{Dtype: int32(t.DType), Dims: make([]int64, len(t.Shape)), Shm: &backendpb.ShmRef{Offset: uint64(off), Length: uint64(t.Bytes())}}
	for i, d := range t.Shape {
		w.Dims[i] = int64(d)
	}
	return w
}

// within reports whether b lies wholly inside mem, and at which offset.
func within(b, mem []byte) (int64, bool) {
	if len(b) == 0 || len(mem) == 0 {
		return 0, false
	}
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	m0 := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	if b0 < m0 || b0-m0 > uintptr(len(mem)) || uintptr(len(b)) > uintptr(len(mem))-(b0-m0) {
		return 0, false
	}
	return int64(b0 - m0), true
}

// shmTensor decodes a tensor whose bytes lie in the region mem. With copyOut
// the data is copied into a fresh slice (with up to threads threads);
// otherwise it aliases mem (bools are always copied, normalized to 0 and 1).
func shmTensor(w *backendpb.Tensor, mem []byte, copyOut bool, threads int) (*ir.Tensor, error) {
	raw, err := shmBytes(w, mem)
	if err != nil {
		return nil, err
	}
	ref := w.Shm
	hdr := &backendpb.Tensor{Dtype: w.Dtype, Dims: w.Dims}
	if copyOut {
		dt := ir.DType(w.Dtype)
		if dt.Known() && dt != ir.String && dt != ir.Bool && ref.Length%uint64(dt.Size()) == 0 {
			data := ir.MakeSlice(dt, int(ref.Length/uint64(dt.Size())))
			copyBytes(bytesOf(data), raw, threads)
			raw = bytesOf(data)
		}
	}
	hdr.Raw = raw
	return fromWire(hdr, 0)
}

// shmBytes returns the bytes of the region mem that the shared-memory
// tensor w refers to, checking that they lie inside mem.
func shmBytes(w *backendpb.Tensor, mem []byte) ([]byte, error) {
	ref := w.Shm
	size := uint64(len(mem))
	if ref.Offset > size || ref.Length > size-ref.Offset {
		return nil, fmt.Errorf("shared-memory slice [%d, +%d) lies outside the %d-byte region", ref.Offset, ref.Length, size)
	}
	return mem[ref.Offset : ref.Offset+ref.Length : ref.Offset+ref.Length], nil
}

// overlaps reports whether b lies (partly) inside mem.
func overlaps(b, mem []byte) bool {
	if len(b) == 0 || len(mem) == 0 {
		return false
	}
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	m0 := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	return b0 < m0+uintptr(len(mem)) && m0 < b0+uintptr(len(b))
}

// backendShm is a backend's mapping of the host's tensor region (or of the
// session's tensor arena, arena.go: the same mapping on this side).
type backendShm struct {
	mu   sync.Mutex // held while a Run uses mem
	what string     // "tensor region" or "tensor arena", for messages
	fd   int
	mem  []byte
	// fence is the highest Run seq the host abandoned (Ping); such Runs
	// must not touch the region.
	fence uint64
}

// lockBefore takes mu, giving up when ctx ends.
func (b *backendShm) lockBefore(ctx context.Context) error {
	for !b.mu.TryLock() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// backendShmFromEnv opens the region the host passed (SharedFDEnv); nil
// without error when none was passed.
func backendShmFromEnv() (*backendShm, error) {
	return backendMapFromEnv(SharedFDEnv, "tensor region")
}

// backendMapFromEnv maps the memfd whose descriptor the environment
// variable env names (what names it in messages); nil without error when
// none was passed.
func backendMapFromEnv(env, what string) (*backendShm, error) {
	fd, err := fdFromEnv(env)
	if fd < 0 || err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s (fd %d): %w", what, fd, err)
	}
	unix.CloseOnExec(fd)
	b := &backendShm{fd: fd, what: what}
	if err := b.ensure(uint64(st.Size)); err != nil {
		return nil, err
	}
	return b, nil
}

// ensure maps at least size bytes of the region, remapping after the host
// grew it (the caller holds mu, or owns b alone).
func (b *backendShm) ensure(size uint64) error {
	if size <= uint64(len(b.mem)) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(b.fd, &st); err != nil {
		return fmt.Errorf("%s: %w", b.what, err)
	}
	if st.Size < 0 || size > uint64(st.Size) || size > uint64(^uint(0)>>1) {
		return fmt.Errorf("%s: the host announced %d bytes, the memfd has %d", b.what, size, st.Size)
	}
	mem, err := unix.Mmap(b.fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("%s: mmap %d bytes: %w", b.what, size, err)
	}
	if b.mem != nil {
		_ = unix.Munmap(b.mem)
	}
	b.mem = mem
	return nil
}
