package onnx

import (
	"reflect"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fullModel is an IR model using every feature Decode keeps: metadata,
// several opsets, symbolic and unknown dims, value_info, docs, node domains,
// every attribute kind including subgraphs with their own initializers.
func fullModel(t *testing.T) *ir.Model {
	t.Helper()
	f32 := func(v ...float32) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }
	fp16 := &ir.Tensor{DType: ir.Float16, Shape: []int{2}, Data: []uint16{0x3c00, 0xc000}}
	sparse := mustMarshal(t, &onnxpb.SparseTensorProto{Dims: []int64{4},
		Values:  &onnxpb.TensorProto{DataType: ptr32(1), Dims: []int64{1}, FloatData: []float32{3}},
		Indices: &onnxpb.TensorProto{DataType: ptr32(7), Dims: []int64{1}, Int64Data: []int64{2}}})
	typeProto := mustMarshal(t, &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: ptr32(1)}}})
	body := &ir.Graph{
		Name:             "body",
		Nodes:            []*ir.Node{{OpType: "Identity", Inputs: []string{"b_in"}, Outputs: []string{"b_out"}}},
		Inputs:           []*ir.ValueInfo{{Name: "b_in", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{}}}},
		Outputs:          []*ir.ValueInfo{{Name: "b_out", Type: ir.TypeInfo{DType: ir.Float}}},
		Initializers:     map[string]*ir.Tensor{"b_w": ir.Scalar[int64](3)},
		InitializerOrder: []string{"b_w"},
	}
	attrs := []*ir.Attribute{
		{Name: "f", Type: ir.AttrFloat, Float: -0.25},
		{Name: "i", Type: ir.AttrInt, Int: -7},
		{Name: "s", Type: ir.AttrString, String: []byte("hi")},
		{Name: "t", Type: ir.AttrTensor, Tensor: fp16},
		{Name: "g", Type: ir.AttrGraph, Graph: body},
		{Name: "fs", Type: ir.AttrFloats, Floats: []float32{1, 2.5}},
		{Name: "is", Type: ir.AttrInts, Ints: []int64{0, -1, 1 << 40}},
		{Name: "ss", Type: ir.AttrStrings, Strings: [][]byte{[]byte("a"), {}}},
		{Name: "ts", Type: ir.AttrTensors, Tensors: []*ir.Tensor{f32(1, 2), ir.FromSlice([]int{1}, []string{"x"})}},
		{Name: "gs", Type: ir.AttrGraphs, Graphs: []*ir.Graph{body, body}},
		{Name: "sp", Type: ir.AttrSparse, Raw: [][]byte{sparse}},
		{Name: "sps", Type: ir.AttrSparses, Raw: [][]byte{sparse, sparse}},
		{Name: "tp", Type: ir.AttrTypeProto, Raw: [][]byte{typeProto}},
		{Name: "tps", Type: ir.AttrTypeProtos, Raw: [][]byte{typeProto}},
		{Name: "ref", Type: ir.AttrInt, RefAttrName: "outer"},
	}
	return &ir.Model{
		IRVersion: 8, ProducerName: "test", ProducerVersion: "1.0", Domain: "org.attnrun", ModelVersion: 3, DocString: "doc",
		Opsets:   map[string]int64{"": 17, "com.microsoft": 1},
		Metadata: map[string]string{"b": "2", "a": "1"},
		Graph: &ir.Graph{
			Name: "main",
			Nodes: []*ir.Node{
				{Name: "everything", OpType: "Custom", Domain: "com.microsoft", Inputs: []string{"x", "", "w"}, Outputs: []string{"y", ""}, Attrs: attrs, Doc: "node doc"},
				{OpType: "Relu", Inputs: []string{"y"}, Outputs: []string{"z"}},
			},
			Inputs: []*ir.ValueInfo{{Name: "x", Doc: "input doc", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true,
				Shape: ir.Shape{{Param: "batch"}, ir.UnknownDim, {Value: 0}, {Value: 64}}}}},
			Outputs:          []*ir.ValueInfo{{Name: "z", Type: ir.TypeInfo{DType: ir.Float}}, {Name: "untyped"}},
			ValueInfo:        []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float16, RankKnown: true, Shape: ir.Shape{}}}},
			Initializers:     map[string]*ir.Tensor{"w": f32(1, 2, 3), "a_mask": ir.FromSlice([]int{2}, []bool{true, false})},
			InitializerOrder: []string{"w", "a_mask"},
		},
	}
}

func TestEncodeDecodeEveryFeature(t *testing.T) {
	m := fullModel(t)
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Spot checks with expected values, then the full round trip.
	n := got.Graph.Nodes[0]
	if n.Name != "everything" || n.Domain != "com.microsoft" || n.Doc != "node doc" || !reflect.DeepEqual(n.Inputs, []string{"x", "", "w"}) || !reflect.DeepEqual(n.Outputs, []string{"y", ""}) {
		t.Errorf("node %+v", n)
	}
	if len(n.Attrs) != 15 {
		t.Fatalf("%d attributes", len(n.Attrs))
	}
	if v, _ := n.AttrFloat("f", 0); v != -0.25 {
		t.Errorf("f = %v", v)
	}
	if a := n.Attr("g"); a.Graph == nil || a.Graph.Name != "body" || a.Graph.Initializers["b_w"].Int64s()[0] != 3 {
		t.Errorf("g = %+v", a)
	}
	if a := n.Attr("t"); a.Tensor.DType != ir.Float16 || ir.Float16ToFloat32(a.Tensor.Data.([]uint16)[1]) != -2 {
		t.Errorf("t = %v", a.Tensor)
	}
	if a := n.Attr("ref"); a.RefAttrName != "outer" || a.Type != ir.AttrInt {
		t.Errorf("ref = %+v", a)
	}
	var sp onnxpb.SparseTensorProto
	if err := proto.Unmarshal(n.Attr("sps").Raw[1], &sp); err != nil || sp.Indices.Int64Data[0] != 2 {
		t.Errorf("sparse tensor: %v %v", &sp, err)
	}
	if s := got.Graph.Inputs[0].Type.Shape; s.String() != "[batch, ?, 0, 64]" {
		t.Errorf("input shape %v", s)
	}
	if got.Metadata["a"] != "1" || got.Opsets["com.microsoft"] != 1 || got.ModelVersion != 3 || got.Domain != "org.attnrun" {
		t.Errorf("header %+v", got)
	}
	if !reflect.DeepEqual(got.Graph.InitializerOrder, []string{"w", "a_mask"}) {
		t.Errorf("initializer order %v", got.Graph.InitializerOrder)
	}
	if !reflect.DeepEqual(got, m) {
		diffModels(t, m, got)
		t.Error("Decode(Encode(m)) != m")
	}
	roundTrip(t, got)
}

// TestDecodeProtoForms covers wire forms our encoder never writes.
func TestDecodeProtoForms(t *testing.T) {
	f := ptr32(1)
	vi := func(name string) *onnxpb.ValueInfoProto { return &onnxpb.ValueInfoProto{Name: proto.String(name)} }
	model := func(g *onnxpb.GraphProto, opsets ...*onnxpb.OperatorSetIdProto) []byte {
		return mustMarshal(t, &onnxpb.ModelProto{IrVersion: proto.Int64(3), OpsetImport: opsets, Graph: g})
	}
	w := &onnxpb.TensorProto{Name: proto.String("w"), DataType: f, Dims: []int64{1}, FloatData: []float32{2}}
	relu := &onnxpb.NodeProto{OpType: proto.String("Relu"), Domain: proto.String("ai.onnx"), Input: []string{"x"}, Output: []string{"y"}}

	t.Run("initializer listed as input", func(t *testing.T) {
		m, err := Decode(model(&onnxpb.GraphProto{Input: []*onnxpb.ValueInfoProto{vi("x"), vi("w")}, Initializer: []*onnxpb.TensorProto{w},
			Node: []*onnxpb.NodeProto{relu}, Output: []*onnxpb.ValueInfoProto{vi("y")}},
			&onnxpb.OperatorSetIdProto{Domain: proto.String("ai.onnx"), Version: proto.Int64(9)}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Graph.Inputs) != 1 || m.Graph.Inputs[0].Name != "x" {
			t.Errorf("inputs %v", m.Graph.Inputs)
		}
		if v, ok := m.Opsets[""]; !ok || v != 9 || len(m.Opsets) != 1 {
			t.Errorf("opsets %v (ai.onnx should become \"\")", m.Opsets)
		}
		if m.Graph.Nodes[0].Domain != "" {
			t.Errorf("node domain %q", m.Graph.Nodes[0].Domain)
		}
	})

	t.Run("attribute without type (IR v1)", func(t *testing.T) {
		n := &onnxpb.NodeProto{OpType: proto.String("Foo"), Output: []string{"y"}, Attribute: []*onnxpb.AttributeProto{
			{Name: proto.String("i"), I: proto.Int64(4)},
			{Name: proto.String("fs"), Floats: []float32{1}},
			{Name: proto.String("s"), S: []byte("v")},
		}}
		m, err := Decode(model(&onnxpb.GraphProto{Node: []*onnxpb.NodeProto{n}}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		types := []ir.AttrType{}
		for _, a := range m.Graph.Nodes[0].Attrs {
			types = append(types, a.Type)
		}
		if !reflect.DeepEqual(types, []ir.AttrType{ir.AttrInt, ir.AttrFloats, ir.AttrString}) || m.Graph.Nodes[0].Attrs[0].Int != 4 {
			t.Errorf("types %v", types)
		}
	})

	bad := []struct {
		name string
		data []byte
		want string
	}{
		{"no graph", mustMarshal(t, &onnxpb.ModelProto{IrVersion: proto.Int64(8)}), "not an ONNX model: no graph in the file"},
		{"duplicate initializer", model(&onnxpb.GraphProto{Initializer: []*onnxpb.TensorProto{w, w}}), `initializer "w" is defined twice`},
		{"unnamed initializer", model(&onnxpb.GraphProto{Initializer: []*onnxpb.TensorProto{{DataType: f, FloatData: []float32{1}}}}), "initializer #0 has no name"},
		{"sparse initializer", model(&onnxpb.GraphProto{SparseInitializer: []*onnxpb.SparseTensorProto{{}}}), "sparse initializers are not supported"},
		{"duplicate opset", model(&onnxpb.GraphProto{}, &onnxpb.OperatorSetIdProto{Version: proto.Int64(1)},
			&onnxpb.OperatorSetIdProto{Domain: proto.String("ai.onnx"), Version: proto.Int64(2)}), `opset_import lists domain "ai.onnx" twice`},
		{"node without op type", model(&onnxpb.GraphProto{Node: []*onnxpb.NodeProto{{Name: proto.String("n")}}}), `node "n" (): node has no op_type`},
		{"duplicate attribute", model(&onnxpb.GraphProto{Node: []*onnxpb.NodeProto{{Name: proto.String("n"), OpType: proto.String("Foo"),
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("a"), I: proto.Int64(1)}, {Name: proto.String("a"), I: proto.Int64(2)}}}}}),
			`node "n" (Foo): attribute "a" is given twice`},
		{"bad Constant tensor", model(&onnxpb.GraphProto{Node: []*onnxpb.NodeProto{{Name: proto.String("c"), OpType: proto.String("Constant"), Output: []string{"k"},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(),
				T: &onnxpb.TensorProto{DataType: f, Dims: []int64{4}, RawData: []byte{1, 2}}}}}}}),
			`node "c" (Constant): attribute "value": dims [4] of float32 need 16 bytes, raw_data has 2`},
		{"bad subgraph", model(&onnxpb.GraphProto{Node: []*onnxpb.NodeProto{{Name: proto.String("loop"), OpType: proto.String("Loop"),
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("body"), Type: onnxpb.AttributeProto_GRAPH.Enum(),
				G: &onnxpb.GraphProto{Name: proto.String("b"), Initializer: []*onnxpb.TensorProto{{Name: proto.String("z"), DataType: ptr32(14)}}}}}}}}),
			`node "loop" (Loop): attribute "body": graph "b": initializer "z": unsupported data type COMPLEX64 (14)`},
		{"negative output dim", model(&onnxpb.GraphProto{Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y"), Type: &onnxpb.TypeProto{
			Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: f, Shape: &onnxpb.TensorShapeProto{
				Dim: []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: -2}}}}}}}}}}),
			`graph output "y": dim 0 is negative (-2)`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.data, Options{})
			if err == nil {
				t.Fatalf("decoded %+v", m)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	bad := &ir.Tensor{DType: ir.Float, Shape: []int{3}, Data: []float32{1}}
	cases := []struct {
		name string
		m    *ir.Model
		want string
	}{
		{"nil graph", &ir.Model{}, "model has no graph"},
		{"bad initializer", &ir.Model{Graph: &ir.Graph{Initializers: map[string]*ir.Tensor{"w": bad}, InitializerOrder: []string{"w"}}},
			`initializer "w": shape [3] needs 3 elements, data has 1`},
		{"bad attribute tensor", &ir.Model{Graph: &ir.Graph{Nodes: []*ir.Node{{Name: "c", OpType: "Constant",
			Attrs: []*ir.Attribute{{Name: "value", Type: ir.AttrTensor, Tensor: bad}}}}}},
			`node "c" (Constant): attribute "value": shape [3] needs 3 elements`},
		{"complex64", &ir.Model{Graph: &ir.Graph{Initializers: map[string]*ir.Tensor{"w": {DType: ir.DType(14), Shape: []int{1}, Data: []uint16{1}}}, InitializerOrder: []string{"w"}}},
			"unsupported dtype dtype(14)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Encode(tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}
