//go:build ignore

// gen_malformed writes the malformed-model corpus into testdata/malformed/.
// Run from the onnx/testdata directory:
//
//	go run gen_malformed.go
//
// The first group of files must be rejected by the decoder (package onnx);
// the second group decodes but must be rejected by the runtime (graph
// validation, op registry, shape inference). Every small model has float32
// graph inputs with concrete shapes, so a CLI can run it with random inputs.
// The output is deterministic; commit it.
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"path/filepath"

	"github.com/attnrun/attnrun/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func ptr[T any](v T) *T { return &v }

func input(name string, dims ...int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: ptr(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: ptr(int32(onnxpb.TensorProto_FLOAT)), Shape: shape}}}}
}

// output declares a float32 output of unknown shape.
func output(name string) *onnxpb.ValueInfoProto {
	return &onnxpb.ValueInfoProto{Name: ptr(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: ptr(int32(onnxpb.TensorProto_FLOAT))}}}}
}

func node(name, op string, in, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{Name: ptr(name), OpType: ptr(op), Input: in, Output: out, Attribute: attrs}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: ptr(name), Type: ptr(onnxpb.AttributeProto_INT), I: ptr(v)}
}

func intsAttr(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: ptr(name), Type: ptr(onnxpb.AttributeProto_INTS), Ints: v}
}

func floats(name string, dims []int64, n int) *onnxpb.TensorProto {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i) * 0.5
	}
	return &onnxpb.TensorProto{Name: ptr(name), DataType: ptr(int32(onnxpb.TensorProto_FLOAT)), Dims: dims, FloatData: vals}
}

// model wraps a graph with ir_version 8 and a default-domain opset 17 (or
// the given opsets).
func model(g *onnxpb.GraphProto, opsets ...*onnxpb.OperatorSetIdProto) *onnxpb.ModelProto {
	if len(opsets) == 0 {
		opsets = []*onnxpb.OperatorSetIdProto{{Domain: ptr(""), Version: ptr(int64(17))}}
	}
	return &onnxpb.ModelProto{IrVersion: ptr(int64(8)), ProducerName: ptr("attnrun gen_malformed"), OpsetImport: opsets, Graph: g}
}

// relu is the one-node model most malformed cases start from:
// y = Relu(x), x float32[2, 3].
func relu() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{
		Name:   ptr("relu"),
		Input:  []*onnxpb.ValueInfoProto{input("x", 2, 3)},
		Output: []*onnxpb.ValueInfoProto{output("y")},
		Node:   []*onnxpb.NodeProto{node("relu", "Relu", []string{"x"}, []string{"y"})},
	})
}

// withInit adds a float32 initializer w (its tensor built by the caller)
// consumed by y = Add(x, w).
func withInit(w *onnxpb.TensorProto) *onnxpb.ModelProto {
	w.Name = ptr("w")
	return model(&onnxpb.GraphProto{
		Name:        ptr("add_w"),
		Input:       []*onnxpb.ValueInfoProto{input("x", 2, 3)},
		Output:      []*onnxpb.ValueInfoProto{output("y")},
		Initializer: []*onnxpb.TensorProto{w},
		Node:        []*onnxpb.NodeProto{node("add", "Add", []string{"x", "w"}, []string{"y"})},
	})
}

func main() {
	models := flag.String("models", "../../models", "directory of the exported reference models (for truncated.onnx)")
	out := flag.String("out", "malformed", "output directory")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(*out, name), data, 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-26s %7d bytes\n", name, len(data))
	}
	writeModel := func(name string, m *onnxpb.ModelProto) {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		write(name, b)
	}

	// ---- Rejected by the decoder. ----
	write("empty.onnx", nil)

	real, err := os.ReadFile(filepath.Join(*models, "s002_self_attention_v1", "model.onnx"))
	if err != nil {
		log.Fatal(err)
	}
	write("truncated.onnx", real[:len(real)/2])

	rnd := rand.New(rand.NewSource(1))
	garbage := make([]byte, 4096)
	rnd.Read(garbage)
	write("random.onnx", garbage)

	write("text.onnx", []byte("This is not an ONNX model. It is a short English text that someone\n"+
		"saved with the wrong extension, to check that the loader says so clearly\n"+
		"instead of crashing or printing protobuf internals.\n"))

	// 2^20 x 2^20 float32 = 4 TiB, declared with dims but no data.
	writeModel("huge_initializer.onnx", withInit(&onnxpb.TensorProto{
		DataType: ptr(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{1 << 20, 1 << 20}}))

	// dims [2, 3] need 24 bytes; raw_data has 12.
	writeModel("short_raw_data.onnx", withInit(&onnxpb.TensorProto{
		DataType: ptr(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{2, 3}, RawData: make([]byte, 12)}))

	// initializer dims [2, -3].
	writeModel("negative_dim.onnx", withInit(&onnxpb.TensorProto{
		DataType: ptr(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{2, -3}, RawData: make([]byte, 24)}))

	// graph input x declared float32[2, -3].
	neg := relu()
	neg.Graph.Input = []*onnxpb.ValueInfoProto{input("x", 2, -3)}
	writeModel("negative_input_dim.onnx", neg)

	writeModel("external_escape.onnx", withInit(&onnxpb.TensorProto{
		DataType: ptr(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{2, 3},
		DataLocation: ptr(onnxpb.TensorProto_EXTERNAL),
		ExternalData: []*onnxpb.StringStringEntryProto{
			{Key: ptr("location"), Value: ptr("../../etc/passwd")},
			{Key: ptr("offset"), Value: ptr("0")},
			{Key: ptr("length"), Value: ptr("24")},
		}}))

	// ---- Decoded fine, rejected by the runtime. ----

	// a = Add(x, c); c = Relu(a): a cycle through two nodes.
	writeModel("cycle.onnx", model(&onnxpb.GraphProto{
		Name:   ptr("cycle"),
		Input:  []*onnxpb.ValueInfoProto{input("x", 2, 3)},
		Output: []*onnxpb.ValueInfoProto{output("a")},
		Node: []*onnxpb.NodeProto{
			node("add_cycle", "Add", []string{"x", "c"}, []string{"a"}),
			node("relu_cycle", "Relu", []string{"a"}, []string{"c"}),
		},
	}))

	writeModel("undefined_input.onnx", model(&onnxpb.GraphProto{
		Name:   ptr("undefined_input"),
		Input:  []*onnxpb.ValueInfoProto{input("x", 2, 3)},
		Output: []*onnxpb.ValueInfoProto{output("y")},
		Node:   []*onnxpb.NodeProto{node("add_missing", "Add", []string{"x", "missing"}, []string{"y"})},
	}))

	unk := relu()
	unk.Graph.Node[0] = node("foo", "FooBar", []string{"x"}, []string{"y"})
	writeModel("unknown_op.onnx", unk)

	dom := relu()
	dom.Graph.Node[0] = node("custom", "CustomRelu", []string{"x"}, []string{"y"})
	dom.Graph.Node[0].Domain = ptr("com.example")
	dom.OpsetImport = append(dom.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: ptr("com.example"), Version: ptr(int64(1))})
	writeModel("unknown_domain.onnx", dom)

	writeModel("duplicate_output.onnx", model(&onnxpb.GraphProto{
		Name:   ptr("duplicate_output"),
		Input:  []*onnxpb.ValueInfoProto{input("x", 2, 3)},
		Output: []*onnxpb.ValueInfoProto{output("y")},
		Node: []*onnxpb.NodeProto{
			node("relu_first", "Relu", []string{"x"}, []string{"y"}),
			node("neg_second", "Neg", []string{"x"}, []string{"y"}),
		},
	}))

	unp := relu()
	unp.Graph.Output = append(unp.Graph.Output, output("z"))
	writeModel("unproduced_output.onnx", unp)

	writeModel("matmul_mismatch.onnx", model(&onnxpb.GraphProto{
		Name:   ptr("matmul_mismatch"),
		Input:  []*onnxpb.ValueInfoProto{input("a", 2, 3), input("b", 4, 5)},
		Output: []*onnxpb.ValueInfoProto{output("y")},
		Node:   []*onnxpb.NodeProto{node("matmul", "MatMul", []string{"a", "b"}, []string{"y"})},
	}))

	writeModel("bad_perm.onnx", model(&onnxpb.GraphProto{
		Name:   ptr("bad_perm"),
		Input:  []*onnxpb.ValueInfoProto{input("x", 2, 3, 4)},
		Output: []*onnxpb.ValueInfoProto{output("y")},
		Node:   []*onnxpb.NodeProto{node("transpose", "Transpose", []string{"x"}, []string{"y"}, intsAttr("perm", 0, 0, 1))},
	}))

	writeModel("softmax_axis.onnx", model(&onnxpb.GraphProto{
		Name:   ptr("softmax_axis"),
		Input:  []*onnxpb.ValueInfoProto{input("x", 2, 3, 4)},
		Output: []*onnxpb.ValueInfoProto{output("y")},
		Node:   []*onnxpb.NodeProto{node("softmax", "Softmax", []string{"x"}, []string{"y"}, intAttr("axis", 5))},
	}))

	writeModel("reshape_count.onnx", model(&onnxpb.GraphProto{
		Name:   ptr("reshape_count"),
		Input:  []*onnxpb.ValueInfoProto{input("x", 2, 3)},
		Output: []*onnxpb.ValueInfoProto{output("y")},
		Initializer: []*onnxpb.TensorProto{{Name: ptr("shape"), DataType: ptr(int32(onnxpb.TensorProto_INT64)),
			Dims: []int64{2}, Int64Data: []int64{4, 2}}},
		Node: []*onnxpb.NodeProto{node("reshape", "Reshape", []string{"x", "shape"}, []string{"y"})},
	}))

	o99 := relu()
	o99.OpsetImport = []*onnxpb.OperatorSetIdProto{{Domain: ptr(""), Version: ptr(int64(99))}}
	writeModel("opset99.onnx", o99)

	// A valid baseline with an initializer, for CLI tests that want one
	// model of this corpus to succeed: y = Add(x, w), w = 0, 0.5, ..., 2.5.
	writeModel("valid_add.onnx", withInit(floats("w", []int64{2, 3}, 6)))
}
