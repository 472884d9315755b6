package onnx

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// The corpus is written by testdata/gen_malformed.go (go run it from
// onnx/testdata). Files in the first table must be rejected by the decoder;
// files in the second must decode, and are rejected later by the runtime.

var decoderRejects = []struct {
	file    string
	notONNX bool
	want    string // substring of the error
}{
	{"empty.onnx", true, "empty.onnx: not an ONNX model: empty file"},
	{"truncated.onnx", true, "truncated.onnx: not an ONNX model: the file is truncated ("},
	// protobuf-go puts a space or, in some builds, a no-break space after
	// "proto:" (on purpose, so that nobody matches its messages): match
	// up to the colon.
	{"random.onnx", true, "random.onnx: not an ONNX model: proto:"},
	{"text.onnx", true, "text.onnx: not an ONNX model: "},
	{"huge_initializer.onnx", false, `initializer "w": dims [1048576 1048576] of float32 need 4398046511104 bytes, more than the limit of 4294967296 bytes (Options.MaxTensorBytes)`},
	{"short_raw_data.onnx", false, `initializer "w": dims [2 3] of float32 need 24 bytes, raw_data has 12`},
	{"negative_dim.onnx", false, `initializer "w": dims [2 -3]: dim 1 is negative`},
	{"negative_input_dim.onnx", false, `graph input "x": dim 1 is negative (-3)`},
	{"external_escape.onnx", false, `initializer "w": external data location "../../etc/passwd" escapes the model's directory`},
}

func TestMalformedDecoderRejects(t *testing.T) {
	for _, tc := range decoderRejects {
		t.Run(tc.file, func(t *testing.T) {
			m, err := Load(filepath.Join("testdata", "malformed", tc.file), Options{})
			if err == nil {
				t.Fatalf("decoded: %+v", m)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q\nwant it to contain %q", msg, tc.want)
			}
			if errors.Is(err, ErrNotONNX) != tc.notONNX {
				t.Errorf("errors.Is(err, ErrNotONNX) = %v, want %v", !tc.notONNX, tc.notONNX)
			}
			if strings.Contains(msg, "\n") || len(msg) > 300 {
				t.Errorf("error is not one short line: %q", msg)
			}
		})
	}
}

func concreteFloatInputs(t *testing.T, g *ir.Graph) {
	t.Helper()
	if len(g.Inputs) == 0 {
		t.Error("no graph inputs")
	}
	for _, in := range g.Inputs {
		if _, ok := in.Type.Shape.Concrete(); !ok || !in.Type.RankKnown || in.Type.DType != ir.Float {
			t.Errorf("input %q is %v, want float32 with a concrete shape", in.Name, in.Type)
		}
	}
}

var runtimeRejects = []struct {
	file string
	// validate is a substring of g.Validate()'s error, or "" when the
	// structure is fine and a later stage (op registry, shape inference)
	// must reject the model.
	validate string
	check    func(t *testing.T, m *ir.Model)
}{
	{"cycle.onnx", `node "add_cycle" (Add): graph has a cycle`, nil},
	{"undefined_input.onnx", `node "add_missing" (Add): input "missing" is not a graph input, an initializer, or any node's output`, nil},
	{"duplicate_output.onnx", `node "neg_second" (Neg): output "y" is already produced by node "relu_first" (Relu)`, nil},
	// There is no node to name: the error names the graph output.
	{"unproduced_output.onnx", `graph output "z" is produced by no node`, nil},
	{"unknown_op.onnx", "", func(t *testing.T, m *ir.Model) {
		if n := m.Graph.Nodes[0]; n.OpType != "FooBar" || n.Domain != "" {
			t.Errorf("node %v", n.QualifiedOp())
		}
	}},
	{"unknown_domain.onnx", "", func(t *testing.T, m *ir.Model) {
		if n := m.Graph.Nodes[0]; n.QualifiedOp() != "com.example:CustomRelu" {
			t.Errorf("node %v", n.QualifiedOp())
		}
		if v, ok := m.OpsetFor("com.example"); !ok || v != 1 {
			t.Errorf("opset com.example = %d, %v", v, ok)
		}
	}},
	{"matmul_mismatch.onnx", "", func(t *testing.T, m *ir.Model) {
		a, _ := m.Graph.Inputs[0].Type.Shape.Concrete()
		b, _ := m.Graph.Inputs[1].Type.Shape.Concrete()
		if !reflect.DeepEqual(a, []int{2, 3}) || !reflect.DeepEqual(b, []int{4, 5}) || m.Graph.Nodes[0].OpType != "MatMul" {
			t.Errorf("shapes %v %v", a, b)
		}
	}},
	{"bad_perm.onnx", "", func(t *testing.T, m *ir.Model) {
		perm, ok, err := m.Graph.Nodes[0].AttrInts("perm")
		if !ok || err != nil || !reflect.DeepEqual(perm, []int64{0, 0, 1}) {
			t.Errorf("perm %v %v %v", perm, ok, err)
		}
	}},
	{"softmax_axis.onnx", "", func(t *testing.T, m *ir.Model) {
		axis, err := m.Graph.Nodes[0].AttrInt("axis", -1)
		if err != nil || axis != 5 || len(m.Graph.Inputs[0].Type.Shape) != 3 {
			t.Errorf("axis %d %v", axis, err)
		}
	}},
	{"reshape_count.onnx", "", func(t *testing.T, m *ir.Model) {
		s := m.Graph.Initializers["shape"]
		if s == nil || !reflect.DeepEqual(s.Int64s(), []int64{4, 2}) {
			t.Errorf("shape initializer %v", s)
		}
	}},
	{"opset99.onnx", "", func(t *testing.T, m *ir.Model) {
		if v, _ := m.OpsetFor(""); v != 99 {
			t.Errorf("opset %d", v)
		}
	}},
	{"valid_add.onnx", "", func(t *testing.T, m *ir.Model) {
		w := m.Graph.Initializers["w"]
		if w == nil || !reflect.DeepEqual(w.Float32s(), []float32{0, 0.5, 1, 1.5, 2, 2.5}) {
			t.Errorf("w = %v", w)
		}
	}},
}

func TestMalformedDecodesForRuntime(t *testing.T) {
	for _, tc := range runtimeRejects {
		t.Run(tc.file, func(t *testing.T) {
			m, err := Load(filepath.Join("testdata", "malformed", tc.file), Options{})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			concreteFloatInputs(t, m.Graph)
			err = m.Graph.Validate()
			switch {
			case tc.validate == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.validate != "" && err == nil:
				t.Errorf("Validate accepted the graph, want %q", tc.validate)
			case tc.validate != "" && !strings.Contains(err.Error(), tc.validate):
				t.Errorf("Validate: %q\nwant it to contain %q", err, tc.validate)
			}
			if tc.file == "cycle.onnx" && !errors.Is(err, ir.ErrCycle) {
				t.Errorf("cycle error %v is not ir.ErrCycle", err)
			}
			if tc.check != nil {
				tc.check(t, m)
			}
			roundTrip(t, m)
		})
	}
}

// TestMalformedCorpusComplete makes sure every file in the corpus is covered
// by one of the tables above, and every table entry exists.
func TestMalformedCorpusComplete(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "malformed", "*.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	var have, want []string
	for _, f := range files {
		have = append(have, filepath.Base(f))
	}
	for _, tc := range decoderRejects {
		want = append(want, tc.file)
	}
	for _, tc := range runtimeRejects {
		want = append(want, tc.file)
	}
	sort.Strings(have)
	sort.Strings(want)
	if !reflect.DeepEqual(have, want) {
		t.Errorf("corpus files %v\ntested files %v", have, want)
	}
	// truncated.onnx is half of a real model, which decodes whole.
	real, err := os.ReadFile(filepath.Join("..", "models", "s002_self_attention_v1", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	half, err := os.ReadFile(filepath.Join("testdata", "malformed", "truncated.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if len(half) != len(real)/2 || string(real[:len(half)]) != string(half) {
		t.Error("truncated.onnx is not the first half of models/s002_self_attention_v1/model.onnx (regenerate the corpus)")
	}
	if _, err := Decode(real, Options{}); err != nil {
		t.Errorf("the whole model: %v", err)
	}
}
