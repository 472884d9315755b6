package onnx

import (
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func ptr32(v int32) *int32 { return &v }

// TestTensorDTypes decodes every supported dtype from its typed field and
// from hand-written little-endian raw_data, and checks both give the same
// expected values, and that EncodeTensor/DecodeTensor round-trips them.
func TestTensorDTypes(t *testing.T) {
	cases := []struct {
		dt    onnxpb.TensorProto_DataType
		typed *onnxpb.TensorProto // typed field set; dims are [2]
		raw   []byte
		want  any
	}{
		{onnxpb.TensorProto_FLOAT, &onnxpb.TensorProto{FloatData: []float32{1.5, -2}},
			[]byte{0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0}, []float32{1.5, -2}},
		{onnxpb.TensorProto_DOUBLE, &onnxpb.TensorProto{DoubleData: []float64{1.5, -2}},
			[]byte{0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0, 0, 0, 0, 0, 0, 0x00, 0xc0}, []float64{1.5, -2}},
		// float16 1.0 = 0x3c00, -2.0 = 0xc000 (bit patterns; int32_data carries them).
		{onnxpb.TensorProto_FLOAT16, &onnxpb.TensorProto{Int32Data: []int32{0x3c00, 0xc000}},
			[]byte{0x00, 0x3c, 0x00, 0xc0}, []uint16{0x3c00, 0xc000}},
		{onnxpb.TensorProto_INT64, &onnxpb.TensorProto{Int64Data: []int64{-1, 1 << 40}},
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1, 0, 0}, []int64{-1, 1 << 40}},
		{onnxpb.TensorProto_INT32, &onnxpb.TensorProto{Int32Data: []int32{-7, 1 << 30}},
			[]byte{0xf9, 0xff, 0xff, 0xff, 0, 0, 0, 0x40}, []int32{-7, 1 << 30}},
		{onnxpb.TensorProto_INT16, &onnxpb.TensorProto{Int32Data: []int32{-300, 300}},
			[]byte{0xd4, 0xfe, 0x2c, 0x01}, []int16{-300, 300}},
		{onnxpb.TensorProto_INT8, &onnxpb.TensorProto{Int32Data: []int32{-128, 127}},
			[]byte{0x80, 0x7f}, []int8{-128, 127}},
		{onnxpb.TensorProto_UINT8, &onnxpb.TensorProto{Int32Data: []int32{0, 255}},
			[]byte{0x00, 0xff}, []uint8{0, 255}},
		{onnxpb.TensorProto_UINT16, &onnxpb.TensorProto{Int32Data: []int32{1, 65535}},
			[]byte{0x01, 0x00, 0xff, 0xff}, []uint16{1, 65535}},
		{onnxpb.TensorProto_UINT32, &onnxpb.TensorProto{Uint64Data: []uint64{1, 4294967295}},
			[]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, []uint32{1, 4294967295}},
		{onnxpb.TensorProto_UINT64, &onnxpb.TensorProto{Uint64Data: []uint64{1, 1<<63 + 5}},
			[]byte{1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0x80}, []uint64{1, 1<<63 + 5}},
		// bool raw_data is one byte per element.
		{onnxpb.TensorProto_BOOL, &onnxpb.TensorProto{Int32Data: []int32{1, 0}},
			[]byte{0x01, 0x00}, []bool{true, false}},
		{onnxpb.TensorProto_STRING, &onnxpb.TensorProto{StringData: [][]byte{[]byte("héllo"), {}}},
			nil, []string{"héllo", ""}},
	}
	for _, tc := range cases {
		t.Run(tc.dt.String(), func(t *testing.T) {
			dt := ir.DType(tc.dt)
			check := func(what string, tp *onnxpb.TensorProto) {
				t.Helper()
				tp.Dims = []int64{2}
				tp.DataType = ptr32(int32(tc.dt))
				got, err := TensorFromProto(tp, Options{})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if got.DType != dt || !reflect.DeepEqual(got.Shape, []int{2}) || !reflect.DeepEqual(got.Data, tc.want) {
					t.Errorf("%s: got %v %v %#v, want %#v", what, got.DType, got.Shape, got.Data, tc.want)
				}
			}
			typed := proto.Clone(tc.typed).(*onnxpb.TensorProto)
			check("typed", typed)
			if tc.raw != nil {
				check("raw_data", &onnxpb.TensorProto{RawData: tc.raw})
			} else {
				_, err := TensorFromProto(&onnxpb.TensorProto{Dims: []int64{2}, DataType: ptr32(int32(tc.dt)), RawData: []byte{1, 2}}, Options{})
				if err == nil || !strings.Contains(err.Error(), "string tensors must use string_data") {
					t.Errorf("string raw_data: %v", err)
				}
			}
			// Round trip through our encoder, which writes raw_data.
			in := &ir.Tensor{DType: dt, Shape: []int{2}, Data: tc.want}
			b, err := EncodeTensor("t", in)
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != nil {
				var tp onnxpb.TensorProto
				if err := proto.Unmarshal(b, &tp); err != nil || string(tp.RawData) != string(tc.raw) {
					t.Errorf("encoded raw_data % x, want % x (%v)", tp.RawData, tc.raw, err)
				}
			}
			name, out, err := DecodeTensor(b)
			if err != nil || name != "t" || !reflect.DeepEqual(out, in) {
				t.Errorf("round trip: %q %v %v", name, out, err)
			}
		})
	}
}

func TestTensorErrors(t *testing.T) {
	f := int32(onnxpb.TensorProto_FLOAT)
	cases := []struct {
		name string
		tp   *onnxpb.TensorProto
		opts Options
		want string
	}{
		{"complex64", &onnxpb.TensorProto{DataType: ptr32(14), Dims: []int64{1}}, Options{}, "unsupported data type COMPLEX64 (14)"},
		{"bfloat16 beyond 16 bits", &onnxpb.TensorProto{DataType: ptr32(16), Dims: []int64{1}, Int32Data: []int32{70000}}, Options{}, "does not fit in 16 bits"},
		{"undefined", &onnxpb.TensorProto{Dims: []int64{1}}, Options{}, "unsupported data type UNDEFINED (0)"},
		{"type 99", &onnxpb.TensorProto{DataType: ptr32(99)}, Options{}, "unsupported data type 99"},
		{"negative dim", &onnxpb.TensorProto{DataType: &f, Dims: []int64{3, -1}}, Options{}, "dims [3 -1]: dim 1 is negative"},
		{"count overflow", &onnxpb.TensorProto{DataType: &f, Dims: []int64{1 << 62, 1 << 62}}, Options{}, "element count overflows int64"},
		{"bytes overflow", &onnxpb.TensorProto{DataType: &f, Dims: []int64{1 << 60, 4}}, Options{}, "need more than 2^63 bytes, more than the limit"},
		{"over limit", &onnxpb.TensorProto{DataType: &f, Dims: []int64{2, 3}, FloatData: make([]float32, 6)}, Options{MaxTensorBytes: 23},
			"dims [2 3] of float32 need 24 bytes, more than the limit of 23 bytes"},
		{"long raw", &onnxpb.TensorProto{DataType: &f, Dims: []int64{2}, RawData: make([]byte, 9)}, Options{}, "need 8 bytes, raw_data has 9"},
		{"empty raw", &onnxpb.TensorProto{DataType: &f, Dims: []int64{2}, RawData: []byte{}}, Options{}, "need 8 bytes, raw_data has 0"},
		{"no data", &onnxpb.TensorProto{DataType: &f, Dims: []int64{2}}, Options{}, "need 2 elements, but the tensor has no data (no raw_data and an empty float_data)"},
		{"short typed", &onnxpb.TensorProto{DataType: &f, Dims: []int64{3}, FloatData: []float32{1, 2}}, Options{}, "need 3 elements, float_data has 2"},
		{"int8 range", &onnxpb.TensorProto{DataType: ptr32(3), Dims: []int64{1}, Int32Data: []int32{300}}, Options{}, "int32_data[0] = 300 does not fit in int8"},
		{"uint32 range", &onnxpb.TensorProto{DataType: ptr32(12), Dims: []int64{1}, Uint64Data: []uint64{1 << 40}}, Options{}, "does not fit in uint32"},
		{"strings short", &onnxpb.TensorProto{DataType: ptr32(8), Dims: []int64{2}, StringData: [][]byte{{'a'}}}, Options{}, "need 2 elements, string_data has 1"},
		{"segment", &onnxpb.TensorProto{DataType: &f, Segment: &onnxpb.TensorProto_Segment{}}, Options{}, "segmented tensors are not supported"},
		{"external without base dir", &onnxpb.TensorProto{DataType: &f, Dims: []int64{1},
			DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(), ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("w.bin")}}},
			Options{}, "no base directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TensorFromProto(tc.tp, tc.opts)
			if err == nil {
				t.Fatalf("accepted: %v", got)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
	// Exactly at the limit is fine; a scalar has one element.
	tp := &onnxpb.TensorProto{DataType: &f, Dims: []int64{2, 3}, FloatData: make([]float32, 6)}
	if _, err := TensorFromProto(tp, Options{MaxTensorBytes: 24}); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	sc, err := TensorFromProto(&onnxpb.TensorProto{DataType: &f, FloatData: []float32{7}}, Options{})
	if err != nil || len(sc.Shape) != 0 || !reflect.DeepEqual(sc.Float32s(), []float32{7}) {
		t.Errorf("scalar: %v %v", sc, err)
	}
	empty, err := TensorFromProto(&onnxpb.TensorProto{DataType: &f, Dims: []int64{0, 3}}, Options{})
	if err != nil || empty.Len() != 0 || !reflect.DeepEqual(empty.Shape, []int{0, 3}) {
		t.Errorf("empty tensor: %v %v", empty, err)
	}
}

// initModel builds a model y = Add(x, w) (+ extra initializers and nodes).
func initModel(inits []*onnxpb.TensorProto, nodes ...*onnxpb.NodeProto) []byte {
	x := &onnxpb.ValueInfoProto{Name: proto.String("x")}
	nodes = append(nodes, &onnxpb.NodeProto{OpType: proto.String("Add"), Input: []string{"x", "w"}, Output: []string{"y"}})
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("g"), Input: []*onnxpb.ValueInfoProto{x},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String("y")}}, Initializer: inits, Node: nodes},
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func TestMaxTensorBytesTotal(t *testing.T) {
	f := int32(onnxpb.TensorProto_FLOAT)
	w := func(name string) *onnxpb.TensorProto {
		return &onnxpb.TensorProto{Name: proto.String(name), DataType: &f, Dims: []int64{6}, RawData: make([]byte, 24)}
	}
	constant := &onnxpb.NodeProto{Name: proto.String("c"), OpType: proto.String("Constant"), Output: []string{"k"},
		Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: w("")}}}
	cases := []struct {
		name  string
		data  []byte
		limit int64
		want  string // "" = decodes
	}{
		{"two initializers fit", initModel([]*onnxpb.TensorProto{w("w"), w("v")}), 48, ""},
		{"two initializers exceed", initModel([]*onnxpb.TensorProto{w("w"), w("v")}), 47, `initializer "v": tensors in the model total more than the limit of 47 bytes`},
		{"constant counts", initModel([]*onnxpb.TensorProto{w("w")}, constant), 47, `node "c" (Constant): attribute "value": tensors in the model total more than the limit of 47 bytes`},
		{"constant alone too big", initModel([]*onnxpb.TensorProto{w("w")}, constant), 20, `initializer "w": dims [6] of float32 need 24 bytes, more than the limit of 20 bytes`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.data, Options{MaxTensorBytes: tc.limit})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Decode: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// externalModel writes model.onnx into dir with initializer w (float32[2, 3])
// stored externally with the given key/values.
func externalModel(t *testing.T, dir string, kv ...string) string {
	t.Helper()
	return externalModelDims(t, dir, []int64{2, 3}, kv...)
}

// externalModelDims is externalModel for a w of the given dims.
func externalModelDims(t *testing.T, dir string, dims []int64, kv ...string) string {
	t.Helper()
	f := int32(onnxpb.TensorProto_FLOAT)
	tp := &onnxpb.TensorProto{Name: proto.String("w"), DataType: &f, Dims: dims, DataLocation: onnxpb.TensorProto_EXTERNAL.Enum()}
	for i := 0; i+1 < len(kv); i += 2 {
		tp.ExternalData = append(tp.ExternalData, &onnxpb.StringStringEntryProto{Key: proto.String(kv[i]), Value: proto.String(kv[i+1])})
	}
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, initModel([]*onnxpb.TensorProto{tp}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExternalData(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "model")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	// 8 bytes of padding, then float32 1..6 little endian, then 4 spare bytes.
	blob := []byte("PADDING!")
	for _, v := range []float32{1, 2, 3, 4, 5, 6} {
		b := math.Float32bits(v)
		blob = append(blob, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
	}
	blob = append(blob, 0, 0, 0, 0)
	for _, p := range []string{filepath.Join(dir, "w.bin"), filepath.Join(dir, "data", "w.bin"), filepath.Join(root, "outside.bin")} {
		if err := os.WriteFile(p, blob, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "outside.bin"), filepath.Join(dir, "link.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "data", "w.bin"), filepath.Join(dir, "inside_link.bin")); err != nil {
		t.Fatal(err)
	}
	// A FIFO would block open(2) until a writer came, for ever: it, a
	// socket and a device are refused before anything opens them.
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	haveDevice := syscall.Mknod(filepath.Join(dir, "zero"), syscall.S_IFCHR|0o644, 1<<8|5) == nil // /dev/zero's numbers; needs root
	want := []float32{1, 2, 3, 4, 5, 6}
	cases := []struct {
		name string
		kv   []string
		err  string // "" = loads w
	}{
		{"offset and length", []string{"location", "w.bin", "offset", "8", "length", "24"}, ""},
		{"offset, no length", []string{"location", "w.bin", "offset", "8"}, ""},
		{"subdirectory", []string{"location", "data/w.bin", "offset", "8", "length", "24"}, ""},
		{"cleaned path inside", []string{"location", "data/../data/./w.bin", "offset", "8"}, ""},
		{"symlink inside", []string{"location", "inside_link.bin", "offset", "8"}, ""},
		{"parent", []string{"location", "../outside.bin", "offset", "8"}, `external data location "../outside.bin" escapes the model's directory`},
		{"parent after clean", []string{"location", "data/../../outside.bin"}, "escapes the model's directory"},
		{"etc passwd", []string{"location", "../../etc/passwd"}, "escapes the model's directory"},
		{"absolute", []string{"location", "/etc/passwd"}, `external data location "/etc/passwd" is an absolute path`},
		{"symlink outside", []string{"location", "link.bin", "offset", "8"}, "escapes the model's directory (through a symbolic link)"},
		{"missing file", []string{"location", "nope.bin"}, `external data "nope.bin"`},
		{"directory", []string{"location", "data"}, `external data "data" is a directory, not a regular file`},
		{"fifo", []string{"location", "fifo"}, `external data "fifo" is a FIFO (named pipe), not a regular file`},
		{"socket", []string{"location", "sock"}, `external data "sock" is a socket, not a regular file`},
		{"device", []string{"location", "zero"}, `external data "zero" is a device, not a regular file`},
		{"no location", []string{"offset", "0"}, "external data has no location"},
		{"offset past end", []string{"location", "w.bin", "offset", "100"}, "offset 100 is past the end of the file (36 bytes)"},
		{"length past end", []string{"location", "w.bin", "offset", "20", "length", "24"}, "offset 20 + length 24 is past the end of the file (36 bytes)"},
		{"wrong length", []string{"location", "w.bin", "offset", "0", "length", "12"}, "need 24 bytes, external data \"w.bin\" has length 12"},
		{"too little from offset", []string{"location", "w.bin", "offset", "20"}, "need 24 bytes, external data \"w.bin\" has 16 bytes from offset 20"},
		{"bad offset", []string{"location", "w.bin", "offset", "-1"}, `external data offset "-1" is not a non-negative integer`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "device" && !haveDevice {
				t.Skip("mknod needs root")
			}
			path := externalModel(t, dir, tc.kv...)
			m, err := Load(path, Options{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), `initializer "w"`) {
					t.Errorf("error %v\nwant it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := m.Graph.Initializers["w"]
			if !reflect.DeepEqual(got.Float32s(), want) || !reflect.DeepEqual(got.Shape, []int{2, 3}) {
				t.Errorf("w = %v", got)
			}
			// It remembers where its bytes are, for EncodeExternal.
			if e := got.External; e == nil || !filepath.IsAbs(e.Dir) || e.Offset != 8 || e.Length != 24 {
				t.Errorf("w.External = %+v", e)
			}
			got.External = nil
			// Encode inlines the data: the result no longer needs the file.
			b, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			m2, err := Decode(b, Options{})
			if err != nil || !reflect.DeepEqual(m, m2) {
				t.Errorf("re-decoded without BaseDir: %v", err)
			}
		})
	}
}
