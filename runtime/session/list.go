package session

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/attnrun/attnrun/plugins"
)

// ListBackends starts every backend attnrun can find (the built-in cpu
// backend and each attnrun-backend-* in the plugin directory), asks each for
// its Info and stops it. Backends that cannot be started, or that plugin
// verification refuses (see plugins.Discover: those are never executed), are
// listed as unavailable with the reason. Each call is bounded (the start
// timeout, then InfoTimeout), so a backend that never answers cannot hang
// the listing.
func ListBackends(ctx context.Context, opts Options) ([]BackendInfo, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	cands, err := plugins.Discover(opts.PluginDir, opts.PluginLock)
	if err != nil {
		return nil, err
	}
	out := make([]BackendInfo, 1, 1+len(cands))
	out[0] = BackendInfo{Name: CPU}
	for _, c := range cands {
		out = append(out, BackendInfo{Name: c.Name, Path: c.Path, SHA256: c.SHA256, Reason: c.Reason})
	}
	var wg sync.WaitGroup
	for i := range out {
		if out[i].Reason != "" {
			continue
		}
		wg.Add(1)
		go func(bi *BackendInfo) {
			defer wg.Done()
			proc, err := start(ctx, bi.Name, &opts, nil)
			if err != nil {
				bi.Reason = err.Error()
				return
			}
			defer proc.Kill()
			info, err := proc.Info(ctx)
			if err != nil {
				bi.Reason = err.Error()
				return
			}
			bi.Available, bi.Version, bi.Pid, bi.Details, bi.Ops = true, info.Version, info.Pid, info.Details, info.Ops
			switch {
			case info.ProtocolVersion != plugins.ProtocolVersion:
				bi.Available = false
				bi.Reason = fmt.Sprintf("speaks protocol %d, attnrun speaks %d", info.ProtocolVersion, plugins.ProtocolVersion)
			case info.UnavailableReason != "":
				bi.Available = false
				bi.Reason = info.UnavailableReason
			}
		}(&out[i])
	}
	wg.Wait()
	sort.SliceStable(out[1:], func(i, j int) bool { return out[1+i].Name < out[1+j].Name })
	return out, nil
}
