// Package onnx translates ONNX protobuf models to attnrun's IR (package ir)
// and back. It is a pure translator: it checks what the wire format itself
// must satisfy (well-formed protobuf, a graph, tensors whose data matches
// their declared dims and type, sizes within limits, external data inside the
// model's directory) but not the graph's structure (cycles, undefined
// inputs, unknown ops). Those are the runtime's checks (ir.Graph.Validate and
// the op registry), so that a structurally broken model still decodes and the
// runtime can report what is wrong with it.
package onnx

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/attnrun/attnrun/internal/regfile"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MaxIRVersion is the newest ONNX IR version attnrun reads: 13, ONNX 1.22's
// (opsets up to 27, the narrow element types float8, int4, float4 and
// int2). A model declaring a newer one is refused rather than misread.
const MaxIRVersion = 13

// DefaultMaxTensorBytes is the tensor size limit used when
// Options.MaxTensorBytes is 0: 4 GiB.
const DefaultMaxTensorBytes int64 = 4 << 30

// Options tunes decoding.
type Options struct {
	// MaxTensorBytes caps the size of any one initializer/Constant tensor
	// and the sum of all; 0 means DefaultMaxTensorBytes (4 GiB).
	MaxTensorBytes int64
	// BaseDir is where external data files are resolved (the model file's
	// directory); Load sets it.
	BaseDir string
	// ReferenceWeights leaves unread the float32 initializers of 1 MiB or
	// more stored in a file (external data, or embedded in the model file
	// as raw_data) that cannot be memory-mapped (at an offset not aligned
	// for float32): such a tensor is loaded by reference, released
	// (ir.Tensor.Released: its Data nil, its External set), for a process
	// that hands the reference on rather than reading the values (the
	// host of backends in other processes). A WeightStore opened right
	// after loading reads them back (Restore) where they are read.
	ReferenceWeights bool
	// files holds, during one Decode, the identity of each external data
	// file (by absolute path) as first opened: a later tensor of the same
	// file must find it unchanged.
	files map[string]ir.FileIdentity
}

func (o Options) maxBytes() int64 {
	if o.MaxTensorBytes <= 0 {
		return DefaultMaxTensorBytes
	}
	return o.MaxTensorBytes
}

// ErrNotONNX is wrapped by the errors Decode returns for input that is not a
// serialized ModelProto at all (empty, truncated, garbage or text).
var ErrNotONNX = errors.New("not an ONNX model")

// maxModelFileBytes bounds the model file itself: a protobuf message cannot
// exceed 2 GiB (larger weights must be stored as external data).
const maxModelFileBytes = 1<<31 - 1

// Load reads and decodes the model file at path. Options.BaseDir is set to
// the file's directory, so external data is resolved next to the model.
// The path and every external data file must be regular files: a FIFO or a
// device is refused without blocking. Errors are prefixed with the path.
//
// Initializers of 1 MiB or more embedded in the file (raw_data) are mapped
// from it rather than read, and remember where they are
// (ir.Tensor.External), as external data does: see loadReferenced.
func Load(path string, opts Options) (*ir.Model, error) {
	data, ok, err := loadReferenced(path)
	if err == nil && !ok {
		data, err = regfile.ReadFile(path, maxModelFileBytes)
	}
	if err != nil {
		return nil, err // already names the path
	}
	opts.BaseDir = filepath.Dir(path)
	m, err := Decode(data, opts)
	if err != nil {
		return nil, ir.ElideError(fmt.Errorf("%s: %w", path, err))
	}
	return m, nil
}

// Decode translates a serialized ONNX ModelProto into an ir.Model. It does
// not validate the graph's structure; see the package comment.
func Decode(data []byte, opts Options) (*ir.Model, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty file", ErrNotONNX)
	}
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		return nil, fmt.Errorf("%w: %s%v", ErrNotONNX, truncation(data), err)
	}
	if mp.Graph == nil {
		return nil, fmt.Errorf("%w: no graph in the file", ErrNotONNX)
	}
	if v := mp.GetIrVersion(); v > MaxIRVersion {
		return nil, fmt.Errorf("IR version %d is newer than attnrun reads (up to %d, ONNX 1.22's)", v, MaxIRVersion)
	}
	opts.files = map[string]ir.FileIdentity{}
	d := &decoder{opts: opts, limit: opts.maxBytes()}
	m := &ir.Model{
		IRVersion:       mp.GetIrVersion(),
		ProducerName:    mp.GetProducerName(),
		ProducerVersion: mp.GetProducerVersion(),
		Domain:          mp.GetDomain(),
		ModelVersion:    mp.GetModelVersion(),
		DocString:       mp.GetDocString(),
		Opsets:          make(map[string]int64, len(mp.OpsetImport)),
		Metadata:        make(map[string]string, len(mp.MetadataProps)),
	}
	for _, op := range mp.OpsetImport {
		dom := normDomain(op.GetDomain())
		if _, dup := m.Opsets[dom]; dup {
			return nil, fmt.Errorf("opset_import lists domain %q twice", op.GetDomain())
		}
		m.Opsets[dom] = op.GetVersion()
	}
	for _, kv := range mp.MetadataProps {
		m.Metadata[kv.GetKey()] = kv.GetValue()
	}
	g, err := d.graph(mp.Graph, true)
	if err != nil {
		return nil, err
	}
	m.Graph = g
	return m, nil
}

// truncation says, for data that protobuf refused, whether it reads as a
// ModelProto cut short (a partial download or copy) rather than as something
// that is not one at all: every top-level field a ModelProto field, and the
// last a length-delimited one that runs past the end. It returns "the file is
// truncated (...): ", or "".
func truncation(data []byte) string {
	fields := (&onnxpb.ModelProto{}).ProtoReflect().Descriptor().Fields()
	for b := data; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		fd := fields.ByNumber(num)
		if n < 0 || fd == nil {
			return ""
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			if typ == protowire.BytesType && protowire.ParseError(m) == io.ErrUnexpectedEOF {
				return fmt.Sprintf("the file is truncated (%d bytes end inside its %s field): ", len(data), fd.Name())
			}
			return ""
		}
		b = b[n+m:]
	}
	return ""
}

// DecodeTensor decodes one serialized TensorProto, as stored in the
// test_data_set_*/*.pb files of ONNX's test layout. It returns the tensor's
// name. External data is not allowed (there is no base directory).
func DecodeTensor(data []byte) (name string, t *ir.Tensor, err error) {
	var tp onnxpb.TensorProto
	if err := proto.Unmarshal(data, &tp); err != nil {
		return "", nil, fmt.Errorf("not a serialized ONNX tensor: %v", err)
	}
	t, err = TensorFromProto(&tp, Options{})
	if err != nil {
		if tp.GetName() != "" {
			return "", nil, fmt.Errorf("tensor %q: %w", tp.GetName(), err)
		}
		return "", nil, err
	}
	return tp.GetName(), t, nil
}

// TensorFromProto converts one TensorProto, checking its dims, type and data
// size (against opts.MaxTensorBytes before allocating) and reading external
// data relative to opts.BaseDir.
func TensorFromProto(tp *onnxpb.TensorProto, opts Options) (*ir.Tensor, error) {
	return tensorFromProto(tp, opts, opts.maxBytes())
}

func normDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

// decoder carries the options and the running total of tensor bytes.
type decoder struct {
	opts  Options
	limit int64
	total int64
}

// tensor converts a tensor and charges its size against the total budget.
// Only the main graph's initializers (byRef) may be loaded by reference
// (Options.ReferenceWeights): node attributes and subgraphs are read.
func (d *decoder) tensor(tp *onnxpb.TensorProto, byRef bool) (*ir.Tensor, error) {
	opts := d.opts
	opts.ReferenceWeights = opts.ReferenceWeights && byRef
	t, err := tensorFromProto(tp, opts, d.limit)
	if err != nil {
		return nil, err
	}
	b := t.Bytes()
	if t.Released() {
		b = t.External.Length // loaded by reference: as large all the same
	}
	if t.DType == ir.String {
		for _, s := range t.Data.([]string) {
			b += int64(len(s))
		}
	}
	d.total += b
	if d.total > d.limit {
		return nil, fmt.Errorf("tensors in the model total more than the limit of %d bytes (Options.MaxTensorBytes)", d.limit)
	}
	return t, nil
}

// graph converts a graph; errors inside a subgraph (top false) name it.
func (d *decoder) graph(gp *onnxpb.GraphProto, top bool) (*ir.Graph, error) {
	g := &ir.Graph{
		Name:             gp.GetName(),
		Initializers:     make(map[string]*ir.Tensor, len(gp.Initializer)),
		InitializerOrder: make([]string, 0, len(gp.Initializer)),
	}
	wrap := func(err error) error {
		if !top {
			return fmt.Errorf("graph %q: %w", g.Name, err)
		}
		return err
	}
	if len(gp.SparseInitializer) > 0 {
		return nil, wrap(fmt.Errorf("sparse initializers are not supported (%d in the graph)", len(gp.SparseInitializer)))
	}
	for i, tp := range gp.Initializer {
		name := tp.GetName()
		if name == "" {
			return nil, wrap(fmt.Errorf("initializer #%d has no name", i))
		}
		if _, dup := g.Initializers[name]; dup {
			return nil, wrap(fmt.Errorf("initializer %q is defined twice", name))
		}
		t, err := d.tensor(tp, top)
		if err != nil {
			return nil, wrap(fmt.Errorf("initializer %q: %w", name, err))
		}
		g.Initializers[name] = t
		g.InitializerOrder = append(g.InitializerOrder, name)
	}
	var err error
	for _, vp := range gp.Input {
		if _, isInit := g.Initializers[vp.GetName()]; isInit {
			continue
		}
		vi, err := valueInfo(vp)
		if err != nil {
			return nil, wrap(fmt.Errorf("graph input %q: %w", vp.GetName(), err))
		}
		g.Inputs = append(g.Inputs, vi)
	}
	if g.Outputs, err = valueInfos(gp.Output, "graph output"); err != nil {
		return nil, wrap(err)
	}
	if g.ValueInfo, err = valueInfos(gp.ValueInfo, "value_info"); err != nil {
		return nil, wrap(err)
	}
	g.Nodes = make([]*ir.Node, 0, len(gp.Node))
	for _, np := range gp.Node {
		n, err := d.node(np)
		if err != nil {
			return nil, wrap(err)
		}
		g.Nodes = append(g.Nodes, n)
	}
	return g, nil
}

func valueInfos(vps []*onnxpb.ValueInfoProto, what string) ([]*ir.ValueInfo, error) {
	var out []*ir.ValueInfo
	for _, vp := range vps {
		vi, err := valueInfo(vp)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, vp.GetName(), err)
		}
		out = append(out, vi)
	}
	return out, nil
}

// valueInfo converts a declaration. Non-tensor types (sequences, maps,
// optionals, sparse tensors) are kept as an unknown type.
func valueInfo(vp *onnxpb.ValueInfoProto) (*ir.ValueInfo, error) {
	vi := &ir.ValueInfo{Name: vp.GetName(), Doc: vp.GetDocString()}
	tt := vp.GetType().GetTensorType()
	if tt == nil {
		return vi, nil
	}
	vi.Type.DType = ir.DType(tt.GetElemType())
	if tt.Shape == nil {
		return vi, nil
	}
	vi.Type.RankKnown = true
	vi.Type.Shape = make(ir.Shape, len(tt.Shape.Dim))
	for i, dp := range tt.Shape.Dim {
		switch v := dp.Value.(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			if v.DimValue < 0 {
				return nil, fmt.Errorf("dim %d is negative (%d)", i, v.DimValue)
			}
			vi.Type.Shape[i] = ir.Dim{Value: v.DimValue}
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			if v.DimParam == "" {
				vi.Type.Shape[i] = ir.UnknownDim
			} else {
				vi.Type.Shape[i] = ir.Dim{Param: v.DimParam}
			}
		default:
			vi.Type.Shape[i] = ir.UnknownDim
		}
	}
	return vi, nil
}

func (d *decoder) node(np *onnxpb.NodeProto) (*ir.Node, error) {
	n := &ir.Node{
		Name:    np.GetName(),
		OpType:  np.GetOpType(),
		Domain:  normDomain(np.GetDomain()),
		Inputs:  append([]string(nil), np.Input...),
		Outputs: append([]string(nil), np.Output...),
		Doc:     np.GetDocString(),
	}
	if n.OpType == "" {
		return nil, n.Errorf("node has no op_type")
	}
	seen := make(map[string]bool, len(np.Attribute))
	for _, ap := range np.Attribute {
		if seen[ap.GetName()] {
			return nil, n.Errorf("attribute %q is given twice", ap.GetName())
		}
		seen[ap.GetName()] = true
		a, err := d.attribute(ap)
		if err != nil {
			return nil, n.Errorf("attribute %q: %w", ap.GetName(), err)
		}
		n.Attrs = append(n.Attrs, a)
	}
	return n, nil
}

// attrType returns the attribute's declared type, or for IR version 1 files
// that did not declare it, the type of the field that is set.
func attrType(ap *onnxpb.AttributeProto) ir.AttrType {
	if ap.Type != nil && *ap.Type != onnxpb.AttributeProto_UNDEFINED {
		return ir.AttrType(*ap.Type)
	}
	switch {
	case ap.F != nil:
		return ir.AttrFloat
	case ap.I != nil:
		return ir.AttrInt
	case ap.S != nil:
		return ir.AttrString
	case ap.T != nil:
		return ir.AttrTensor
	case ap.G != nil:
		return ir.AttrGraph
	case ap.SparseTensor != nil:
		return ir.AttrSparse
	case ap.Tp != nil:
		return ir.AttrTypeProto
	case len(ap.Floats) > 0:
		return ir.AttrFloats
	case len(ap.Ints) > 0:
		return ir.AttrInts
	case len(ap.Strings) > 0:
		return ir.AttrStrings
	case len(ap.Tensors) > 0:
		return ir.AttrTensors
	case len(ap.Graphs) > 0:
		return ir.AttrGraphs
	case len(ap.SparseTensors) > 0:
		return ir.AttrSparses
	case len(ap.TypeProtos) > 0:
		return ir.AttrTypeProtos
	}
	return ir.AttrUndefined
}

func (d *decoder) attribute(ap *onnxpb.AttributeProto) (*ir.Attribute, error) {
	a := &ir.Attribute{Name: ap.GetName(), Type: attrType(ap), RefAttrName: ap.GetRefAttrName()}
	if a.Name == "" {
		return nil, fmt.Errorf("attribute has no name")
	}
	if a.RefAttrName != "" {
		return a, nil // a reference carries no value
	}
	var err error
	switch a.Type {
	case ir.AttrFloat:
		a.Float = ap.GetF()
	case ir.AttrInt:
		a.Int = ap.GetI()
	case ir.AttrString:
		a.String = append([]byte(nil), ap.S...)
	case ir.AttrTensor:
		if ap.T == nil {
			return nil, fmt.Errorf("tensor attribute has no tensor")
		}
		if a.Tensor, err = d.tensor(ap.T, false); err != nil {
			return nil, err
		}
	case ir.AttrGraph:
		if ap.G == nil {
			return nil, fmt.Errorf("graph attribute has no graph")
		}
		if a.Graph, err = d.graph(ap.G, false); err != nil {
			return nil, err
		}
	case ir.AttrFloats:
		a.Floats = append([]float32(nil), ap.Floats...)
	case ir.AttrInts:
		a.Ints = append([]int64(nil), ap.Ints...)
	case ir.AttrStrings:
		for _, s := range ap.Strings {
			a.Strings = append(a.Strings, append([]byte{}, s...))
		}
	case ir.AttrTensors:
		for i, tp := range ap.Tensors {
			t, err := d.tensor(tp, false)
			if err != nil {
				return nil, fmt.Errorf("tensor #%d: %w", i, err)
			}
			a.Tensors = append(a.Tensors, t)
		}
	case ir.AttrGraphs:
		for i, gp := range ap.Graphs {
			g, err := d.graph(gp, false)
			if err != nil {
				return nil, fmt.Errorf("graph #%d: %w", i, err)
			}
			a.Graphs = append(a.Graphs, g)
		}
	case ir.AttrSparse:
		if ap.SparseTensor == nil {
			return nil, fmt.Errorf("sparse_tensor attribute has no value")
		}
		a.Raw, err = marshalAll([]proto.Message{ap.SparseTensor})
	case ir.AttrSparses:
		msgs := make([]proto.Message, len(ap.SparseTensors))
		for i, m := range ap.SparseTensors {
			msgs[i] = m
		}
		a.Raw, err = marshalAll(msgs)
	case ir.AttrTypeProto:
		if ap.Tp == nil {
			return nil, fmt.Errorf("type_proto attribute has no value")
		}
		a.Raw, err = marshalAll([]proto.Message{ap.Tp})
	case ir.AttrTypeProtos:
		msgs := make([]proto.Message, len(ap.TypeProtos))
		for i, m := range ap.TypeProtos {
			msgs[i] = m
		}
		a.Raw, err = marshalAll(msgs)
	default:
		if a.Type == ir.AttrUndefined {
			return nil, fmt.Errorf("attribute has no type and no value")
		}
		return nil, fmt.Errorf("unknown attribute type %d", int32(a.Type))
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

func marshalAll(msgs []proto.Message) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
