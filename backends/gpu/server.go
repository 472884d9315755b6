// Package gpu is attnrun's CUDA backend: a backend process (package
// plugins), served by cmd/attnrun-backend-gpu, that runs float32 attention
// graphs on an NVIDIA GPU.
//
// Nothing from CUDA is needed to build it: at start it loads libcuda.so.1,
// cuBLAS and NVRTC with dlopen (a small cgo shim of C trampolines, which
// also passes cublasSgemmStridedBatched's 18 arguments), compiles the
// embedded kernels.cu with NVRTC for the device, and loads the PTX. When
// any of that fails (no driver, no device, no NVRTC, a build without cgo),
// the process still serves: Info reports the reason in UnavailableReason
// and the host refuses to use the backend, saying why.
//
// Compile uploads a partition's weights once. Run builds (and caches) one
// device plan per set of input shapes from runtime/graph's plan: the
// folded, fused step list with concrete shapes. Intermediates live in one
// device arena per partition, placed by liveness (arena.go); only the
// partition's inputs and outputs cross between host and device. Elementwise,
// movement, Softmax, LayerNormalization and fused-attention kernels are
// CUDA C in kernels.cu; MatMul and Gemm call cublasSgemmStridedBatched with
// TF32 off unless ATTNRUN_GPU_TF32=1.
//
// Environment (read at start):
//
//	ATTNRUN_GPU_DEVICE     device ordinal (default 0)
//	ATTNRUN_GPU_TF32       1: let cuBLAS use TF32 tensor cores for MatMul/Gemm
//	                       (about 1e-3 relative error instead of about 1e-6)
//	ATTNRUN_GPU_SYNC       1: synchronize after every node, so that an
//	                       asynchronous CUDA error names the node that raised it
//	ATTNRUN_CUDA_LIB_DIRS  ':'-separated directories searched for libcuda,
//	                       libcublas and libnvrtc before the loader's path
package gpu

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
)

// Name is the backend's name (its executable is attnrun-backend-gpu).
const Name = "gpu"

// Version is the GPU backend's version, reported by Info.
const Version = "0.1.0"

// Environment variables read at start (see the package comment).
const (
	DeviceEnv  = "ATTNRUN_GPU_DEVICE"
	TF32Env    = "ATTNRUN_GPU_TF32"
	SyncEnv    = "ATTNRUN_GPU_SYNC"
	LibDirsEnv = "ATTNRUN_CUDA_LIB_DIRS"
)

// maxPlans bounds the per-partition plan cache (one plan per input shapes).
const maxPlans = 16

// Server implements plugins.Server on a CUDA device.
type Server struct {
	status *plugins.StatusWriter
	// dev runs the partitions; nil when the backend is unavailable. cuda
	// is the same device when it is a real GPU (for Info).
	dev         device
	cuda        *cudaDevice
	unavailable string
	cfg         deviceConfig
	syncEach    bool

	mu    sync.Mutex
	next  plugins.PartitionID
	parts map[plugins.PartitionID]*partition
	runs  atomic.Uint64
}

var _ plugins.Server = (*Server)(nil)

// configFromEnv reads the backend's environment variables.
func configFromEnv() (deviceConfig, bool, error) {
	var cfg deviceConfig
	if v := os.Getenv(DeviceEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return cfg, false, fmt.Errorf("%s=%q is not a device ordinal", DeviceEnv, v)
		}
		cfg.ordinal = n
	}
	cfg.tf32 = os.Getenv(TF32Env) == "1"
	for _, d := range strings.Split(os.Getenv(LibDirsEnv), ":") {
		if d != "" {
			cfg.libDirs = append(cfg.libDirs, d)
		}
	}
	return cfg, os.Getenv(SyncEnv) == "1", nil
}

// NewServer opens the device. It fails only on a bad configuration or
// status page; a machine without a usable GPU gives a Server whose Info
// reports the reason.
func NewServer() (*Server, error) {
	st, err := plugins.StatusWriterFromEnv()
	if err != nil {
		return nil, err
	}
	cfg, syncEach, err := configFromEnv()
	if err != nil {
		return nil, err
	}
	s := &Server{status: st, cfg: cfg, syncEach: syncEach, parts: map[plugins.PartitionID]*partition{}}
	if cd, err := openDevice(cfg); err != nil {
		s.unavailable = err.Error()
	} else {
		s.dev, s.cuda = cd, cd
	}
	return s, nil
}

// Main serves the backend; cmd/attnrun-backend-gpu calls it. With --probe
// it prints what Info would report and exits (0 when the GPU is usable).
func Main() {
	if len(os.Args) > 1 && os.Args[1] == "--probe" {
		os.Exit(probe())
	}
	s, err := NewServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "attnrun gpu backend: %v\n", err)
		os.Exit(1)
	}
	plugins.Serve(s)
	os.Exit(0)
}

func probe() int {
	s, err := NewServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "attnrun-backend-gpu: %v\n", err)
		return 1
	}
	info, _ := s.Info(context.Background())
	keys := make([]string, 0, len(info.Details))
	for k := range info.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s: %s\n", k, info.Details[k])
	}
	if info.UnavailableReason != "" {
		fmt.Printf("unavailable: %s\n", info.UnavailableReason)
		return 1
	}
	fmt.Println("available")
	return 0
}

// Info describes the backend and the device, or why there is none.
func (s *Server) Info(context.Context) (*plugins.Info, error) {
	info := &plugins.Info{
		Name:    Name,
		Version: Version,
		Pid:     os.Getpid(),
		Details: map[string]string{
			"go":            runtime.Version(),
			"cgo":           strconv.FormatBool(cgoEnabled),
			"max_rss_bytes": strconv.FormatInt(plugins.ProcessMaxRSS(), 10),
		},
		Ops:               supportedOps(),
		ProtocolVersion:   plugins.ProtocolVersion,
		UnavailableReason: s.unavailable,
	}
	if s.cuda == nil {
		info.Details["cuda"] = "unavailable"
		return info, nil
	}
	info.Details["cuda"] = "available"
	for k, v := range s.cuda.details() {
		info.Details[k] = v
	}
	var free, total int64
	if err := s.cuda.do(func() error {
		var err error
		free, total, err = s.cuda.memInfo()
		return err
	}); err == nil {
		info.Details["device_memory_free_bytes"] = strconv.FormatInt(free, 10)
		info.Details["device_memory_total_bytes"] = strconv.FormatInt(total, 10)
	}
	return info, nil
}

// errUnavailable is what a call needing the device returns without one.
func (s *Server) errUnavailable() error {
	return fmt.Errorf("gpu backend is unavailable: %s", s.unavailable)
}

// Capability accepts the nodes the GPU kernels take (see rules); without a
// device it refuses every node with the reason.
func (s *Server) Capability(_ context.Context, nodes []plugins.NodeQuery) ([]plugins.Verdict, error) {
	out := make([]plugins.Verdict, len(nodes))
	for i, q := range nodes {
		if s.dev == nil {
			out[i] = plugins.Verdict{Reason: s.errUnavailable().Error()}
			continue
		}
		out[i] = verdict(q)
	}
	return out, nil
}

// Compile decodes a partition, compiles it with runtime/graph and uploads
// the constants its device steps read.
func (s *Server) Compile(_ context.Context, model []byte, opts plugins.CompileOptions) (plugins.PartitionID, []plugins.NodeRef, error) {
	if s.dev == nil {
		return 0, nil, s.errUnavailable()
	}
	if opts.Precision != "" && opts.Precision != "fp32" {
		return 0, nil, fmt.Errorf("gpu backend: precision %q is not supported (fp32 only)", opts.Precision)
	}
	m, err := onnx.Decode(model, onnx.Options{MaxTensorBytes: opts.MaxTensorBytes, BaseDir: opts.ModelDir})
	if err != nil {
		return 0, nil, fmt.Errorf("gpu backend: decoding partition: %w", err)
	}
	prog, err := graph.Compile(m, graph.Options{Threads: 1, MaxTensorBytes: opts.MaxTensorBytes, NoFuse: opts.NoFuse, KeepFolded: true})
	if err != nil {
		return 0, nil, fmt.Errorf("gpu backend: %w", err)
	}
	p, err := newPartition(s.dev, prog)
	if err != nil {
		return 0, nil, fmt.Errorf("gpu backend: %w", err)
	}
	nodes := plugins.NodeRefs(prog.Order)
	s.mu.Lock()
	id := s.next
	s.next++
	s.parts[id] = p
	s.mu.Unlock()
	return id, nodes, nil
}

// Release frees a partition's device memory.
func (s *Server) Release(_ context.Context, id plugins.PartitionID) error {
	s.mu.Lock()
	p, ok := s.parts[id]
	delete(s.parts, id)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("gpu backend: no partition %d", id)
	}
	p.release()
	return nil
}

// Stats reports the process's peak RSS and counters.
func (s *Server) Stats(context.Context) (*plugins.Stats, error) {
	s.mu.Lock()
	n := len(s.parts)
	s.mu.Unlock()
	return &plugins.Stats{MaxRSSBytes: plugins.ProcessMaxRSS(), Partitions: n, Runs: s.runs.Load()}, nil
}
