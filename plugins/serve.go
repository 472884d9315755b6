package plugins

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Handshake is the go-plugin handshake host and backends share.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   MagicCookieKey,
	MagicCookieValue: MagicCookieValue,
}

// Serve serves impl as a backend over go-plugin's gRPC transport and returns
// when the host ends the process's service (normally the host kills it).
// Call it from a backend's main; the process must have been started by
// Launch (the handshake cookie is in its environment), otherwise go-plugin
// prints a notice and exits with status 1.
//
// When the host passed a tensor region (SharedFDEnv), Run requests may carry
// tensors in it (see shm.go), and in the session's tensor arena
// (ArenaFDEnv, see arena.go); the Server sees ordinary tensors either way.
//
// When the host passed a parent pipe (ParentFDEnv), the backend exits as soon
// as the host process is gone, so that a crashed host leaves no backends
// behind.
func Serve(impl Server) {
	if err := watchParent(os.Getenv(ParentFDEnv), func() { os.Exit(3) }); err != nil {
		fmt.Fprintf(os.Stderr, "attnrun backend: %v\n", err)
		os.Exit(1)
	}
	shm, err := backendShmFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "attnrun backend: %v\n", err)
		os.Exit(1)
	}
	bell, err := backendBellFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "attnrun backend: %v\n", err)
		os.Exit(1)
	}
	arena, err := backendMapFromEnv(ArenaFDEnv, "tensor arena")
	if err != nil {
		fmt.Fprintf(os.Stderr, "attnrun backend: %v\n", err)
		os.Exit(1)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{PluginName: &grpcPlugin{impl: impl, shm: shm, bell: bell, arena: arena}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes))
			return grpc.NewServer(opts...)
		},
		Logger: backendLogger(),
	})
}

// backendLoggerName names a backend process's logger: its JSON lines carry
// it as @module, which the host's lines show (TidyLogLine).
const backendLoggerName = "attnrun-backend"

// backendLogger is a backend process's logger: JSON lines on stderr, whose
// levels the host's go-plugin client reads, warnings and worse.
func backendLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       backendLoggerName,
		Level:      hclog.Warn,
		Output:     os.Stderr,
		JSONFormat: true, // the host parses levels from JSON lines
	})
}

// BackendLogf returns a printf-style function that a backend process logs
// warnings for the host with (graph.Options.Logf): each call one line the
// host's Logf prints.
func BackendLogf() func(format string, args ...any) {
	l := backendLogger()
	return func(format string, args ...any) { l.Warn(fmt.Sprintf(format, args...)) }
}

// ParentFDEnv names the environment variable that tells a backend which file
// descriptor is the read end of a pipe whose write end only the host holds:
// end of file on it means the host is gone.
const ParentFDEnv = "ATTNRUN_PARENT_FD"

// fdFromEnv returns the file descriptor the environment variable name
// holds, -1 without error when it is unset or empty.
func fdFromEnv(name string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return -1, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		return -1, fmt.Errorf("%s=%q is not a file descriptor", name, v)
	}
	return fd, nil
}

// watchParent calls gone once reading the pipe fd v hits end of file (or
// fails). An empty v means no pipe was passed.
func watchParent(v string, gone func()) error {
	if v == "" {
		return nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 0 {
		return fmt.Errorf("%s=%q is not a file descriptor", ParentFDEnv, v)
	}
	f := os.NewFile(uintptr(fd), "attnrun-parent")
	if f == nil {
		return fmt.Errorf("%s=%d is not open", ParentFDEnv, fd)
	}
	go func() {
		_, _ = io.Copy(io.Discard, f)
		gone()
	}()
	return nil
}
