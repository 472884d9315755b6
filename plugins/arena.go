package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins/backendpb"
	"github.com/attnrun/attnrun/runtime/budget"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gorgonia.org/tensor"
)

// The tensor arena: tensors a caller allocates in memory that every backend
// process of a session maps, so that Runs pass them by reference.
//
// The shared region (shm.go) belongs to one Run at a time: the host copies
// each input into it and each output out of it. After a long run the caches
// hold the weights, not the caller's tensors, so those copies go at memory
// speed: about 0.15 ms for each 1.5 MB activation of an S=512, C=768 model
// on the project's 2-core machine, 2% of its run (runtime/session's
// BenchmarkSharedTensors, y = x + 1 on 1.5 MB with 64 MiB swept between
// runs: 0.73-0.80 ms a run with Go tensors, 0.47-0.63 with shared ones).
// The arena removes both: a caller that allocates its inputs and bound
// outputs there (session.Session.NewTensor) hands the backends their bytes
// as they lie, and a bound output in the arena is computed straight into
// the caller's tensor (or copied there by the backend when its kernel
// cannot write into it).
//
// One arena per session: a memfd that Launch passes to every backend
// process of the session (ArenaFDEnv), its instances and restarts
// included, beside each process's own region. The host maps it once over
// its whole limit (the memory budget's: addresses only), so that the
// caller's tensors never move; the
// file grows (ftruncate) as tensors are allocated, and nothing touches the
// mapping beyond the file's size. A backend maps what each Run announces
// (RunRequest.arena_size), under its region's lock, remapping when the
// arena grew; as with the region, its kernels keep no reference to the
// arena after the Run.
//
// Blocks are page-aligned, first fit; a block is zeroed when it is handed
// out. The file's size is reserved from the memory budget; once every block
// is free again the file is truncated to nothing (its pages freed) and its
// bytes go back to the budget.
//
// Runs and frees: a Run pins the blocks it passes, and Free of a pinned
// block takes effect when the last Run using it lets go. A Run abandoned by
// its context keeps its pins until its backend confirmed it let go of them
// (the region's drain, see shm.go) or died; a later Run passing one of those
// blocks waits for that, so that a late write of the abandoned Run can never
// land in a later Run's tensors.

// ArenaFDEnv names the environment variable that tells a backend which file
// descriptor holds the session's tensor arena.
const ArenaFDEnv = "ATTNRUN_ARENA_FD"

// arenaPage aligns the arena's blocks.
const arenaPage = 4096

// arenaGrowth rounds the arena file's growth (fewer ftruncates and remaps).
const arenaGrowth = 1 << 20

// Arena is a session's tensor arena, the host's side (see above). Its
// methods are safe for concurrent use.
type Arena struct {
	mu     sync.Mutex
	f      *os.File
	limit  int64  // the most it may hold: the size of its mapping
	mem    []byte // the mapping over limit bytes (from the first Alloc): addresses never move
	size   int64  // the memfd's size: mem[:size] exists
	clean  int64  // mem[clean:size] was never handed out since the last truncate (zero)
	budget *budget.Budget
	free   []arenaSpan   // free ranges of [0, size), sorted and coalesced
	blocks []*arenaBlock // live blocks, sorted by offset
	closed bool
	// drained is closed (and replaced) whenever an abandoned Run's pins are
	// let go: Runs waiting for one of its blocks look again.
	drained chan struct{}
}

type arenaSpan struct{ off, n int64 }

// arenaBlock is one allocation: [off, off+n) of the arena, n a multiple of
// arenaPage.
type arenaBlock struct {
	off, n   int64
	users    int  // Runs in flight that pass it
	draining int  // abandoned Runs that passed it, not yet drained
	freed    bool // Free was called: it goes back once unused
}

// NewArena creates an arena that may grow to limit bytes, its bytes
// reserved from b (nil: no budget). limit 0 is the budget's limit (without
// one, the machine's memory: budget.Machine), at most an eighth of the
// process's address-space limit (ulimit -v), as the host reserves
// addresses for the whole of it at its first Alloc.
func NewArena(limit int64, b *budget.Budget) (*Arena, error) {
	if limit <= 0 {
		if limit = b.Limit(); limit <= 0 {
			limit, _ = budget.Machine()
		}
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_AS, &rl) == nil && rl.Cur != unix.RLIM_INFINITY && int64(rl.Cur/8) < limit {
			limit = int64(rl.Cur / 8)
		}
	}
	limit = (limit + arenaPage - 1) &^ (arenaPage - 1)
	if limit > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("tensor arena: %d bytes do not fit in the address space", limit)
	}
	fd, err := unix.MemfdCreate("attnrun-arena", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("tensor arena: memfd_create: %w", err)
	}
	return &Arena{f: os.NewFile(uintptr(fd), "attnrun-arena"), limit: limit, budget: b, drained: make(chan struct{})}, nil
}

// file is the arena's memfd for a backend to inherit; nil once closed and
// unmapped.
func (a *Arena) file() *os.File {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	return a.f
}

// Limit is the most the arena may hold, in bytes.
func (a *Arena) Limit() int64 { return a.limit }

// Size is the arena file's current size in bytes: what it holds of the
// memory budget.
func (a *Arena) Size() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.size
}

// Alloc returns n zeroed bytes of the arena (n > 0), page-aligned. The
// bytes stay valid until Free, even after Close.
func (a *Arena) Alloc(n int64) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("tensor arena: cannot allocate %d bytes", n)
	}
	need := (n + arenaPage - 1) &^ (arenaPage - 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errors.New("tensor arena: the session is closed")
	}
	if a.mem == nil {
		// The file is empty: the mapping only reserves addresses until
		// it grows.
		mem, err := unix.Mmap(int(a.f.Fd()), 0, int(a.limit), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("tensor arena: reserving %s of addresses: %w", budget.Format(a.limit), err)
		}
		a.mem = mem
	}
	i := a.fit(need)
	if i < 0 {
		if err := a.grow(need); err != nil {
			return nil, err
		}
		if i = a.fit(need); i < 0 {
			return nil, fmt.Errorf("tensor arena: no room for %s after growing", budget.Format(need))
		}
	}
	sp := &a.free[i]
	blk := &arenaBlock{off: sp.off, n: need}
	sp.off, sp.n = sp.off+need, sp.n-need
	if sp.n == 0 {
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	at := sort.Search(len(a.blocks), func(j int) bool { return a.blocks[j].off > blk.off })
	a.blocks = append(a.blocks, nil)
	copy(a.blocks[at+1:], a.blocks[at:])
	a.blocks[at] = blk
	if blk.off < a.clean {
		clear(a.mem[blk.off:min(blk.off+n, a.clean)])
	}
	a.clean = max(a.clean, blk.off+need)
	return a.mem[blk.off : blk.off+n : blk.off+n], nil
}

// fit is the index of the first free span of at least need bytes, -1 when
// none (a.mu held).
func (a *Arena) fit(need int64) int {
	for i, sp := range a.free {
		if sp.n >= need {
			return i
		}
	}
	return -1
}

// grow extends the file so that its free tail holds need bytes (a.mu held).
func (a *Arena) grow(need int64) error {
	tail := int64(0)
	if k := len(a.free); k > 0 && a.free[k-1].off+a.free[k-1].n == a.size {
		tail = a.free[k-1].n
	}
	size := (a.size + need - tail + arenaGrowth - 1) &^ (arenaGrowth - 1)
	if size > a.limit {
		if a.size+need-tail > a.limit {
			return fmt.Errorf("tensor arena: %s more would pass its limit of %s", budget.Format(need), budget.Format(a.limit))
		}
		size = a.limit
	}
	grow := size - a.size
	if !a.budget.Reserve(grow) {
		return a.budget.Exceeded(fmt.Sprintf("the shared tensor arena of %s", budget.Format(size)), grow, a.budget.Left())
	}
	if err := a.f.Truncate(size); err != nil {
		a.budget.Release(grow)
		return fmt.Errorf("tensor arena: growing to %d bytes: %w", size, err)
	}
	a.addFree(a.size, grow)
	a.size = size
	return nil
}

// addFree returns [off, off+n) to the free list, coalescing (a.mu held).
func (a *Arena) addFree(off, n int64) {
	i := sort.Search(len(a.free), func(j int) bool { return a.free[j].off > off })
	a.free = append(a.free, arenaSpan{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = arenaSpan{off, n}
	if i+1 < len(a.free) && off+n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

// Free gives back the block that b (bytes Alloc returned, or a part of
// them) lies in. A block a Run is using goes back when that Run lets go of
// it.
func (a *Arena) Free(b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	blk, _, ok := a.find(b)
	if !ok {
		return errors.New("tensor arena: the tensor is not one this session allocated, or was freed already")
	}
	if blk.freed {
		return errors.New("tensor arena: the tensor was freed already")
	}
	blk.freed = true
	a.settle(blk)
	return nil
}

// settle takes a freed block that no Run uses off the live list, truncates
// an arena left empty, and unmaps a closed one (a.mu held).
func (a *Arena) settle(blk *arenaBlock) {
	if !blk.freed || blk.users > 0 || blk.draining > 0 {
		return
	}
	i := sort.Search(len(a.blocks), func(j int) bool { return a.blocks[j].off >= blk.off })
	if i == len(a.blocks) || a.blocks[i] != blk {
		return
	}
	a.blocks = append(a.blocks[:i], a.blocks[i+1:]...)
	a.addFree(blk.off, blk.n)
	if len(a.blocks) > 0 {
		return
	}
	// Empty: give the pages and the budget back.
	if a.size > 0 && a.f != nil {
		if err := a.f.Truncate(0); err == nil {
			a.budget.Release(a.size)
			a.size, a.clean, a.free = 0, 0, nil
		}
	}
	if a.closed {
		a.unmap()
	}
}

// find returns the live block b lies in and b's offset (a.mu held).
func (a *Arena) find(b []byte) (*arenaBlock, int64, bool) {
	off, ok := within(b, a.mem)
	if !ok {
		return nil, 0, false
	}
	i := sort.Search(len(a.blocks), func(j int) bool { return a.blocks[j].off > off }) - 1
	if i < 0 {
		return nil, 0, false
	}
	blk := a.blocks[i]
	if off+int64(len(b)) > blk.off+blk.n || blk.freed {
		return nil, 0, false
	}
	return blk, off, true
}

// Contains reports whether b lies in a live block of the arena.
func (a *Arena) Contains(b []byte) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _, ok := a.find(b)
	return ok
}

// Close ends allocation. The mapping and the file stay until the last
// block is freed, so that tensors still held stay valid.
func (a *Arena) Close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	if len(a.blocks) == 0 {
		a.unmap()
	}
}

// unmap releases the mapping and the file (a.mu held; no live blocks).
func (a *Arena) unmap() {
	if a.mem != nil {
		_ = unix.Munmap(a.mem)
		a.mem = nil
	}
	if a.f != nil {
		a.f.Close()
		a.f = nil
	}
	if a.size > 0 {
		a.budget.Release(a.size)
		a.size = 0
	}
}

// arenaPins are the blocks one Run passes, pinned for it.
type arenaPins struct {
	a      *Arena
	blocks []*arenaBlock
}

// ref locates b for a Run: its offset, with its block added to the pins
// (pinned by pin). False when b is not in a live block, or overlaps one of
// the bound outputs' bytes into but the one named self.
func (p *arenaPins) ref(b []byte, into map[string][]byte, self string) (int64, bool) {
	if p.a == nil || len(b) == 0 {
		return 0, false
	}
	for name, o := range into {
		if name != self && overlaps(o, b) {
			return 0, false
		}
	}
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	blk, off, ok := p.a.find(b)
	if !ok {
		return 0, false
	}
	if !slices.Contains(p.blocks, blk) {
		p.blocks = append(p.blocks, blk)
	}
	return off, true
}

// pin marks the Run's blocks in use, first waiting (until ctx ends) while
// an abandoned Run still holds one of them. It also returns the arena's
// size, which every pinned block lies below.
func (p *arenaPins) pin(ctx context.Context) (int64, error) {
	a := p.a
	for {
		a.mu.Lock()
		busy := false
		for _, b := range p.blocks {
			if b.draining > 0 {
				busy = true
				break
			}
		}
		if !busy {
			for _, b := range p.blocks {
				b.users++
			}
			size := a.size
			a.mu.Unlock()
			return size, nil
		}
		ch := a.drained
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("run: waiting for an abandoned run to let go of a shared tensor: %w", ctx.Err())
		}
	}
}

// unpin ends the Run's use of its blocks.
func (p *arenaPins) unpin() {
	if len(p.blocks) == 0 {
		return
	}
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range p.blocks {
		b.users--
		a.settle(b)
	}
	p.blocks = nil
}

// abandon turns the Run's pins into an abandoned Run's: its blocks stay
// held until the returned function is called (once the backend let go of
// them, or died).
func (p *arenaPins) abandon() func() {
	if len(p.blocks) == 0 {
		return func() {}
	}
	a, blocks := p.a, p.blocks
	p.blocks = nil
	a.mu.Lock()
	for _, b := range blocks {
		b.users--
		b.draining++
	}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, b := range blocks {
			b.draining--
			a.settle(b)
		}
		close(a.drained)
		a.drained = make(chan struct{})
	}
}

// arenaRef describes t as lying at off in the arena.
func arenaRef(t *ir.Tensor, off int64) *backendpb.Tensor {
	w := shmRef(t, off)
	w.Shm.Arena = true
	return w
}

// boundInArena lists the outputs of into that the caller bound to tensors in
// the arena (RunRequest.bound), adding their blocks to pins; intoBytes holds
// the bound tensors' bytes (denseBytesOf).
func boundInArena(pins *arenaPins, meta *partMeta, into map[string]*tensor.Dense, intoBytes map[string][]byte) []*backendpb.NamedTensor {
	if pins.a == nil || len(into) == 0 {
		return nil
	}
	var bound []*backendpb.NamedTensor
	for name, dst := range into {
		dt, ok := meta.outputs[name]
		if !ok || dst == nil || !plainBytes(dt) || dst.RequiresIterator() || dst.IsMasked() || !dst.DataOrder().IsRowMajor() {
			continue
		}
		target, err := ir.FromDenseAs(dst, dt)
		if err != nil || !shmEligible(target) {
			continue
		}
		// Not when another bound output overlaps it (each is then
		// written by the host, as before).
		if off, ok := pins.ref(bytesOf(target.Data), intoBytes, name); ok {
			bound = append(bound, &backendpb.NamedTensor{Name: name, Tensor: arenaRef(target, off)})
		}
	}
	sort.Slice(bound, func(i, j int) bool { return bound[i].Name < bound[j].Name })
	return bound
}

// denseBytesOf views the backing memory of each tensor of m as bytes, by
// name.
func denseBytesOf(m map[string]*tensor.Dense) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for name, d := range m {
		if d != nil {
			if b := bytesOf(d.Data()); len(b) > 0 {
				out[name] = b
			}
		}
	}
	return out
}

// sharedMem is the memory the shared-memory output ref lies in: the Run's
// region, or the arena up to the size this Run announced.
func (c *client) sharedMem(ref *backendpb.ShmRef, region []byte, arenaSize uint64) ([]byte, error) {
	switch {
	case ref.Arena && (c.arena == nil || arenaSize == 0):
		return nil, errors.New("the backend answered with a tensor in the arena, but this Run passed none")
	case ref.Arena:
		return c.arena.mem[:arenaSize], nil
	case region == nil:
		return nil, errors.New("the backend answered with a shared-memory tensor, but this Run has no region")
	}
	return region, nil
}

// ---- backend side ----

// arenaOutputs are a Run's outputs bound to tensors in the arena
// (RunRequest.bound), by name, on the backend's side.
type arenaOutputs map[string]arenaOutput

// arenaOutput is one bound output: its tensor's type, shape, offset and
// bytes in the arena.
type arenaOutput struct {
	dt   ir.DType
	dims []int
	off  int64
	raw  []byte
}

// arenaOfRun maps the arena for req (the backend holds s.shm.mu) and
// returns its bytes and the Run's bound outputs; nil, nil when the Run
// passes nothing in the arena.
func (s *grpcServer) arenaOfRun(req *backendpb.RunRequest, region []byte) ([]byte, arenaOutputs, error) {
	if req.ArenaSize == 0 {
		if len(req.Bound) > 0 {
			return nil, nil, status.Error(codes.InvalidArgument, "outputs bound in the tensor arena, but the request gives no arena size")
		}
		return nil, nil, nil
	}
	if s.arena == nil || region == nil {
		return nil, nil, status.Error(codes.FailedPrecondition, "the host sent tensors in the tensor arena, but this backend was given no arena (or the Run no region)")
	}
	if err := s.arena.ensure(req.ArenaSize); err != nil {
		return nil, nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	mem := s.arena.mem[:req.ArenaSize:req.ArenaSize]
	bound := make(arenaOutputs, len(req.Bound))
	for _, nt := range req.Bound {
		w := nt.Tensor
		if w == nil || w.Shm == nil || !w.Shm.Arena || !plainBytes(ir.DType(w.Dtype)) {
			return nil, nil, status.Errorf(codes.InvalidArgument, "bound output %q: not a plain tensor in the arena", nt.Name)
		}
		raw, err := shmBytes(w, mem)
		if err != nil {
			return nil, nil, status.Errorf(codes.InvalidArgument, "bound output %q: %v", nt.Name, err)
		}
		dims := wireDims(w)
		if dt := ir.DType(w.Dtype); ir.NumElements(dims)*int64(dt.Size()) != int64(len(raw)) {
			return nil, nil, status.Errorf(codes.InvalidArgument, "bound output %q: %d bytes for a %v tensor of shape %v", nt.Name, len(raw), dt, dims)
		}
		bound[nt.Name] = arenaOutput{dt: ir.DType(w.Dtype), dims: dims, off: int64(w.Shm.Offset), raw: raw}
	}
	return mem, bound, nil
}

// float32s is OutputInto for a Run with bound outputs in the arena: the
// bound tensor of an output of that name and shape, else room in the
// region's output area.
func (b arenaOutputs) float32s(area *outputArea) func(string, []int) []float32 {
	if len(b) == 0 {
		return area.float32s
	}
	return func(name string, dims []int) []float32 {
		if o, ok := b[name]; ok && o.dt == ir.Float && slices.Equal(o.dims, dims) {
			if d, ok := ir.AliasBytes(ir.Float, o.raw, int(ir.NumElements(dims))); ok {
				return d.([]float32)
			}
		}
		return area.float32s(name, dims)
	}
}

// answer describes the output name, t, when it belongs in the arena (ok):
// computed into its bound tensor there (inPlace), a view of an input there,
// or copied into its bound tensor when it has the tensor's type and shape.
func (b arenaOutputs) answer(name string, t *ir.Tensor, arena []byte, threads int) (w *backendpb.Tensor, inPlace, ok bool) {
	if arena == nil {
		return nil, false, false
	}
	raw := bytesOf(t.Data)
	o, bound := b[name]
	if off, in := within(raw, arena); in {
		return arenaRef(t, off), bound && off == o.off, true
	}
	if !bound || t.DType != o.dt || !slices.Equal(t.Shape, o.dims) {
		return nil, false, false
	}
	copyBytes(o.raw, raw, threads)
	return arenaRef(t, o.off), false, true
}
