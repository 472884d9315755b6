package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/attnrun/attnrun/serve"
	"github.com/attnrun/attnrun/serve/repo"
)

// serveFlags are the flags of `attnrun serve`.
type serveFlags struct {
	repository      string
	models          []string
	httpAddr        string
	grpcAddr        string
	metricsAddr     string
	instances       int
	maxBatch        int
	maxQueueDelay   time.Duration
	batchDim        string
	maxQueue        int
	versionPolicy   string
	maxRequestBytes int64
	requestTimeout  time.Duration
	drainTimeout    time.Duration
	logFormat       string
	logLevel        string
	workerSpin      string
}

func newServeCmd(g *globalFlags) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve (--model-repository DIR | --model NAME=model.onnx ...)",
		Short: "Serve models over the Open Inference Protocol (KServe V2) on HTTP and gRPC",
		Long: `serve answers the Open Inference Protocol (KServe's "V2" protocol, as Triton,
KServe, Seldon MLServer and ONNX Runtime Server speak it) over HTTP/REST and
gRPC (inference.GRPCInferenceService), with Prometheus metrics on a third port.

Models come from a repository in Triton's layout,
  DIR/<model>/<version>/model.onnx   and an optional DIR/<model>/config.yaml,
or from --model NAME=path.onnx (served as version 1). POST
v2/repository/models/<model>/load reloads a model (new versions go live
without dropping requests); SIGHUP rescans the whole repository. SIGTERM or
Ctrl-C drains: readiness turns false, new requests get 503 / UNAVAILABLE,
requests in progress finish (up to --drain-timeout), then the server exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), g, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.repository, "model-repository", "", "model repository directory: DIR/<model>/<version>/model.onnx")
	fl.StringArrayVar(&f.models, "model", nil, "serve one model file as NAME (repeatable): NAME=path.onnx")
	fl.StringVar(&f.httpAddr, "http", ":8000", `HTTP/REST listen address ("off" to disable)`)
	fl.StringVar(&f.grpcAddr, "grpc", ":8001", `gRPC listen address ("off" to disable)`)
	fl.StringVar(&f.metricsAddr, "metrics", ":8002", `Prometheus metrics listen address, path /metrics ("off" to disable)`)
	fl.IntVar(&f.instances, "instances", 1, "backend instances per model version (runs in parallel); a model's config.yaml may override")
	fl.IntVar(&f.maxBatch, "max-batch-size", 0, "dynamic batching: most rows stacked along dim 0 in one run, for models whose inputs and outputs all lead with --batch-dim (0: off)")
	fl.DurationVar(&f.maxQueueDelay, "max-queue-delay", time.Millisecond, "dynamic batching: longest wait for a batch to fill once an instance is free")
	fl.StringVar(&f.batchDim, "batch-dim", "batch", "the symbolic dim name that marks a batch dim for --max-batch-size")
	fl.IntVar(&f.maxQueue, "max-queue", 64, "requests that may wait per model version; more get 503 / UNAVAILABLE")
	fl.StringVar(&f.versionPolicy, "version-policy", "latest", "versions served per model: latest, latest:N or all (config.yaml may override)")
	fl.Int64Var(&f.maxRequestBytes, "max-request-bytes", 64<<20, "largest request body (HTTP, after decompression) or message (gRPC)")
	fl.DurationVar(&f.requestTimeout, "request-timeout", time.Minute, "longest an inference request may take, queue included (0: no limit)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 8*time.Second, "on SIGTERM, longest wait for requests in progress before exiting")
	fl.StringVar(&f.logFormat, "log-format", "text", "log format on stderr: text or json")
	fl.StringVar(&f.logLevel, "log-level", "info", "least severe log level: debug (every request), info, warn or error")
	fl.StringVar(&f.workerSpin, "worker-spin", "", "how long the backends' idle compute workers poll for work before parking, e.g. 0, 50us or 2ms (default: the backend's, $ATTNRUN_SPIN or 2ms); shorter leaves the cores to clients on the same machine; a model's config.yaml may override")
	return cmd
}

// serverOptions checks the flags and builds the server's options.
func (f *serveFlags) serverOptions(g *globalFlags, logger *slog.Logger) (serve.Options, error) {
	var zero serve.Options
	switch {
	case f.repository == "" && len(f.models) == 0:
		return zero, usageErrorf("serve: give --model-repository DIR or --model NAME=path.onnx")
	case f.instances < 1:
		return zero, usageErrorf("--instances must be ≥ 1")
	case f.maxBatch < 0:
		return zero, usageErrorf("--max-batch-size must be ≥ 0")
	case f.maxQueueDelay < 0:
		return zero, usageErrorf("--max-queue-delay must be ≥ 0")
	case f.maxQueue < 1:
		return zero, usageErrorf("--max-queue must be ≥ 1")
	case f.maxRequestBytes < 1 || f.maxRequestBytes > math.MaxInt32:
		return zero, usageErrorf("--max-request-bytes must be between 1 and %d (gRPC's message limit)", math.MaxInt32)
	case f.requestTimeout < 0 || f.drainTimeout < 0:
		return zero, usageErrorf("--request-timeout and --drain-timeout must be ≥ 0")
	case g.maxTensorBytes <= 0:
		return zero, usageErrorf("--max-tensor-bytes must be positive")
	case g.threads < 0:
		return zero, usageErrorf("--threads must be ≥ 0")
	case f.httpAddr == "off" && f.grpcAddr == "off":
		return zero, usageErrorf("serve: --http and --grpc are both off")
	}
	for _, a := range [][2]string{{"http", f.httpAddr}, {"grpc", f.grpcAddr}, {"metrics", f.metricsAddr}} {
		if a[1] == "off" {
			continue
		}
		// A malformed address is a usage error; one that cannot be bound
		// (in use, not this host's) is found when listening.
		if _, port, err := net.SplitHostPort(a[1]); err != nil {
			return zero, usageErrorf("--%s %q: want HOST:PORT, :PORT or off (%v)", a[0], a[1], err)
		} else if n, err := strconv.ParseUint(port, 10, 64); err == nil && n > 65535 {
			return zero, usageErrorf("--%s %q: the port must be a number from 0 to 65535", a[0], a[1])
		}
	}
	policy, err := repo.ParseVersionPolicy(f.versionPolicy)
	if err != nil {
		return zero, usageErrorf("--version-policy: %v", err)
	}
	models := map[string]string{}
	for _, m := range f.models {
		name, path, ok := strings.Cut(m, "=")
		if !ok || name == "" || path == "" {
			return zero, usageErrorf("--model %q: want NAME=path.onnx", m)
		}
		if _, dup := models[name]; dup {
			return zero, usageErrorf("--model %q is given twice", name)
		}
		if err := repo.CheckName(name); err != nil {
			return zero, usageErrorf("--model: %v", err)
		}
		models[name] = path
	}
	so := g.sessionOptions()
	so.Logf = nil // set per model by the server
	if f.workerSpin != "" {
		d, err := time.ParseDuration(f.workerSpin)
		if err != nil || d < 0 {
			return zero, usageErrorf("--worker-spin %q: want a duration ≥ 0 like 0, 50us or 2ms", f.workerSpin)
		}
		so.WorkerSpin = &d
	}
	return serve.Options{
		Repository: f.repository, Models: models, Session: so,
		Instances: f.instances, MaxQueue: f.maxQueue,
		MaxBatch: f.maxBatch, MaxQueueDelay: f.maxQueueDelay, BatchDim: f.batchDim,
		VersionPolicy: policy, MaxTensorBytes: g.maxTensorBytes, RequestTimeout: f.requestTimeout,
		Version: currentVersion().short(), Logger: logger,
	}, nil
}

// newLogger makes the structured logger the flags ask for.
func (f *serveFlags) newLogger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", f.logFormat)
}

// listen opens a listener unless the address is "off".
func listen(what, addr string) (net.Listener, error) {
	if addr == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", what, addr, err)
	}
	return ln, nil
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return "off"
	}
	return ln.Addr().String()
}

func runServe(ctx context.Context, g *globalFlags, f *serveFlags) error {
	logger, err := f.newLogger()
	if err != nil {
		return err
	}
	opts, err := f.serverOptions(g, logger)
	if err != nil {
		return err
	}
	// SIGTERM and SIGHUP are ours from here on; Ctrl-C arrives through ctx.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if g.signals != nil {
		g.signals.handOver(syscall.SIGTERM, syscall.SIGHUP)
	}

	srv, err := serve.New(opts)
	if err != nil {
		return usageError{err}
	}
	var lns [3]net.Listener
	for i, spec := range [][2]string{{"http", f.httpAddr}, {"grpc", f.grpcAddr}, {"metrics", f.metricsAddr}} {
		if lns[i], err = listen(spec[0], spec[1]); err != nil {
			closeAll(lns[:])
			return err
		}
	}
	start := time.Now()
	if err := srv.Start(ctx); err != nil {
		closeAll(lns[:])
		srv.Close()
		return err
	}
	logger.Info("models loaded", "seconds", time.Since(start).Seconds())

	errc := make(chan error, 3)
	var httpSrv, metricsSrv *http.Server
	if lns[0] != nil {
		httpSrv = &http.Server{Handler: srv.HTTPHandler(f.maxRequestBytes), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { errc <- serveHTTP(httpSrv, lns[0], "http") }()
	}
	var grpcSrv *grpc.Server
	if lns[1] != nil {
		grpcSrv = grpc.NewServer(serve.GRPCServerOptions(f.maxRequestBytes)...)
		srv.RegisterGRPC(grpcSrv)
		reflection.Register(grpcSrv)
		go func() {
			if err := grpcSrv.Serve(lns[1]); err != nil {
				errc <- fmt.Errorf("grpc: %w", err)
			}
		}()
	}
	if lns[2] != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(srv.Registry(), promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- serveHTTP(metricsSrv, lns[2], "metrics") }()
	}
	logger.Info("serving", "http", addrOf(lns[0]), "grpc", addrOf(lns[1]), "metrics", addrOf(lns[2]), "pid", os.Getpid())

	var runErr error
loop:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				logger.Info("SIGHUP: rescanning the model repository")
				srv.Rescan(context.WithoutCancel(ctx))
				continue
			}
			logger.Info("SIGTERM: draining")
			break loop
		case <-ctx.Done():
			logger.Info("interrupted: draining")
			break loop
		case runErr = <-errc:
			if runErr != nil {
				logger.Error("a listener failed; shutting down", "error", runErr.Error())
				break loop
			}
		}
	}
	shutdown(logger, srv, f.drainTimeout, httpSrv, metricsSrv, grpcSrv, sigs)
	return runErr
}

func serveHTTP(s *http.Server, ln net.Listener, what string) error {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
}

// shutdown drains and stops everything within drainTimeout plus about
// 1.5 s: readiness turns false and new requests are refused at once,
// requests in progress get up to drainTimeout, then the listeners close
// and the backends stop. A second SIGTERM skips the wait.
func shutdown(logger *slog.Logger, srv *serve.Server, drainTimeout time.Duration, httpSrv, metricsSrv *http.Server, grpcSrv *grpc.Server, sigs <-chan os.Signal) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	go func() {
		select {
		case <-sigs:
			logger.Warn("second signal: not waiting for requests in progress")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := srv.Drain(ctx); err != nil {
		logger.Warn("drain incomplete", "error", err.Error())
	}
	cancel()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stopCancel()
	for _, h := range []*http.Server{httpSrv, metricsSrv} {
		if h != nil {
			h.Shutdown(stopCtx)
		}
	}
	if grpcSrv != nil {
		stopped := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-stopCtx.Done():
			grpcSrv.Stop()
		}
	}
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Second):
		logger.Warn("backends still stopping; exiting (they exit with this process)")
	}
	logger.Info("stopped", "seconds", time.Since(start).Seconds())
}
