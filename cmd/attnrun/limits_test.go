package main

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// writeGraph writes an opset-17 model of the given nodes, inputs and
// outputs to dir/name.
func writeGraph(t *testing.T, dir, name string, in, out []*onnxpb.ValueInfoProto, nodes ...*onnxpb.NodeProto) string {
	t.Helper()
	b, err := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:       &onnxpb.GraphProto{Name: proto.String("g"), Input: in, Output: out, Node: nodes}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLongListsElided: a Transpose whose perm has 2M entries made a
// 14.9 MB error line; the line now keeps the list's ends and its count.
func TestLongListsElided(t *testing.T) {
	perm := make([]int64, 2_000_000)
	for i := range perm {
		perm[i] = int64(i)
	}
	model := writeGraph(t, t.TempDir(), "perm.onnx", []*onnxpb.ValueInfoProto{floatVI("x", 2, 3)}, []*onnxpb.ValueInfoProto{floatVI("y", 3, 2)},
		&onnxpb.NodeProto{Name: proto.String("/Transpose"), OpType: proto.String("Transpose"), Input: []string{"x"}, Output: []string{"y"},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("perm"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: perm}}})
	timed(t, cmdWall, "run", model, "-i", "x=random").wantError(t, 1, cmdWall,
		`node "/Transpose" (Transpose): perm [0 1 2 3 4 5 6 7 … 1999990 more … 1999998 1999999] is not a permutation of 0..1`)
}
