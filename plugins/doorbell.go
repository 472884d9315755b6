package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/attnrun/attnrun/plugins/backendpb"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The doorbell: Run requests without gRPC.
//
// A Run over gRPC costs tens of microseconds of HTTP/2 framing, socket
// reads and goroutine hand-offs on both sides, more than a tiny model's
// whole run. So when the tensor region is in use (shm.go), Launch also
// creates a doorbell: one more memfd that both processes map, holding two
// futex words and the Run's request and response. The host writes the
// RunRequest (the same protobuf message gRPC would carry: descriptors of
// tensors in the region) into the request area and rings; a goroutine of
// the backend that waits on the ring runs it exactly as the gRPC handler
// would (grpcServer.Run) and writes the RunResponse, or the error's code
// and message, into the response area and answers. Each side spins for a
// moment (DoorbellSpin) before it sleeps in FUTEX_WAIT, and wakes the other
// with FUTEX_WAKE only when it sleeps. gRPC stays for everything else:
// Info, Capability, Compile, Release, Stats, the watchdog's health checks
// and the fenced Ping that drains an abandoned Run.
//
// Layout (futex words are 32 bits; the full Run seq is beside them):
//
//	[0:4)     ring: the low 32 bits of the seq of the last request (host)
//	[4:8)     set while the backend sleeps on ring (backend)
//	[8:16)    the request's seq (uint64), written before ring
//	[16:24)   the request's length in bytes
//	[24:32)   the request's deadline, Unix nanoseconds (0: none)
//	[32:36)   bellReadyMagic once the backend serves the doorbell (a backend
//	          built before it never sets it: the host then keeps to gRPC)
//	[64:68)   answer: the low 32 bits of the seq last answered (backend)
//	[68:72)   set while the host sleeps on answer (host)
//	[72:80)   the response's length in bytes
//	[80:84)   the response's gRPC status code (0: the bytes are a RunResponse;
//	          otherwise they are the error's message)
//	[84:88)   1 when the response did not fit in its area (the host then
//	          sends the Run again over gRPC)
//	[4096:+doorbellReqArea)  the request bytes
//	[...:doorbellSize)       the response bytes
//
// What the reliability work built holds on this path too:
//   - Cancellation: the end of the Run's context wakes the host's wait
//     (and it never sleeps longer than doorbellWaitSlice without looking
//     at its context anyway); it returns at once and hands the region to
//     the drain (shm.go), whose fenced Ping also cancels the backend's run
//     of that seq.
//   - A dead backend (killed, crashed, or killed by the watchdog for not
//     answering its health checks, a stopped one) is noticed at the next
//     slice: the Run then fails like a broken gRPC call, and Process.check
//     reports the node from the status page.
//   - Only Runs whose request fits the request area and whose tensors all
//     lie in the region ring; others (inline tensors) go over gRPC.
//
// Stale requests: an abandoned Run's request may reach the backend after
// the drain's Ping has fenced it off, while the host already writes the
// next one. The backend reads the seq beside ring, checks that it matches
// ring, and takes that seq (not the one inside the request bytes) as the
// Run's: a fenced seq touches nothing, whatever bytes it read.

// DoorbellFDEnv names the environment variable that tells a backend which
// file descriptor holds the doorbell page.
const DoorbellFDEnv = "ATTNRUN_DOORBELL_FD"

// NoDoorbellEnv, set to 1 in the host's environment, makes Launch pass no
// doorbell: every Run then goes over gRPC (useful to measure the
// difference).
const NoDoorbellEnv = "ATTNRUN_NO_DOORBELL"

// DoorbellSpinEnv names the environment variable that sets DoorbellSpin (a
// Go duration; 0 never spins).
const DoorbellSpinEnv = "ATTNRUN_DOORBELL_SPIN"

// DefaultDoorbellSpin is how long each side polls the doorbell before it
// sleeps on the futex: long enough to catch a small model's answer (and a
// benchmark's next request) without a sleep and a wake-up, short enough
// not to burn a core beside a long run.
const DefaultDoorbellSpin = 50 * time.Microsecond

// DoorbellSpin returns $ATTNRUN_DOORBELL_SPIN when it parses as a duration
// of 0 or more, else DefaultDoorbellSpin.
func DoorbellSpin() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(DoorbellSpinEnv)); err == nil && d >= 0 {
		return d
	}
	return DefaultDoorbellSpin
}

const (
	doorbellSize    = 1 << 20
	doorbellHdr     = 4096
	doorbellReqArea = 256 << 10
	doorbellResOff  = doorbellHdr + doorbellReqArea

	bellRing      = 0
	bellSleeper   = 4
	bellSeq       = 8
	bellReqLen    = 16
	bellDeadline  = 24
	bellReady     = 32
	bellAnswer    = 64
	bellHostSleep = 68
	bellResLen    = 72
	bellResCode   = 80
	bellTooLarge  = 84
)

// futex(2) operations (golang.org/x/sys/unix does not name them).
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// bellReadyMagic ("DBL1") is what a backend that serves the doorbell
// writes at bellReady.
const bellReadyMagic = 0x314c4244

// doorbellWaitSlice bounds each futex sleep: the host then looks at its
// context and at the process, the backend at nothing (it just sleeps
// again).
const doorbellWaitSlice = 10 * time.Millisecond

// errTooLarge marks a request or response that did not fit in the
// doorbell: the Run goes over gRPC instead.
var errTooLarge = errors.New("the run does not fit in the doorbell")

// doorbell is one side's mapping of the doorbell page.
type doorbell struct {
	mem  []byte
	spin time.Duration
	// holdP (the host's) sleeps in the futex without telling the Go
	// runtime (futexWaitHolding) where another P is left for the
	// process's other goroutines (holdingP).
	holdP bool
}

func (d *doorbell) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&d.mem[off])) }
func (d *doorbell) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&d.mem[off])) }

// futexWait sleeps while *addr == val, at most timeout. The page is shared
// between processes: no FUTEX_PRIVATE_FLAG.
func futexWait(addr *uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(timeout.Nanoseconds())
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWaitHolding is futexWait as a raw system call: the Go runtime
// sees the goroutine as running and leaves its P to it. Through
// syscall.Syscall6 the runtime knows the thread is blocked in the kernel,
// and its sysmon thread then wakes every 20-80 µs for the whole sleep to
// see whether to take the P back (perf sched on `attnrun bench` of seed
// 000's MHA at S=512: the host's sysmon ran every ~80 µs for ~10 µs, each
// time on a CPU the backend's two kernel threads were computing on). With
// the raw call the host sleeps undisturbed: over 310 runs the host's
// context switches went from 14.7 to 6.4 a run and the backend's main
// kernel thread's from 3401 to 1492. `attnrun bench`, builds alternating
// (2-core Zen 5, 2026-11-24 about 16:33 UTC): S=512 p50 6.66–7.41 → 6.58–7.22
// ms and p90 7.45–8.90 → 7.02–7.76 (both lower in each of four pairs),
// S=2048 p50 49.0–49.4 → 47.4–48.0 ms (three pairs); the tiny s003 model,
// answered within the spin, unchanged. A signal (the garbage collector's
// preemption, for one) ends the sleep early like any other, and the
// caller sleeps again. Only the host sleeps so (holdP, holdingP): a
// backend idle between Runs keeps no P.
func futexWaitHolding(addr *uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(timeout.Nanoseconds())
	_, _, _ = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// pHolders counts the goroutines sleeping in futexWaitHolding. It is
// process-wide state, as the Ps it rations are: every Process's host
// side shares them.
var pHolders atomic.Int32

// holdingP reports whether one more goroutine may sleep holding its P,
// and counts it when so: at most GOMAXPROCS − 1 do at a time, so that one
// P is always left for the process's other goroutines (the context's
// AfterFunc that wakes the sleep, timers, the watchdog, gRPC, the
// embedding program's own work). The caller decrements pHolders after.
func holdingP() bool {
	if pHolders.Add(1) <= int32(runtime.GOMAXPROCS(0)-1) {
		return true
	}
	pHolders.Add(-1)
	return false
}

// futexWake wakes the sleepers on addr.
func futexWake(addr *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0)
}

// await waits until *word != old, spinning for d.spin first and then
// sleeping on the futex (announcing it in *sleeper) in slices of at most
// slice; before each sleep it returns false when stop says so.
func (d *doorbell) await(word, sleeper *uint32, old uint32, slice time.Duration, stop func() bool) bool {
	if atomic.LoadUint32(word) != old {
		return true
	}
	if d.spin > 0 {
		start := time.Now()
		for i := 1; ; i++ {
			if atomic.LoadUint32(word) != old {
				return true
			}
			if i&63 == 0 {
				if time.Since(start) > d.spin {
					break
				}
				// Let a thread with real work have this CPU (the other
				// side's, or the backend's kernel workers): 2 cores are
				// easily all taken.
				_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
	}
	for {
		if atomic.LoadUint32(word) != old {
			return true
		}
		if stop != nil && stop() { // before sleeping too: a wake-up may have come already
			return false
		}
		atomic.StoreUint32(sleeper, 1)
		if atomic.LoadUint32(word) == old {
			if d.holdP && holdingP() {
				futexWaitHolding(word, old, slice)
				pHolders.Add(-1)
			} else {
				futexWait(word, old, slice)
			}
		}
		atomic.StoreUint32(sleeper, 0)
	}
}

// signal stores v in word and wakes the other side if it sleeps.
func signal(word, sleeper *uint32, v uint32) {
	atomic.StoreUint32(word, v)
	if atomic.LoadUint32(sleeper) != 0 {
		futexWake(word)
	}
}

// ---- host side ----

// hostBell is the host's doorbell: a memfd mapped shared. It is used only
// by the Run that holds the tensor region (hostShm's turn).
type hostBell struct {
	doorbell
	f *os.File
	// answered counts the Runs the backend answered through the doorbell.
	answered atomic.Uint64
}

// newHostBell creates the doorbell page.
func newHostBell() (*hostBell, error) {
	fd, err := unix.MemfdCreate("attnrun-doorbell", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("doorbell: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "attnrun-doorbell")
	if err := f.Truncate(doorbellSize); err != nil {
		f.Close()
		return nil, fmt.Errorf("doorbell: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, doorbellSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("doorbell: mmap: %w", err)
	}
	return &hostBell{doorbell: doorbell{mem: mem, spin: DoorbellSpin(), holdP: true}, f: f}, nil
}

// close unmaps the page (the caller makes sure no Run uses it: Kill closes
// it after the tensor region, whose lock every Run holds).
func (b *hostBell) close() {
	if b == nil {
		return
	}
	if b.mem != nil {
		_ = unix.Munmap(b.mem)
		b.mem = nil
	}
	if b.f != nil {
		b.f.Close()
		b.f = nil
	}
}

// fits reports whether req can ring: the backend serves the doorbell, and
// req carries no tensor bytes (those belong in gRPC's messages). Whether it
// fits the request area, run finds out as it writes it there.
func (b *hostBell) fits(req *backendpb.RunRequest) bool {
	if req.Shm == nil || atomic.LoadUint32(b.u32(bellReady)) != bellReadyMagic {
		return false
	}
	for _, nt := range req.Inputs {
		if nt.Tensor == nil || nt.Tensor.Shm == nil {
			return false
		}
	}
	return true
}

// run sends req (seq req.Shm.Seq) through the doorbell and waits for its
// answer. gone reports the backend's death. The errors are those of a gRPC
// call: the backend's status, a context's (Canceled, DeadlineExceeded), or
// Unavailable when the backend is gone; errTooLarge when the request (before
// anything rings) or the response did not fit (the Run then goes over gRPC).
func (b *hostBell) run(ctx context.Context, req *backendpb.RunRequest, gone func() bool) (*backendpb.RunResponse, error) {
	seq := req.Shm.Seq
	buf, err := proto.MarshalOptions{}.MarshalAppend(b.mem[doorbellHdr:doorbellHdr:doorbellResOff], req)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "doorbell: %v", err)
	}
	if len(buf) > doorbellReqArea || unsafe.SliceData(buf) != &b.mem[doorbellHdr] {
		return nil, errTooLarge // appending outgrew the area into a copy: the page is untouched past it
	}
	var dl int64
	if t, ok := ctx.Deadline(); ok {
		dl = t.UnixNano()
	}
	atomic.StoreUint64(b.u64(bellReqLen), uint64(len(buf)))
	atomic.StoreUint64(b.u64(bellDeadline), uint64(dl))
	atomic.StoreUint64(b.u64(bellSeq), seq)
	answer := b.u32(bellAnswer)
	old := atomic.LoadUint32(answer)
	if ctx.Done() != nil {
		// Wake the wait below the moment ctx ends, rather than at the end
		// of its slice.
		stop := context.AfterFunc(ctx, func() { futexWake(answer) })
		defer stop()
	}
	signal(b.u32(bellRing), b.u32(bellSleeper), uint32(seq))
	var why error
	for atomic.LoadUint32(answer) != uint32(seq) {
		if !b.await(answer, b.u32(bellHostSleep), old, doorbellWaitSlice, func() bool {
			switch {
			case ctx.Err() != nil:
				why = status.FromContextError(ctx.Err()).Err()
			case gone():
				why = status.Error(codes.Unavailable, "the backend process ended during the run")
			}
			return why != nil
		}) {
			return nil, why
		}
		old = atomic.LoadUint32(answer) // a stale answer, of an abandoned seq
	}
	if atomic.LoadUint32(b.u32(bellTooLarge)) != 0 {
		return nil, errTooLarge
	}
	b.answered.Add(1)
	n := atomic.LoadUint64(b.u64(bellResLen))
	if n > doorbellSize-doorbellResOff {
		return nil, status.Errorf(codes.Internal, "doorbell: response length %d", n)
	}
	res := b.mem[doorbellResOff : doorbellResOff+int(n)]
	if code := codes.Code(atomic.LoadUint32(b.u32(bellResCode))); code != codes.OK {
		return nil, status.Error(code, string(res))
	}
	r := &backendpb.RunResponse{}
	if err := proto.Unmarshal(res, r); err != nil { // copies: the page is reused
		return nil, status.Errorf(codes.Internal, "doorbell: response: %v", err)
	}
	return r, nil
}

// ---- backend side ----

// backendBell is the backend's doorbell and the run it is serving.
type backendBell struct {
	doorbell
	mu       sync.Mutex
	inflight uint64             // seq of the run in progress (0: none)
	cancel   context.CancelFunc // cancels it
	// fence is the highest seq the host abandoned (cancelUpTo): a run
	// that registers after the drain's Ping came is cancelled at once.
	fence uint64
}

// backendBellFromEnv maps the doorbell the host passed (DoorbellFDEnv);
// nil without error when none was passed.
func backendBellFromEnv() (*backendBell, error) {
	fd, err := fdFromEnv(DoorbellFDEnv)
	if fd < 0 || err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	mem, err := unix.Mmap(fd, 0, doorbellSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("doorbell (fd %d): mmap: %w", fd, err)
	}
	_ = unix.Close(fd)
	return &backendBell{doorbell: doorbell{mem: mem, spin: DoorbellSpin()}}, nil
}

// cancelUpTo cancels the run in progress when its seq is at most fence (the
// host abandoned it: the drain's Ping).
func (b *backendBell) cancelUpTo(fence uint64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fence = max(b.fence, fence)
	if b.inflight != 0 && b.inflight <= fence && b.cancel != nil {
		b.cancel()
	}
}

// start serves the doorbell with s from now on, and tells the host so
// (before the go-plugin handshake: GRPCServer calls it).
func (b *backendBell) start(s *grpcServer) {
	go b.serve(s)
	atomic.StoreUint32(b.u32(bellReady), bellReadyMagic)
}

// serve answers the doorbell forever: it runs each request with s.Run.
func (b *backendBell) serve(s *grpcServer) {
	ring := b.u32(bellRing)
	last := uint32(0) // the page starts zeroed: a ring before this started counts
	for {
		b.await(ring, b.u32(bellSleeper), last, time.Second, nil)
		last = atomic.LoadUint32(ring)
		seq := atomic.LoadUint64(b.u64(bellSeq))
		if uint32(seq) != last {
			// The host is writing a newer request (this one was
			// abandoned and fenced): wait for its ring.
			continue
		}
		r, err := b.handle(s, seq)
		b.answer(seq, r, err)
	}
}

// handle decodes and runs request seq; its result is the response bytes or
// an error.
func (b *backendBell) handle(s *grpcServer, seq uint64) (r *backendpb.RunResponse, err error) {
	n := atomic.LoadUint64(b.u64(bellReqLen))
	if n > doorbellReqArea {
		return nil, status.Errorf(codes.InvalidArgument, "doorbell: request length %d", n)
	}
	req := &backendpb.RunRequest{}
	if err := proto.Unmarshal(b.mem[doorbellHdr:doorbellHdr+int(n)], req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "doorbell: request: %v", err)
	}
	if req.Shm == nil {
		return nil, status.Error(codes.InvalidArgument, "doorbell: a request without the tensor region")
	}
	req.Shm.Seq = seq // the ring's, not the bytes' (see "Stale requests")
	ctx, cancel := context.WithCancel(context.Background())
	if dl := int64(atomic.LoadUint64(b.u64(bellDeadline))); dl != 0 {
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, dl))
	}
	b.mu.Lock()
	b.inflight, b.cancel = seq, cancel
	if seq <= b.fence {
		cancel() // abandoned before it got here
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inflight, b.cancel = 0, nil
		b.mu.Unlock()
		cancel()
	}()
	return s.Run(ctx, req)
}

// answer writes the result of request seq and answers it.
func (b *backendBell) answer(seq uint64, r *backendpb.RunResponse, err error) {
	area := b.mem[doorbellResOff:doorbellResOff:doorbellSize]
	var code codes.Code
	var out []byte
	tooLarge := uint32(0)
	if err != nil {
		st := status.Convert(err)
		code, out = st.Code(), append(area, st.Message()[:min(len(st.Message()), cap(area))]...)
	} else {
		out, err = proto.MarshalOptions{}.MarshalAppend(area, r)
		switch {
		case err != nil:
			code, out = codes.Internal, append(area, "doorbell: encoding the response: "+err.Error()...)
		case unsafe.SliceData(out) != unsafe.SliceData(area):
			// Appending outgrew the area into a copy: the host sends the
			// Run again over gRPC.
			tooLarge, out = 1, nil
		}
	}
	atomic.StoreUint64(b.u64(bellResLen), uint64(len(out)))
	atomic.StoreUint32(b.u32(bellResCode), uint32(code))
	atomic.StoreUint32(b.u32(bellTooLarge), tooLarge)
	signal(b.u32(bellAnswer), b.u32(bellHostSleep), uint32(seq))
}
