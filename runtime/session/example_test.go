package session_test

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"sync"

	"github.com/attnrun/attnrun/runtime/session"
	"gorgonia.org/tensor"
)

// The examples run seed 000's MultiHeadAttention (hidden size 32, 4 heads),
// exported from PyTorch: one input x: float32[batch, seq, 32], one output
// y of the same shape. The values printed agree with an independent
// evaluation of the ONNX graph (models/export.py's numpy interpreter).
const model = "../../models/s000_multi_head/model.onnx"

// input returns an x of shape [1, seq, 32] with values depending on seed.
func input(seq int, seed float64) *tensor.Dense {
	x := make([]float32, seq*32)
	for i := range x {
		x[i] = float32(math.Sin(seed + float64(i)/7))
	}
	return tensor.New(tensor.WithShape(1, seq, 32), tensor.WithBacking(x))
}

// Open a model and run it. The CPU backend runs in a process of its own,
// started by Open (a copy of this program: nothing to call from main for
// it) and stopped by Close.
func ExampleOpen() {
	ctx := context.Background()
	s, err := session.Open(ctx, model, session.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	for _, in := range s.Inputs() {
		fmt.Println("input", in.Name, in.Type)
	}
	out, err := s.Run(ctx, map[string]*tensor.Dense{"x": input(4, 0)})
	if err != nil {
		log.Fatal(err)
	}
	y := out["y"]
	fmt.Println("y", y.Shape())
	fmt.Printf("y[0, 0, :3] = %.4f\n", y.Data().([]float32)[:3])
	// Output:
	// input x float32[batch, seq, 32]
	// y (1, 4, 32)
	// y[0, 0, :3] = [-0.1128 0.0330 -0.2186]
}

// Tensors the backends share: an input and a bound output made by
// NewTensor live in memory the backend process maps too, so the Run
// passes them by reference instead of copying them into and out of the
// backend's region. The profile says which tensors took that path.
func ExampleSession_NewTensor() {
	ctx := context.Background()
	s, err := session.Open(ctx, model, session.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	x, err := s.NewTensor(tensor.Float32, 1, 4, 32)
	if err != nil {
		log.Fatal(err)
	}
	defer s.FreeTensor(x)
	y, err := s.NewTensor(tensor.Float32, 1, 4, 32)
	if err != nil {
		log.Fatal(err)
	}
	defer s.FreeTensor(y)
	copy(x.Data().([]float32), input(4, 0).Data().([]float32))

	prof := &session.Profile{}
	if _, err := s.RunWith(ctx, map[string]*tensor.Dense{"x": x}, session.RunOptions{Into: map[string]*tensor.Dense{"y": y}, Profile: prof}); err != nil {
		log.Fatal(err)
	}
	p := prof.Runs[0].Partitions[0]
	fmt.Println("passed by reference:", p.InputsShared, p.OutputsShared)
	fmt.Printf("y[0, 0, :3] = %.4f\n", y.Data().([]float32)[:3])
	// Output:
	// passed by reference: [x] [y]
	// y[0, 0, :3] = [-0.1128 0.0330 -0.2186]
}

// Bound outputs: RunWith writes the outputs named in RunOptions.Into into
// tensors the caller allocated once (like ONNX Runtime's IOBinding), so a
// loop of runs allocates no output memory.
func ExampleSession_RunWith() {
	ctx := context.Background()
	s, err := session.Open(ctx, model, session.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	y := tensor.New(tensor.WithShape(1, 4, 32), tensor.WithBacking(make([]float32, 4*32)))
	ro := session.RunOptions{Into: map[string]*tensor.Dense{"y": y}}
	for step := 0; step < 3; step++ {
		out, err := s.RunWith(ctx, map[string]*tensor.Dense{"x": input(4, float64(step))}, ro)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("step %d: result in the bound tensor: %v, y[0, 0, 0] = %.4f\n", step, out["y"] == y, y.Data().([]float32)[0])
	}
	// Output:
	// step 0: result in the bound tensor: true, y[0, 0, 0] = -0.1128
	// step 1: result in the bound tensor: true, y[0, 0, 0] = -0.1102
	// step 2: result in the bound tensor: true, y[0, 0, 0] = -0.1397
}

// Concurrent runs: a session with 2 instances runs 2 Runs at the same time,
// each on its own backend process (with the model compiled in it), here 1
// thread each. Run is safe from any number of goroutines; a Run that finds
// every instance busy waits for one.
func ExampleOptions_instances() {
	ctx := context.Background()
	s, err := session.Open(ctx, model, session.Options{Instances: 2, Threads: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	want, err := s.Run(ctx, map[string]*tensor.Dense{"x": input(8, 1)})
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	same := make([]bool, 8)
	for g := range same {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := s.Run(ctx, map[string]*tensor.Dense{"x": input(8, 1)})
			if err != nil {
				log.Fatal(err)
			}
			same[g] = slices.Equal(out["y"].Data().([]float32), want["y"].Data().([]float32))
		}()
	}
	wg.Wait()
	fmt.Println("instances:", s.Instances())
	fmt.Println("backend processes:", len(s.Backends()))
	fmt.Println("8 concurrent runs equal to a serial one:", !slices.Contains(same, false))
	// Output:
	// instances: 2
	// backend processes: 2
	// 8 concurrent runs equal to a serial one: true
}

// The CPU backend inside this process: no process to start, no copies of
// the tensors, the lowest latency; but a crash in a kernel is this
// program's, and a cancelled Run returns only when its current node is done
// (see Options.InProcess).
func ExampleOptions_inProcess() {
	ctx := context.Background()
	s, err := session.Open(ctx, model, session.Options{InProcess: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	b := s.Backends()[0]
	fmt.Println("backend", b.Name, "in this process:", b.Pid == os.Getpid())
	out, err := s.Run(ctx, map[string]*tensor.Dense{"x": input(4, 0)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("y[0, 0, :3] = %.4f\n", out["y"].Data().([]float32)[:3])
	// Output:
	// backend cpu in this process: true
	// y[0, 0, :3] = [-0.1128 0.0330 -0.2186]
}

// List the backends attnrun can use: the built-in CPU backend first, then
// each attnrun-backend-* plugin of the plugin directory (Options.PluginDir,
// default $ATTNRUN_PLUGIN_DIR), each started, asked for its Info, stopped.
func ExampleListBackends() {
	list, err := session.ListBackends(context.Background(), session.Options{})
	if err != nil {
		log.Fatal(err)
	}
	cpu := list[0]
	fmt.Println(cpu.Name, "available:", cpu.Available)
	var softmax []string
	for _, op := range cpu.Ops {
		if op.OpType == "Softmax" && op.Domain == "" {
			softmax = append(softmax, fmt.Sprintf("opsets %d-%d", op.Since, op.Until))
		}
	}
	fmt.Println("Softmax:", softmax)
	// Output:
	// cpu available: true
	// Softmax: [opsets 1-10 opsets 11-12 opsets 13-27]
}
