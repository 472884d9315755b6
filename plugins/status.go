package plugins

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// StatusFDEnv names the environment variable that tells a backend which file
// descriptor holds the status page (3: the first of exec.Cmd.ExtraFiles).
const StatusFDEnv = "ATTNRUN_STATUS_FD"

// The status page: one page of shared memory, written by the backend before
// each node and read by the host after the backend died.
//
//	[0:8)   magic "ATNSTAT1"
//	[8:16)  sequence number, incremented by every write (uint64)
//	[16:24) partition id (uint64)
//	[24:32) node index + 1 in the partition's execution order; 0 when idle (uint64)
//	[32:40) length of the step label (uint64); 0 for a node of the partition's own
//	[64:)   the step label: for a fused step (one that runs in place of several
//	        nodes), what it is and which nodes it replaced, cut to fit the page
//
// Words are written with atomic stores, so a reader never sees a torn word;
// the sequence number is odd while the two other words are being updated.
const (
	statusPageSize = 4096
	statusMagic    = "ATNSTAT1"
	offSeq         = 8
	offPartition   = 16
	offNode        = 24
	offLabelLen    = 32
	offLabel       = 64
)

// statusPage is a mapped status page.
type statusPage struct {
	mu  sync.RWMutex // the host's reads against its close
	mem []byte
}

func (p *statusPage) word(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&p.mem[off]))
}

// newHostStatusPage creates the page for one backend process: a memfd (or,
// where memfds are missing, an unlinked temporary file) mapped shared. The
// returned file is handed to the child as fd 3.
func newHostStatusPage() (*os.File, *statusPage, error) {
	var f *os.File
	fd, err := unix.MemfdCreate("attnrun-backend-status", unix.MFD_CLOEXEC)
	if err == nil {
		f = os.NewFile(uintptr(fd), "attnrun-backend-status")
	} else {
		f, err = os.CreateTemp("", "attnrun-backend-status-*")
		if err != nil {
			return nil, nil, fmt.Errorf("status page: %w", err)
		}
		_ = os.Remove(f.Name())
	}
	if err := f.Truncate(statusPageSize); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("status page: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, statusPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("status page: mmap: %w", err)
	}
	copy(mem, statusMagic)
	return f, &statusPage{mem: mem}, nil
}

// close unmaps the page.
func (p *statusPage) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mem != nil {
		_ = unix.Munmap(p.mem)
		p.mem = nil
	}
}

// pageState is what the status page says.
type pageState struct {
	Partition PartitionID
	Node      int  // valid when Running
	Running   bool // false between nodes (or before the first)
	Seq       uint64
	Label     string // the running step's label, "" for a node of its own
	// Open is false when the page is closed (or was never mapped): the
	// rest is then zero.
	Open bool
}

// state returns the last state the backend recorded, all of it read while
// the page is held against close.
func (p *statusPage) state() pageState {
	if p == nil {
		return pageState{}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.mem == nil || string(p.mem[:8]) != statusMagic {
		return pageState{}
	}
	st := pageState{Open: true, Seq: atomic.LoadUint64(p.word(offSeq)), Partition: PartitionID(atomic.LoadUint64(p.word(offPartition)))}
	if n := atomic.LoadUint64(p.word(offNode)); n > 0 {
		st.Node, st.Running = int(n-1), true
		l := min(atomic.LoadUint64(p.word(offLabelLen)), uint64(len(p.mem)-offLabel))
		st.Label = string(p.mem[offLabel : offLabel+int(l)])
	}
	return st
}

// read returns the last state the backend recorded: running is false when
// it was between nodes (or never started one).
func (p *statusPage) read() (partition PartitionID, node int, running bool, seq uint64) {
	st := p.state()
	return st.Partition, st.Node, st.Running, st.Seq
}

// StatusWriter records what a backend is running in the host's status page.
// A nil *StatusWriter (no page was passed) ignores every call. Its methods
// are cheap (a few atomic stores) and safe to call before every node.
type StatusWriter struct {
	page *statusPage
}

// StatusWriterFromEnv maps the status page the host passed (see StatusFDEnv).
// It returns a nil writer and no error when the backend was started without
// one, e.g. by hand.
func StatusWriterFromEnv() (*StatusWriter, error) {
	fd, err := fdFromEnv(StatusFDEnv)
	if fd < 0 || err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, statusPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("status page (fd %d): mmap: %w", fd, err)
	}
	if string(mem[:8]) != statusMagic {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("status page (fd %d): bad magic %q", fd, mem[:8])
	}
	_ = unix.Close(fd) // the mapping stays valid
	return &StatusWriter{page: &statusPage{mem: mem}}, nil
}

func (w *StatusWriter) set(partition PartitionID, nodePlusOne uint64, label string) {
	if w == nil {
		return
	}
	// Held against the reader's state: an in-process backend's page is
	// read in the same process (the label's bytes are not written
	// atomically); in a backend process the lock is never contended.
	w.page.mu.Lock()
	defer w.page.mu.Unlock()
	seq := w.page.word(offSeq)
	atomic.AddUint64(seq, 1)
	n := copy(w.page.mem[offLabel:], label)
	atomic.StoreUint64(w.page.word(offLabelLen), uint64(n))
	atomic.StoreUint64(w.page.word(offPartition), uint64(partition))
	atomic.StoreUint64(w.page.word(offNode), nodePlusOne)
	atomic.AddUint64(seq, 1)
}

// Running records that node (an index into the partition's execution order,
// as returned by Compile) of partition is about to run.
func (w *StatusWriter) Running(partition PartitionID, node int) {
	w.set(partition, uint64(node)+1, "")
}

// RunningStep records that a step standing for node of partition is about
// to run, with a label saying what it is: a fused step replaces several
// nodes of the partition, and a DiedError then names it by its label
// rather than by the node whose index it runs at.
func (w *StatusWriter) RunningStep(partition PartitionID, node int, label string) {
	w.set(partition, uint64(node)+1, label)
}

// Idle records that no node is running (a Run finished).
func (w *StatusWriter) Idle(partition PartitionID) {
	w.set(partition, 0, "")
}

// label returns the step label last recorded ("" when none, or when no
// node is running).
func (p *statusPage) label() string { return p.state().Label }
