package cpu

import (
	"runtime/debug"
	"runtime/metrics"
)

// The collector's pace in a backend process. Go lets the heap grow by
// GOGC% (100) of the live heap before it collects. In a backend most of the
// live heap is the model: weights and their packed copies, which never
// become garbage. With 600 MiB of them, each run's few MiB of garbage piled
// up to 600 MiB before a collection: a BERT-base-sized encoder's backend
// grew from 781 MiB after 10 runs to 1165 MiB after 150. tuneGC sets the
// percentage so that the allowance for garbage is what the default gives
// the memory that is not the model's, but at least gcFloorBytes: a small
// model keeps GOGC 100, a weight-heavy one collects every gcFloorBytes or
// so (cheap: weights hold no pointers, so marking them costs next to
// nothing).

// gcFloorBytes is the least garbage allowed to pile up between collections.
const gcFloorBytes = 64 << 20

// gcPercent returns the GC percentage for a live heap of live bytes of
// which model bytes are the model's (the budget's reservations: weights,
// packed weights, constants, run arenas; some of them may be mapped rather
// than on the heap): the allowance max(gcFloorBytes, live-model) as a
// percentage of live, between 10 and 100.
func gcPercent(live, model int64) int {
	if live <= 0 {
		return 100
	}
	allow := max(int64(gcFloorBytes), live-model)
	return int(min(max(allow*100/live, 10), 100))
}

// gcLiveMetric is the heap marked live by the last collection.
const gcLiveMetric = "/gc/heap/live:bytes"

// tuneGC applies gcPercent to the process (a backend process only: in
// process the collector is the host program's) when it changed.
func (s *Server) tuneGC() {
	if s.inProcess {
		return
	}
	sample := []metrics.Sample{{Name: gcLiveMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := gcPercent(int64(sample[0].Value.Uint64()), s.budget.Used())
	if int64(p) != s.gcPercent.Load() {
		s.gcPercent.Store(int64(p))
		debug.SetGCPercent(p)
	}
}
