package ir

import (
	"fmt"
	"strings"
)

// Model is a decoded ONNX model: metadata, the opsets it imports, and its
// main graph.
type Model struct {
	IRVersion       int64
	ProducerName    string
	ProducerVersion string
	Domain          string
	ModelVersion    int64
	DocString       string
	// Opsets maps an operator domain ("" is the default ai.onnx domain) to
	// the opset version the model imports.
	Opsets   map[string]int64
	Metadata map[string]string
	Graph    *Graph
}

// OpsetFor returns the imported opset version of a domain, treating
// "ai.onnx" as the default domain "".
func (m *Model) OpsetFor(domain string) (int64, bool) {
	if domain == "ai.onnx" {
		domain = ""
	}
	v, ok := m.Opsets[domain]
	return v, ok
}

// Graph is a DAG of nodes. Tensors are named by strings; the empty name marks
// an omitted optional input or output.
type Graph struct {
	Name string
	// Nodes in file order; Schedule returns a topological order.
	Nodes []*Node
	// Inputs are the graph inputs that are not initializers.
	Inputs []*ValueInfo
	// Outputs are the graph outputs in declaration order.
	Outputs []*ValueInfo
	// ValueInfo holds declared types of intermediate values, if any.
	ValueInfo []*ValueInfo
	// Initializers are constant tensors (weights, buffers), by name.
	Initializers map[string]*Tensor
	// InitializerOrder keeps the file order of Initializers' keys.
	InitializerOrder []string
}

// Node is one op application.
type Node struct {
	Name    string
	OpType  string
	Domain  string
	Inputs  []string
	Outputs []string
	Attrs   []*Attribute
	Doc     string
}

// Label names the node for error messages: its name, or its op type and first
// output when the file gave it no name.
func (n *Node) Label() string {
	if n.Name != "" {
		return n.Name
	}
	if len(n.Outputs) > 0 {
		return n.OpType + "→" + n.Outputs[0]
	}
	return n.OpType
}

// QualifiedOp returns "OpType" for the default domain and "domain:OpType"
// otherwise.
func (n *Node) QualifiedOp() string {
	if n.Domain == "" || n.Domain == "ai.onnx" {
		return n.OpType
	}
	return n.Domain + ":" + n.OpType
}

// Errorf wraps an error with the node's name and op type, the form every
// error about a node takes: `node "x" (MatMul): ...`. A long message is
// shortened (see Elide), so that no model can make an error line huge.
func (n *Node) Errorf(format string, args ...any) error {
	return ElideError(fmt.Errorf("node %q (%s): %w", Elide(n.Label()), n.QualifiedOp(), fmt.Errorf(format, args...)))
}

// Attr returns the attribute with the given name, or nil.
func (n *Node) Attr(name string) *Attribute {
	for _, a := range n.Attrs {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// AttrInt returns an int attribute or def when absent.
func (n *Node) AttrInt(name string, def int64) (int64, error) {
	a := n.Attr(name)
	if a == nil {
		return def, nil
	}
	if a.Type != AttrInt {
		return 0, fmt.Errorf("attribute %q is %v, want int", name, a.Type)
	}
	return a.Int, nil
}

// AttrFloat returns a float attribute or def when absent.
func (n *Node) AttrFloat(name string, def float32) (float32, error) {
	a := n.Attr(name)
	if a == nil {
		return def, nil
	}
	if a.Type != AttrFloat {
		return 0, fmt.Errorf("attribute %q is %v, want float", name, a.Type)
	}
	return a.Float, nil
}

// AttrString returns a string attribute or def when absent.
func (n *Node) AttrString(name string, def string) (string, error) {
	a := n.Attr(name)
	if a == nil {
		return def, nil
	}
	if a.Type != AttrString {
		return "", fmt.Errorf("attribute %q is %v, want string", name, a.Type)
	}
	return string(a.String), nil
}

// AttrInts returns an ints attribute; ok is false when absent.
func (n *Node) AttrInts(name string) (vals []int64, ok bool, err error) {
	a := n.Attr(name)
	if a == nil {
		return nil, false, nil
	}
	if a.Type != AttrInts {
		return nil, true, fmt.Errorf("attribute %q is %v, want ints", name, a.Type)
	}
	return a.Ints, true, nil
}

// Input returns the i-th input name, or "" when the node has fewer inputs.
func (n *Node) Input(i int) string {
	if i < len(n.Inputs) {
		return n.Inputs[i]
	}
	return ""
}

// AttrType is an attribute's kind, numbered as ONNX's AttributeProto.AttributeType.
type AttrType int32

// Attribute kinds.
const (
	AttrUndefined  AttrType = 0
	AttrFloat      AttrType = 1
	AttrInt        AttrType = 2
	AttrString     AttrType = 3
	AttrTensor     AttrType = 4
	AttrGraph      AttrType = 5
	AttrFloats     AttrType = 6
	AttrInts       AttrType = 7
	AttrStrings    AttrType = 8
	AttrTensors    AttrType = 9
	AttrGraphs     AttrType = 10
	AttrSparse     AttrType = 11
	AttrSparses    AttrType = 12
	AttrTypeProto  AttrType = 13
	AttrTypeProtos AttrType = 14
)

var attrTypeNames = []string{"undefined", "float", "int", "string", "tensor", "graph", "floats", "ints", "strings", "tensors", "graphs", "sparse_tensor", "sparse_tensors", "type_proto", "type_protos"}

// String names the kind ("int", "floats", ...).
func (t AttrType) String() string {
	if int(t) >= 0 && int(t) < len(attrTypeNames) {
		return attrTypeNames[t]
	}
	return fmt.Sprintf("attrtype(%d)", int32(t))
}

// Attribute is a node attribute. Exactly the field matching Type is set.
// Sparse tensors and type protos are kept only as their kind (Raw holds the
// undecoded bytes) since no supported op uses them.
type Attribute struct {
	Name    string
	Type    AttrType
	Float   float32
	Int     int64
	String  []byte
	Tensor  *Tensor
	Graph   *Graph
	Floats  []float32
	Ints    []int64
	Strings [][]byte
	Tensors []*Tensor
	Graphs  []*Graph
	Raw     [][]byte
	// RefAttrName is set when the attribute refers to an attribute of an
	// enclosing function.
	RefAttrName string
}

// Dim is one dimension of a declared shape: a known size, a symbolic name
// (dim_param), or unknown.
type Dim struct {
	Value int64  // valid when Param == "" and Value >= 0
	Param string // symbolic name, e.g. "batch"
}

// Known reports whether the dim has a concrete size.
func (d Dim) Known() bool { return d.Param == "" && d.Value >= 0 }

// UnknownDim is a dim with neither a size nor a name.
var UnknownDim = Dim{Value: -1}

// String prints the size, the symbol, or "?".
func (d Dim) String() string {
	switch {
	case d.Param != "":
		return d.Param
	case d.Value >= 0:
		return fmt.Sprint(d.Value)
	}
	return "?"
}

// Shape is a possibly symbolic shape. A nil Shape in a TypeInfo whose
// RankKnown is false means the rank itself is unknown.
type Shape []Dim

// String prints "[batch, seq, 64]".
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Concrete returns the sizes if every dim is known.
func (s Shape) Concrete() ([]int, bool) {
	out := make([]int, len(s))
	for i, d := range s {
		if !d.Known() {
			return nil, false
		}
		out[i] = int(d.Value)
	}
	return out, true
}

// ShapeOf makes a fully known Shape from sizes.
func ShapeOf(dims []int) Shape {
	s := make(Shape, len(dims))
	for i, d := range dims {
		s[i] = Dim{Value: int64(d)}
	}
	return s
}

// TypeInfo is what is known about a tensor before running: element type and
// (possibly symbolic) shape.
type TypeInfo struct {
	DType     DType
	Shape     Shape
	RankKnown bool
}

// String prints "float32[batch, seq, 64]" or "float32[?]" when the rank is unknown.
func (t TypeInfo) String() string {
	if !t.RankKnown {
		return t.DType.String() + "[…]"
	}
	return t.DType.String() + t.Shape.String()
}

// ValueInfo is a named, typed tensor declaration (graph input, output or
// annotated intermediate).
type ValueInfo struct {
	Name string
	Type TypeInfo
	Doc  string
}
