package onnx

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/attnrun/attnrun/internal/regfile"
	"github.com/attnrun/attnrun/ir"
)

// WeightStore releases the float32 data of weights a backend holds packed
// (graph.WeightReleaser) and restores it should a later plan read it: a
// weight mapped from its file gets its pages dropped (MADV_DONTNEED: a
// later read faults them back in from the file), a weight read into memory
// (at an offset not aligned for its type) gets its data dropped and read
// again from the file it came from on Restore. A weight loaded by
// reference (Options.ReferenceWeights) is released from the start. Open
// it right after decoding the model: it keeps open the files the model's
// weights were read from, so that a file renamed over the model, or
// removed, later does not change what is restored; a file written in
// place (its size or modification time changed) fails Restore with an
// error naming the weight and the file.
type WeightStore struct {
	mu    sync.Mutex
	files map[string]*heldFile
	// names are the weights' initializer names, for errors.
	names map[*ir.Tensor]string
	// dropped is what Release gave back since the last collection.
	dropped int64
}

// heldFile is a weights file the store keeps open, with its identity when
// opened.
type heldFile struct {
	f  *os.File
	id ir.FileIdentity
}

// collectEveryBytes is how much dropped weight data Release lets pile up
// before it runs a collection: a backend packs weight after weight, and
// without one the packed copies grow on top of the dropped float32 ones
// until the collector's own pace catches up (a 96 MiB model peaked at
// 1.9× its weights instead of 1.2×). A collection costs little here: the
// weights hold no pointers.
const collectEveryBytes = 16 << 20

// NewWeightStore opens the files m's large float32 external weights read
// into memory (not mapped) come from; only those are released (weights
// under mapMinBytes are not worth a file kept open). A file that is not
// the one the model was loaded from (ir.ExternalData.File: one renamed
// over it, or rewritten, since) is refused.
func NewWeightStore(m *ir.Model) (*WeightStore, error) {
	s := &WeightStore{files: map[string]*heldFile{}, names: map[*ir.Tensor]string{}}
	if m == nil || m.Graph == nil {
		return s, nil
	}
	for name, t := range m.Graph.Initializers {
		e := t.External
		if e == nil || e.Mapped || t.DType != ir.Float || e.Length < mapMinBytes {
			continue
		}
		s.names[t] = name
		path := filepath.Join(e.Dir, filepath.FromSlash(e.Location))
		if _, ok := s.files[path]; ok {
			continue
		}
		f, st, err := regfile.OpenNoFollow(path)
		if err == nil {
			// The file the model was loaded from, not one renamed over
			// it (or rewritten) since.
			if err = checkIdentity(path, e.File, st); err != nil {
				f.Close()
			}
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("initializer %q: external data %q: %w", name, e.Location, err)
		}
		s.files[path] = &heldFile{f: f, id: identityOf(st)}
	}
	return s, nil
}

// Release drops t's float32 data (see WeightStore) and returns how many
// bytes of the heap that gave back; 0 for a mapped weight, whose pages
// are dropped but whose data stays readable.
func (s *WeightStore) Release(t *ir.Tensor) (int64, error) {
	e := t.External
	data := t.Float32s()
	if e == nil || len(data) == 0 {
		return 0, nil
	}
	if e.Mapped {
		// The mapping starts at the page holding the first byte.
		lead := int(uintptr(unsafe.Pointer(&data[0])) % uintptr(os.Getpagesize()))
		mem := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&data[0]), -lead)), lead+len(data)*4)
		if err := unix.Madvise(mem, unix.MADV_DONTNEED); err != nil {
			return 0, fmt.Errorf("external data %q: dropping its pages: %v", e.Location, err)
		}
		return 0, nil
	}
	s.mu.Lock()
	_, ok := s.files[filepath.Join(e.Dir, filepath.FromSlash(e.Location))]
	s.mu.Unlock()
	if !ok || e.Length < mapMinBytes {
		return 0, nil // small, or not of the model this store opened: kept
	}
	n := t.Bytes()
	t.Data = nil
	s.mu.Lock()
	s.dropped += n
	collect := s.dropped >= collectEveryBytes
	if collect {
		s.dropped = 0
	}
	s.mu.Unlock()
	if collect {
		runtime.GC()
	}
	return n, nil
}

// Restore reads a released t's data again from its file, which must be
// as it was when the store opened it.
func (s *WeightStore) Restore(t *ir.Tensor) error {
	if !t.Released() {
		return nil
	}
	e := t.External
	path := filepath.Join(e.Dir, filepath.FromSlash(e.Location))
	s.mu.Lock()
	h, name := s.files[path], s.names[t]
	s.mu.Unlock()
	label := fmt.Sprintf("weight %q (%s, offset %d)", name, path, e.Offset)
	if name == "" {
		label = fmt.Sprintf("a weight of shape %v (%s, offset %d)", t.Shape, path, e.Offset)
	}
	if h == nil {
		return fmt.Errorf("%s: its data is not in memory, and its file is not open", label)
	}
	st, err := h.f.Stat()
	if err != nil {
		return fmt.Errorf("%s: reading it back: %v", label, err)
	}
	if err := checkIdentity(path, h.id, st); err != nil {
		return fmt.Errorf("%s: reading it back: %w", label, err)
	}
	data := make([]float32, ir.NumElements(t.Shape))
	buf := ir.BytesOf(data)
	if int64(len(buf)) != e.Length {
		return fmt.Errorf("%s: %d bytes for shape %v, the file has %d", label, len(buf), t.Shape, e.Length)
	}
	if _, err := h.f.ReadAt(buf, e.Offset); err != nil {
		return fmt.Errorf("%s: reading it back: %v", label, err)
	}
	t.Data = data
	return nil
}

// Close closes the files the store keeps open.
func (s *WeightStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, h := range s.files {
		h.f.Close()
		delete(s.files, p)
	}
	return nil
}
