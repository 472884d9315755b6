// Package attnrun runs ONNX models exported from PyTorch attention modules
// (single-head, multi-head, causal and masked, cross attention) from Go,
// with its CPU backend or pluggable ones (CUDA), and checks them against
// reference outputs. This package holds only this overview; the API is in
// the packages below it.
//
// # Use from Go
//
// The entry point is package [github.com/attnrun/attnrun/runtime/session]:
// session.Open loads a model and starts its backends, session.Session.Run
// (or RunWith, to write outputs into tensors bound once) runs it on named
// gorgonia tensors from any number of goroutines, Close stops the backends.
// Tensors made by session.Session.NewTensor live in memory the backend
// processes share: Runs pass them without copying.
//
//	s, err := session.Open(ctx, "model.onnx", session.Options{})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer s.Close()
//	out, err := s.Run(ctx, map[string]*tensor.Dense{"x": x})
//
// The CPU backend runs, by default, in a process of its own: a copy of the
// embedding program, which package [github.com/attnrun/attnrun/backends/cpu]
// turns into the backend from its init, before main runs; the program needs
// no call of its own for it. A crash or a hang there fails one Run, and the
// backend is replaced. session.Options chooses otherwise:
//   - InProcess runs the CPU backend inside the program: lower latency, no
//     crash isolation;
//   - Instances runs several instances of each backend, so that concurrent
//     Runs compute in parallel, with Threads threads each;
//   - Backend and PluginDir pick a plugin backend (attnrun-backend-NAME);
//     nodes it refuses fall back to the CPU backend, logged;
//   - RunTimeout, MaxTensorBytes bound each Run.
//
// session.ListBackends lists the backends that can run here. The runnable
// examples of package session show each of these.
//
// # Layers
//
// Each depends only on those before it: [github.com/attnrun/attnrun/onnx]
// decodes ONNX files into the IR of [github.com/attnrun/attnrun/ir];
// [github.com/attnrun/attnrun/runtime/graph] schedules, infers shapes and
// runs graphs with the op kernels of [github.com/attnrun/attnrun/ops];
// [github.com/attnrun/attnrun/plugins] is the protocol between the host and
// its backends ([github.com/attnrun/attnrun/backends/cpu],
// [github.com/attnrun/attnrun/backends/gpu]); runtime/session partitions a
// model across backends and runs it; cmd/attnrun is the command line
// (run, bench, conform, inspect, backends, ops).
package attnrun
