package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/npy"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// runJSON is what `attnrun run --json` prints, with the data left raw.
type runJSON struct {
	Model   string `json:"model"`
	Outputs []struct {
		Name  string            `json:"name"`
		DType string            `json:"dtype"`
		Shape []int             `json:"shape"`
		Data  []json.RawMessage `json:"data"`
	} `json:"outputs"`
}

func parseRunJSON(t *testing.T, stdout string) runJSON {
	t.Helper()
	var r runJSON
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("stdout is not the run JSON: %v\n%.300s", err, stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%.300s", stdout)
	}
	return r
}

// jsonFloat reads one element of a float output: a number, or "NaN",
// "Infinity", "-Infinity".
func jsonFloat(t *testing.T, raw json.RawMessage, bits int) float64 {
	t.Helper()
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "NaN":
			return math.NaN()
		case "Infinity":
			return math.Inf(1)
		case "-Infinity":
			return math.Inf(-1)
		}
		t.Fatalf("float element %s", raw)
	}
	v, err := strconv.ParseFloat(string(raw), bits)
	if err != nil {
		t.Fatalf("float element %s: %v", raw, err)
	}
	return v
}

// TestRunJSON: `run --json` prints every output of every bundled model in
// full, bit for bit what --out writes in the same run, and within 1e-4 of
// PyTorch's.
func TestRunJSON(t *testing.T) {
	forEachModel(t, func(t *testing.T, m *ir.Model, ds string, args []string) {
		modelPath := args[1]
		args = append(args, "--json")
		out := t.TempDir()
		r := attnrun(t, append(args, "--out", out)...)
		r.wantOK(t)
		got := parseRunJSON(t, r.stdout)
		if got.Model != modelPath || len(got.Outputs) != len(m.Graph.Outputs) {
			t.Fatalf("model %q, %d outputs; want %q, %d", got.Model, len(got.Outputs), modelPath, len(m.Graph.Outputs))
		}
		for k, vi := range m.Graph.Outputs {
			o := got.Outputs[k]
			file := readNpy(t, filepath.Join(out, outputFileName(vi.Name)))
			if o.Name != vi.Name || o.DType != "float32" || !slices.Equal(o.Shape, file.Shape) || len(o.Data) != file.Len() {
				t.Fatalf("output %d: %s %s %v with %d values; the .npy is [%s]", k, o.Name, o.DType, o.Shape, len(o.Data), ir.ShapeString(file.Shape))
			}
			data := make([]float32, len(o.Data))
			for i, raw := range o.Data {
				data[i] = float32(jsonFloat(t, raw, 32))
				if math.Float32bits(data[i]) != math.Float32bits(file.Float32s()[i]) {
					t.Fatalf("%s element %d: JSON %s, .npy %v", vi.Name, i, raw, file.Float32s()[i])
				}
			}
			_, want := readPb(t, filepath.Join(ds, fmt.Sprintf("output_%d.pb", k)))
			assertClose(t, vi.Name, ir.FromSlice(o.Shape, data), want, 1e-4)
		}
		// The report goes to stderr: the files written, then the time.
		if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); !strings.HasPrefix(lines[len(lines)-2], "  wrote ") || !ranLine.MatchString(lines[len(lines)-1]+"\n") {
			t.Errorf("stderr %q", r.stderr)
		}
	})
}

// TestRunJSONValues: NaN, infinities and -0, bool and int64 outputs,
// several outputs in graph order.
func TestRunJSONValues(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "values.onnx")
	node := func(op string, in, out string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{Name: proto.String(out), OpType: proto.String(op), Input: []string{in}, Output: []string{out}}
	}
	writeGraph(t, model, &onnxpb.GraphProto{
		Name:  proto.String("values"),
		Input: []*onnxpb.ValueInfoProto{floatVI("x", 4)},
		Node:  []*onnxpb.NodeProto{node("Sqrt", "x", "sqrt"), node("Reciprocal", "x", "recip"), node("IsNaN", "sqrt", "isnan"), node("Shape", "x", "shape")},
		Output: []*onnxpb.ValueInfoProto{floatVI("recip", 4), floatVI("sqrt", 4),
			typedVI("isnan", onnxpb.TensorProto_BOOL, 4), typedVI("shape", onnxpb.TensorProto_INT64, 1)},
	})
	x := filepath.Join(dir, "x.npy")
	writeNpy(t, x, ir.FromSlice([]int{4}, []float32{0, -1, 4, float32(math.Copysign(0, -1))}))
	r := attnrun(t, "run", model, "-i", "x="+x, "--json")
	r.wantOK(t)
	want := `{"model":"` + model + `","outputs":[` +
		`{"name":"recip","dtype":"float32","shape":[4],"data":["Infinity",-1,0.25,"-Infinity"]},` +
		`{"name":"sqrt","dtype":"float32","shape":[4],"data":[0,"NaN",2,-0]},` +
		`{"name":"isnan","dtype":"bool","shape":[4],"data":[false,true,false,false]},` +
		`{"name":"shape","dtype":"int64","shape":[1],"data":[4]}]}` + "\n"
	if r.stdout != want {
		t.Errorf("stdout\n%s\nwant\n%s", r.stdout, want)
	}
	if !json.Valid([]byte(r.stdout)) {
		t.Error("stdout is not valid JSON")
	}
}

// TestRunPrintLimit: run prints 8 values of each output by default,
// --print-limit N of them, and 0 prints them all.
func TestRunPrintLimit(t *testing.T) {
	model := filepath.Join(modelsDir, "s002_self_attention_v1", "model.onnx")
	values := func(stdout string) (n int, more bool) {
		_, list, ok := strings.Cut(strings.TrimSuffix(stdout, "]\n"), "] [")
		if !ok {
			t.Fatalf("stdout %q", stdout)
		}
		fields := strings.Fields(list)
		if len(fields) > 0 && fields[len(fields)-1] == "…" {
			return len(fields) - 1, true
		}
		return len(fields), false
	}
	for _, c := range []struct {
		flag []string
		n    int
		more bool
	}{{nil, 8, true}, {[]string{"--print-limit", "3"}, 3, true}, {[]string{"--print-limit", "0"}, 3 * 5 * 32, false}, {[]string{"--print-limit", "1000"}, 3 * 5 * 32, false}} {
		r := attnrun(t, append([]string{"run", model, "-i", "x=random:3x5x32"}, c.flag...)...)
		r.wantOK(t)
		if n, more := values(r.stdout); n != c.n || more != c.more {
			t.Errorf("%v: %d values (… %v), want %d (… %v)", c.flag, n, more, c.n, c.more)
		}
	}
	timed(t, cmdWall, "run", model, "-i", "x=random:1x5x32", "--print-limit", "-1").wantError(t, 2, cmdWall, "--print-limit must be ≥ 0 (0 prints every value)")
}

// TestRunOutStdout: --out - writes the only output's .npy to stdout and the
// text to stderr; it is a usage error for two outputs, with --json, and
// when stdout is a terminal.
func TestRunOutStdout(t *testing.T) {
	model := filepath.Join(modelsDir, "s002_self_attention_v1", "model.onnx")
	dir := t.TempDir()
	r := attnrun(t, "run", model, "-i", "x=random:2x3x32", "--out", "-")
	r.wantOK(t)
	got, err := npy.Read(bytes.NewReader([]byte(r.stdout)), int64(len(r.stdout)))
	if err != nil {
		t.Fatalf("stdout is not a .npy: %v", err)
	}
	r2 := attnrun(t, "run", model, "-i", "x=random:2x3x32", "--out", dir)
	r2.wantOK(t)
	assertClose(t, "y", got, readNpy(t, filepath.Join(dir, "y.npy")), 0)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "y: float32 [2x3x32] [") || !ranLine.MatchString(lines[1]+"\n") {
		t.Errorf("stderr %q", r.stderr)
	}
	if _, err := os.Stat("-"); err == nil {
		t.Error("a file or directory named - was created")
	}

	two := filepath.Join(dir, "two.onnx")
	writeModel(t, two, []int64{2, 3}, map[string]string{"relu": "Relu", "neg": "Neg"})
	timed(t, cmdWall, "run", two, "-i", "x=random", "--out", "-").wantError(t, 2, cmdWall, "--out - writes one .npy to stdout, and the model has 2 outputs (neg, relu): give --out a directory")
	timed(t, cmdWall, "run", model, "-i", "x=random:1x3x32", "--out", "-", "--json").wantError(t, 2, cmdWall, "--out - and --json both write to stdout")

	code, stdout, stderr := attnrunStdoutOnTerminal(t, "run", model, "-i", "x=random:1x3x32", "--out", "-")
	if code != 2 || stdout != "" || stderr != "attnrun: --out - writes a binary .npy to stdout, which is a terminal: redirect it (… --out - > y.npy)\n" {
		t.Errorf("stdout a terminal: exit %d, terminal %q, stderr %q", code, stdout, stderr)
	}
}

// TestRunOnes: NAME=ones[:DIMS] gives every element 1 (true for bool),
// with the declared shape when DIMS is left out.
func TestRunOnes(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "ones.onnx")
	node := func(in, out string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{Name: proto.String(out), OpType: proto.String("Identity"), Input: []string{in}, Output: []string{out}}
	}
	writeGraph(t, model, &onnxpb.GraphProto{
		Name: proto.String("ones"),
		Input: []*onnxpb.ValueInfoProto{floatVI("x", 3), typedVI("m", onnxpb.TensorProto_INT64, 2),
			typedVI("b", onnxpb.TensorProto_BOOL, 2), typedVI("h", onnxpb.TensorProto_FLOAT16, 2)},
		Node: []*onnxpb.NodeProto{node("x", "y"), node("m", "n"), node("b", "c"), node("h", "g")},
		Output: []*onnxpb.ValueInfoProto{floatVI("y", 3), typedVI("n", onnxpb.TensorProto_INT64, 2),
			typedVI("c", onnxpb.TensorProto_BOOL, 2), typedVI("g", onnxpb.TensorProto_FLOAT16, 2)},
	})
	r := attnrun(t, "run", model, "-i", "x=ones", "-i", "m=ones:2", "-i", "b=ones", "-i", "h=ones", "--json")
	r.wantOK(t)
	want := `{"model":"` + model + `","outputs":[` +
		`{"name":"y","dtype":"float32","shape":[3],"data":[1,1,1]},` +
		`{"name":"n","dtype":"int64","shape":[2],"data":[1,1]},` +
		`{"name":"c","dtype":"bool","shape":[2],"data":[true,true]},` +
		`{"name":"g","dtype":"float16","shape":[2],"data":[1,1]}]}` + "\n"
	if r.stdout != want {
		t.Errorf("stdout\n%s\nwant\n%s", r.stdout, want)
	}
	// The shape is checked against the declared one like any input's.
	attnrun(t, "run", model, "-i", "x=ones:4", "-i", "m=ones", "-i", "b=ones", "-i", "h=ones").wantError(t, 1, cmdWall, `input "x" has shape [4], the model expects [3]`)
}

// TestRunBindsDimsFromInputs: a bare random or ones input takes the
// symbolic dims that the other inputs' given shapes bind, in any order;
// --dim still wins.
func TestRunBindsDimsFromInputs(t *testing.T) {
	causal := filepath.Join(modelsDir, "s000_causal", "model.onnx") // x: float32[batch, seq, 32], mask: bool[batch, seq]
	r := attnrun(t, "run", causal, "-i", "mask=random", "-i", "x=random:2x5x32", "--json")
	r.wantOK(t)
	if got := parseRunJSON(t, r.stdout); len(got.Outputs) != 1 || !slices.Equal(got.Outputs[0].Shape, []int{2, 5, 32}) {
		t.Fatalf("outputs %+v, want one of shape [2 5 32]", got.Outputs)
	}
	// --dim binds first: the mask then disagrees with x, which
	// --strict-dims refuses.
	attnrun(t, "run", causal, "-i", "mask=random", "-i", "x=random:2x5x32", "--dim", "seq=4", "--strict-dims").wantError(t, 1, cmdWall, `input "mask" dim 1 (seq) is 4, but x dim 1 set seq=5`)
}
