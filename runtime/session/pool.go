package session

import (
	"context"
	"fmt"
	"sync"
)

// Instances. A session runs Options.Instances instances of each backend it
// uses: each instance is a backend process of its own (or an in-process
// backend) with every partition of that backend compiled in it once, at
// Open. A pool holds one backend's instances; a Run takes a free instance
// for each partition it runs (waiting, as long as its context allows, when
// all are busy) and gives it back after, so Runs from several goroutines
// run on different instances at the same time, and a Run's partitions may
// run on different instances of their backends (they are compiled alike).

// pool is one backend's instances.
type pool struct {
	name string
	// members are the instances, instance i at index i; member 0 is
	// started first, and its Capability answers assign the nodes.
	members []*backend
	// parts are the partitions that run on this backend; a partition's
	// slot indexes them, and each member's process.ids.
	parts []*partition
	// free holds the members no Run is using.
	free chan *backend
	// bg ends when the session closes.
	bg context.Context
}

// newPool makes the pool of backend name with n (not yet started) members.
func newPool(name string, n int, opts *Options, bg context.Context, wg *sync.WaitGroup) *pool {
	pl := &pool{name: name, bg: bg, free: make(chan *backend, n)}
	for i := 0; i < n; i++ {
		pl.members = append(pl.members, &backend{name: name, instance: i, pool: pl, opts: opts, bg: bg, wg: wg})
	}
	return pl
}

// release makes every member available to Runs (once Open has started and
// compiled them all).
func (pl *pool) release() {
	for _, b := range pl.members {
		pl.free <- b
	}
}

// get takes a free member, waiting for one as long as ctx allows (or until
// the session closes).
func (pl *pool) get(ctx context.Context) (*backend, error) {
	select {
	case b := <-pl.free:
		return b, nil
	default:
	}
	select {
	case b := <-pl.free:
		return b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("backend %q: run interrupted while waiting for a free instance (all %d busy): %w", pl.name, len(pl.members), ctx.Err())
	case <-pl.bg.Done():
		return nil, errClosed
	}
}

// put gives a member back.
func (pl *pool) put(b *backend) { pl.free <- b }

// getAvoiding is get for the retry of a Run whose instance avoid died (see
// RunOptions.RetryOf): it starts avoid's replacement now, and returns
// another member as soon as one is free, or avoid once its replacement is
// ready (or failed to start: acquire then says why), whichever comes
// first. A nil avoid, or a pool of one, is plain get.
func (pl *pool) getAvoiding(ctx context.Context, avoid *backend) (*backend, error) {
	if avoid == nil || len(pl.members) == 1 {
		return pl.get(ctx)
	}
	restarted := avoid.restartIfDead()
	b, err := pl.get(ctx)
	if err != nil || b != avoid || restarted == nil {
		return b, err
	}
	// Holding the dead instance (no other Run would do better with it),
	// wait for another one or for its replacement.
	select {
	case other := <-pl.free:
		pl.put(b)
		return other, nil
	case <-restarted:
		return b, nil
	case <-ctx.Done():
		pl.put(b)
		return nil, fmt.Errorf("backend %q: run interrupted while waiting for an instance other than %d, whose backend died: %w", pl.name, avoid.instance, ctx.Err())
	case <-pl.bg.Done():
		pl.put(b)
		return nil, errClosed
	}
}
