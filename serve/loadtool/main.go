// Command loadtool prepares requests for the load and fault scripts
// (scripts/serve-load.sh, scripts/serve-fault.sh) and summarizes ghz's
// per-request output.
//
//	loadtool request --model M.onnx --name NAME [--dim seq=128 ...] --grpc req.bin --http req.body --json req.json
//	    writes one inference request with random inputs: a serialized
//	    ModelInferRequest (raw_input_contents) for `ghz --binary-file`, an
//	    HTTP body in the binary tensor data extension (its JSON length in
//	    req.body.len, for the Inference-Header-Content-Length header), and a
//	    JSON body.
//	loadtool ghz-report [--kill UNIXNANO] [--window 250ms] ghz.json
//	    reads `ghz --format json` output (with its per-request details) and
//	    prints outcomes by status and error, latency percentiles, and, with
//	    --kill, the throughput before and after that moment and how long it
//	    took to get back to normal.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/v2pb"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadtool request|ghz-report ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "request":
		err = request(os.Args[2:])
	case "ghz-report":
		err = ghzReport(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (request or ghz-report)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtool:", err)
		os.Exit(1)
	}
}

type dimFlags map[string]int

func (d dimFlags) String() string { return fmt.Sprint(map[string]int(d)) }
func (d dimFlags) Set(s string) error {
	name, v, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n < 0 {
		return fmt.Errorf("want NAME=SIZE, got %q", s)
	}
	d[name] = n
	return nil
}

func request(args []string) error {
	fs := flag.NewFlagSet("request", flag.ContinueOnError)
	model := fs.String("model", "", "the ONNX model")
	name := fs.String("name", "", "the model's name on the server")
	grpcOut := fs.String("grpc", "", "write a serialized ModelInferRequest here")
	httpOut := fs.String("http", "", "write a binary-extension HTTP body here (and its JSON length to FILE.len)")
	jsonOut := fs.String("json", "", "write a JSON HTTP body here")
	seed := fs.Uint64("seed", 1, "random seed")
	dims := dimFlags{}
	fs.Var(dims, "dim", "bind a symbolic dim, NAME=SIZE (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *name == "" {
		return fmt.Errorf("request needs --model and --name")
	}
	m, err := onnx.Load(*model, onnx.Options{})
	if err != nil {
		return err
	}
	var inputs []oip.NamedTensor
	for k, vi := range m.Graph.Inputs {
		if !vi.Type.RankKnown {
			return fmt.Errorf("input %q has no declared rank", vi.Name)
		}
		shape := make([]int, len(vi.Type.Shape))
		for i, d := range vi.Type.Shape {
			switch {
			case d.Known():
				shape[i] = int(d.Value)
			case d.Param != "" && dims[d.Param] > 0:
				shape[i] = dims[d.Param]
			default:
				return fmt.Errorf("input %q dim %d (%v) is not bound: give --dim %s=N", vi.Name, i, d, d.Param)
			}
		}
		t, err := ir.RandomTensor(vi.Type.DType, shape, *seed+uint64(k))
		if err != nil {
			return fmt.Errorf("input %q: %w", vi.Name, err)
		}
		inputs = append(inputs, oip.NamedTensor{Name: vi.Name, Tensor: t})
	}
	if *grpcOut != "" {
		req := &v2pb.ModelInferRequest{ModelName: *name}
		for _, in := range inputs {
			req.Inputs = append(req.Inputs, &v2pb.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: oip.Datatype(in.Tensor.DType), Shape: dims64(in.Tensor.Shape)})
			req.RawInputContents = append(req.RawInputContents, oip.RawBytes(in.Tensor))
		}
		b, err := proto.Marshal(req)
		if err != nil {
			return err
		}
		if err := os.WriteFile(*grpcOut, b, 0o644); err != nil {
			return err
		}
	}
	if *httpOut != "" || *jsonOut != "" {
		type input struct {
			Name       string          `json:"name"`
			Shape      []int64         `json:"shape"`
			Datatype   string          `json:"datatype"`
			Parameters map[string]int  `json:"parameters,omitempty"`
			Data       json.RawMessage `json:"data,omitempty"`
		}
		var bin, js []input
		var raw []byte
		for _, in := range inputs {
			b := oip.RawBytes(in.Tensor)
			raw = append(raw, b...)
			bin = append(bin, input{in.Name, dims64(in.Tensor.Shape), oip.Datatype(in.Tensor.DType), map[string]int{"binary_data_size": len(b)}, nil})
			js = append(js, input{in.Name, dims64(in.Tensor.Shape), oip.Datatype(in.Tensor.DType), nil, oip.AppendJSONData(nil, in.Tensor)})
		}
		if *httpOut != "" {
			head, _ := json.Marshal(map[string]any{"inputs": bin, "parameters": map[string]bool{"binary_data_output": true}})
			if err := os.WriteFile(*httpOut, append(head, raw...), 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(*httpOut+".len", []byte(strconv.Itoa(len(head))), 0o644); err != nil {
				return err
			}
		}
		if *jsonOut != "" {
			body, _ := json.Marshal(map[string]any{"inputs": js})
			if err := os.WriteFile(*jsonOut, body, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func dims64(shape []int) []int64 {
	out := make([]int64, len(shape))
	for i, d := range shape {
		out[i] = int64(d)
	}
	return out
}
