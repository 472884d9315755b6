package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// writeNodes writes an opset-17 model of the given nodes, inputs and
// outputs to dir/name.
func writeNodes(t *testing.T, dir, name string, in, out []*onnxpb.ValueInfoProto, nodes ...*onnxpb.NodeProto) string {
	t.Helper()
	p := filepath.Join(dir, name)
	writeGraph(t, p, &onnxpb.GraphProto{Name: proto.String("g"), Input: in, Output: out, Node: nodes})
	return p
}

// TestLongListsElided: a Transpose whose perm has 2M entries made a
// 14.9 MB error line; the line now keeps the list's ends and its count.
func TestLongListsElided(t *testing.T) {
	perm := make([]int64, 2_000_000)
	for i := range perm {
		perm[i] = int64(i)
	}
	model := writeNodes(t, t.TempDir(), "perm.onnx", []*onnxpb.ValueInfoProto{floatVI("x", 2, 3)}, []*onnxpb.ValueInfoProto{floatVI("y", 3, 2)},
		&onnxpb.NodeProto{Name: proto.String("/Transpose"), OpType: proto.String("Transpose"), Input: []string{"x"}, Output: []string{"y"},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("perm"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: perm}}})
	timed(t, cmdWall, "run", model, "-i", "x=random").wantError(t, 1, cmdWall,
		`node "/Transpose" (Transpose): perm [0 1 2 3 4 5 6 7 … 1999990 more … 1999998 1999999] is not a permutation of 0..1`)
}

// writeShapeBomb writes the 181-byte model of issue 9: two ConstantOfShape
// of a shape read from an 8-byte int64 input, then Add.
func writeShapeBomb(t *testing.T, dir string) string {
	t.Helper()
	s := &onnxpb.ValueInfoProto{Name: proto.String("s"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_INT64)),
			Shape: &onnxpb.TensorShapeProto{Dim: []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 1}}}}}}}}
	y := &onnxpb.ValueInfoProto{Name: proto.String("y"), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT))}}}}
	fill := func(v float32) []*onnxpb.AttributeProto {
		return []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(),
			T: &onnxpb.TensorProto{DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{1}, FloatData: []float32{v}}}}
	}
	return writeNodes(t, dir, "bomb.onnx", []*onnxpb.ValueInfoProto{s}, []*onnxpb.ValueInfoProto{y},
		&onnxpb.NodeProto{OpType: proto.String("ConstantOfShape"), Input: []string{"s"}, Output: []string{"a"}, Attribute: fill(1)},
		&onnxpb.NodeProto{OpType: proto.String("ConstantOfShape"), Input: []string{"s"}, Output: []string{"b"}, Attribute: fill(2)},
		&onnxpb.NodeProto{Name: proto.String("/Add"), OpType: proto.String("Add"), Input: []string{"a", "b"}, Output: []string{"y"}})
}

// TestShapeBombRefused: the 181-byte model asking for 3 × 4 GiB drove the
// backend to 11.2 GiB for 33 s, and under an address-space limit the host
// printed 463 lines of goroutine dump. It is now refused when planned, in
// milliseconds, in one line naming the node and the bytes: at /Add with
// --max-memory 8GiB, at the first ConstantOfShape with the default budget
// under this test's 4 GB address-space limit.
func TestShapeBombRefused(t *testing.T) {
	dir := t.TempDir()
	model := writeShapeBomb(t, dir)
	shape := filepath.Join(dir, "s.npy")
	writeNpy(t, shape, ir.FromSlice([]int{1}, []int64{1 << 30}))
	timed(t, cmdWall, "run", model, "-i", "s="+shape, "--max-memory", "8GiB").wantError(t, 1, cmdWall,
		`node "/Add" (Add): output "y" float32[1073741824] needs 4294967296 bytes (4 GiB); the memory budget (--max-memory 8 GiB) has 0 bytes left after the 8 GiB the steps before it need`)
	timed(t, cmdWall, "run", model, "-i", "s="+shape).wantError(t, 1, cmdWall,
		`node "ConstantOfShape→a" (ConstantOfShape): output "a" float32[1073741824] needs 4294967296 bytes (4 GiB); the memory budget (--max-memory `)
	// Small shapes run.
	writeNpy(t, shape, ir.FromSlice([]int{1}, []int64{5}))
	r := attnrun(t, "run", model, "-i", "s="+shape, "--max-memory", "64MiB")
	r.wantOK(t)
	if !strings.Contains(r.stdout, "y: float32 [5] [3 3 3 3 3]") {
		t.Errorf("stdout %q", r.stdout)
	}
	attnrun(t, "run", model, "-i", "s="+shape, "--max-memory", "lots").wantError(t, 2, cmdWall, `--max-memory: "lots" is not a byte count`)
}

// TestInternalDomainRefused: a model naming com.attnrun:FusedMatMul itself
// (with view strides that overflowed View.Span, so that only Go's own
// bounds check stopped the kernel) is refused when loaded.
func TestInternalDomainRefused(t *testing.T) {
	big := int64(1<<31-1) * int64(1<<31-1)
	b, err := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}, {Domain: proto.String("com.attnrun"), Version: proto.Int64(1)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("g"), Input: []*onnxpb.ValueInfoProto{floatVI("a", 4, 4), floatVI("b", 2, 2)}, Output: []*onnxpb.ValueInfoProto{floatVI("y", 2, 2, 2)},
			Node: []*onnxpb.NodeProto{{Name: proto.String("evil"), OpType: proto.String("FusedMatMul"), Domain: proto.String("com.attnrun"), Input: []string{"a", "b"}, Output: []string{"y"},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("a_view"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: []int64{0, 2, 2, 2, big, big, big}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "evil.onnx")
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	timed(t, cmdWall, "run", model, "-i", "a=random", "-i", "b=random").wantError(t, 1, cmdWall,
		`node "evil" (com.attnrun:FusedMatMul): the com.attnrun domain holds attnrun's internal ops, which only its own graph rewrites create; a model cannot use them`)
}
