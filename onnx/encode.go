package onnx

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Encode serializes a model as an ONNX ModelProto. It is the inverse of
// Decode for everything Decode keeps: Decode(Encode(m)) equals m. Tensors are
// written with raw_data (strings with string_data), opsets and metadata in
// sorted key order, so the output is deterministic.
func Encode(m *ir.Model) ([]byte, error) {
	mp, err := modelToProto(m, nil)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(mp)
}

// EncodeExternal is Encode for a process that can read the model's files:
// initializers loaded from external data (ir.Tensor.External) are written
// as external-data references to their files rather than as bytes, so the
// encoding stays small however large the weights are. It returns the
// directory the references are relative to ("" when there are none), which
// the reader passes as Options.BaseDir to Decode. Initializers of another
// directory than the first one met are written as bytes. Each reference
// also carries the identity of the file it was loaded from
// (ir.ExternalData.File) under an attnrun key beside location, offset and
// length: Decode refuses a file that has changed since (replaced or
// rewritten), so that a backend restarted after the model file was
// replaced fails instead of computing with the new file's weights.
func EncodeExternal(m *ir.Model) (data []byte, dir string, err error) {
	refs := &externalRefs{}
	mp, err := modelToProto(m, refs)
	if err != nil {
		return nil, "", err
	}
	data, err = proto.MarshalOptions{Deterministic: true}.Marshal(mp)
	return data, refs.dir, err
}

// externalRefs collects the directory EncodeExternal's references are
// relative to.
type externalRefs struct {
	dir string
}

// ref returns t as an external-data reference, or nil when t is to be
// written as bytes.
func (r *externalRefs) ref(name string, t *ir.Tensor) *onnxpb.TensorProto {
	e := t.External
	if r == nil || e == nil || t.DType == ir.String || (r.dir != "" && e.Dir != r.dir) {
		return nil
	}
	r.dir = e.Dir
	tp := &onnxpb.TensorProto{Name: ptr(name), DataType: ptr(int32(t.DType)), Dims: make([]int64, len(t.Shape)), DataLocation: onnxpb.TensorProto_EXTERNAL.Enum()}
	for i, d := range t.Shape {
		tp.Dims[i] = int64(d)
	}
	entries := [][2]string{{"location", e.Location}, {"offset", strconv.FormatInt(e.Offset, 10)}, {"length", strconv.FormatInt(e.Length, 10)}}
	if e.File.Known() {
		// The reader refuses a file that is no longer this one.
		entries = append(entries, [2]string{fileIdentityKey, formatIdentity(e.File)})
	}
	for _, kv := range entries {
		tp.ExternalData = append(tp.ExternalData, &onnxpb.StringStringEntryProto{Key: ptr(kv[0]), Value: ptr(kv[1])})
	}
	return tp
}

// EncodeTensor serializes one tensor as a TensorProto with the given name
// (the format of test_data_set_*/*.pb files); DecodeTensor reverses it.
func EncodeTensor(name string, t *ir.Tensor) ([]byte, error) {
	tp, err := tensorToProto(name, t)
	if err != nil {
		if name != "" {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(tp)
}

func modelToProto(m *ir.Model, refs *externalRefs) (*onnxpb.ModelProto, error) {
	if m == nil {
		return nil, fmt.Errorf("nil model")
	}
	if m.Graph == nil {
		return nil, fmt.Errorf("model has no graph")
	}
	mp := &onnxpb.ModelProto{
		IrVersion:       optInt(m.IRVersion),
		ProducerName:    optStr(m.ProducerName),
		ProducerVersion: optStr(m.ProducerVersion),
		Domain:          optStr(m.Domain),
		ModelVersion:    optInt(m.ModelVersion),
		DocString:       optStr(m.DocString),
	}
	for _, dom := range sortedKeys(m.Opsets) {
		mp.OpsetImport = append(mp.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: ptr(dom), Version: ptr(m.Opsets[dom])})
	}
	for _, k := range sortedKeys(m.Metadata) {
		mp.MetadataProps = append(mp.MetadataProps, &onnxpb.StringStringEntryProto{Key: ptr(k), Value: ptr(m.Metadata[k])})
	}
	g, err := graphToProto(m.Graph, refs)
	if err != nil {
		return nil, err
	}
	mp.Graph = g
	return mp, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optInt(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

// graphToProto converts a graph; with refs, initializers loaded from
// external data are written as references (EncodeExternal).
func graphToProto(g *ir.Graph, refs *externalRefs) (*onnxpb.GraphProto, error) {
	gp := &onnxpb.GraphProto{Name: optStr(g.Name)}
	wrap := func(err error) error {
		if g.Name != "" {
			return fmt.Errorf("graph %q: %w", g.Name, err)
		}
		return err
	}
	order := g.InitializerOrder
	if len(order) != len(g.Initializers) {
		// Order missing or stale: fall back to sorted names so that every
		// initializer is written exactly once.
		order = sortedKeys(g.Initializers)
	}
	for _, name := range order {
		t, ok := g.Initializers[name]
		if !ok {
			return nil, wrap(fmt.Errorf("initializer %q is in InitializerOrder but not in Initializers", name))
		}
		if tp := refs.ref(name, t); tp != nil {
			gp.Initializer = append(gp.Initializer, tp)
			continue
		}
		tp, err := tensorToProto(name, t)
		if err != nil {
			return nil, wrap(fmt.Errorf("initializer %q: %w", name, err))
		}
		gp.Initializer = append(gp.Initializer, tp)
	}
	for _, vi := range g.Inputs {
		gp.Input = append(gp.Input, valueInfoToProto(vi))
	}
	for _, vi := range g.Outputs {
		gp.Output = append(gp.Output, valueInfoToProto(vi))
	}
	for _, vi := range g.ValueInfo {
		gp.ValueInfo = append(gp.ValueInfo, valueInfoToProto(vi))
	}
	for _, n := range g.Nodes {
		np, err := nodeToProto(n)
		if err != nil {
			return nil, wrap(err)
		}
		gp.Node = append(gp.Node, np)
	}
	return gp, nil
}

func valueInfoToProto(vi *ir.ValueInfo) *onnxpb.ValueInfoProto {
	vp := &onnxpb.ValueInfoProto{Name: ptr(vi.Name), DocString: optStr(vi.Doc)}
	if vi.Type.DType == ir.Undefined && !vi.Type.RankKnown {
		return vp
	}
	tt := &onnxpb.TypeProto_Tensor{ElemType: ptr(int32(vi.Type.DType))}
	if vi.Type.RankKnown {
		tt.Shape = &onnxpb.TensorShapeProto{Dim: make([]*onnxpb.TensorShapeProto_Dimension, len(vi.Type.Shape))}
		for i, d := range vi.Type.Shape {
			dp := &onnxpb.TensorShapeProto_Dimension{}
			switch {
			case d.Param != "":
				dp.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d.Param}
			case d.Value >= 0:
				dp.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d.Value}
			}
			tt.Shape.Dim[i] = dp
		}
	}
	vp.Type = &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tt}}
	return vp
}

func nodeToProto(n *ir.Node) (*onnxpb.NodeProto, error) {
	np := &onnxpb.NodeProto{
		Name:      optStr(n.Name),
		OpType:    ptr(n.OpType),
		Domain:    optStr(n.Domain),
		Input:     n.Inputs,
		Output:    n.Outputs,
		DocString: optStr(n.Doc),
	}
	for _, a := range n.Attrs {
		ap, err := attrToProto(a)
		if err != nil {
			return nil, n.Errorf("attribute %q: %w", a.Name, err)
		}
		np.Attribute = append(np.Attribute, ap)
	}
	return np, nil
}

func attrToProto(a *ir.Attribute) (*onnxpb.AttributeProto, error) {
	ap := &onnxpb.AttributeProto{Name: ptr(a.Name), Type: ptr(onnxpb.AttributeProto_AttributeType(a.Type))}
	if a.RefAttrName != "" {
		ap.RefAttrName = ptr(a.RefAttrName)
		return ap, nil
	}
	switch a.Type {
	case ir.AttrFloat:
		ap.F = ptr(a.Float)
	case ir.AttrInt:
		ap.I = ptr(a.Int)
	case ir.AttrString:
		ap.S = append([]byte{}, a.String...)
	case ir.AttrTensor:
		tp, err := tensorToProto("", a.Tensor)
		if err != nil {
			return nil, err
		}
		ap.T = tp
	case ir.AttrGraph:
		if a.Graph == nil {
			return nil, fmt.Errorf("graph attribute has no graph")
		}
		gp, err := graphToProto(a.Graph, nil)
		if err != nil {
			return nil, err
		}
		ap.G = gp
	case ir.AttrFloats:
		ap.Floats = a.Floats
	case ir.AttrInts:
		ap.Ints = a.Ints
	case ir.AttrStrings:
		ap.Strings = a.Strings
	case ir.AttrTensors:
		for i, t := range a.Tensors {
			tp, err := tensorToProto("", t)
			if err != nil {
				return nil, fmt.Errorf("tensor #%d: %w", i, err)
			}
			ap.Tensors = append(ap.Tensors, tp)
		}
	case ir.AttrGraphs:
		for i, g := range a.Graphs {
			gp, err := graphToProto(g, nil)
			if err != nil {
				return nil, fmt.Errorf("graph #%d: %w", i, err)
			}
			ap.Graphs = append(ap.Graphs, gp)
		}
	case ir.AttrSparse, ir.AttrSparses:
		for i, raw := range a.Raw {
			st := &onnxpb.SparseTensorProto{}
			if err := proto.Unmarshal(raw, st); err != nil {
				return nil, fmt.Errorf("sparse tensor #%d: %v", i, err)
			}
			if a.Type == ir.AttrSparse {
				if len(a.Raw) != 1 {
					return nil, fmt.Errorf("sparse_tensor attribute holds %d values, want 1", len(a.Raw))
				}
				ap.SparseTensor = st
			} else {
				ap.SparseTensors = append(ap.SparseTensors, st)
			}
		}
	case ir.AttrTypeProto, ir.AttrTypeProtos:
		for i, raw := range a.Raw {
			tp := &onnxpb.TypeProto{}
			if err := proto.Unmarshal(raw, tp); err != nil {
				return nil, fmt.Errorf("type proto #%d: %v", i, err)
			}
			if a.Type == ir.AttrTypeProto {
				if len(a.Raw) != 1 {
					return nil, fmt.Errorf("type_proto attribute holds %d values, want 1", len(a.Raw))
				}
				ap.Tp = tp
			} else {
				ap.TypeProtos = append(ap.TypeProtos, tp)
			}
		}
	default:
		return nil, fmt.Errorf("unknown attribute type %v", a.Type)
	}
	return ap, nil
}
