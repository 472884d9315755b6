package main

import (
	"math"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// writeExternalAddModel writes dir/model.onnx computing y = x + w for
// x: float32[n] with w: float32[n] stored as external data in dir/location,
// and, when data is not nil, that file with w's values.
func writeExternalAddModel(t *testing.T, dir, location string, n int, data []float32) string {
	t.Helper()
	w := &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{int64(n)},
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(), ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String(location)}}}
	g := &onnxpb.GraphProto{
		Name:        proto.String("external"),
		Input:       []*onnxpb.ValueInfoProto{floatVI("x", int64(n))},
		Output:      []*onnxpb.ValueInfoProto{floatVI("y", int64(n))},
		Initializer: []*onnxpb.TensorProto{w},
		Node:        []*onnxpb.NodeProto{{Name: proto.String("/Add"), OpType: proto.String("Add"), Input: []string{"x", "w"}, Output: []string{"y"}}},
	}
	b, err := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8), OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}}, Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if data != nil {
		raw := make([]byte, 4*len(data))
		for i, v := range data {
			bits := math.Float32bits(v)
			raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
		}
		if err := os.WriteFile(filepath.Join(dir, location), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestLoadingNeverBlocks: a FIFO (open(2) would wait for a writer for
// ever), a socket or a device where attnrun expects a model, external
// weights or an input file is refused at once, by `run` and by `inspect`.
// Before, a FIFO as external data hung both, uninterruptibly.
func TestLoadingNeverBlocks(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	fifoDir := mkdir(t, dir, "fifo")
	viaFifo := writeExternalAddModel(t, fifoDir, "w.bin", 4, nil)
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "w.bin"), 0o644); err != nil {
		t.Fatal(err)
	}
	sockDir := mkdir(t, dir, "sock")
	viaSock := writeExternalAddModel(t, sockDir, "w.bin", 4, nil)
	l, err := net.Listen("unix", filepath.Join(sockDir, "w.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	inputFifo := filepath.Join(dir, "x.npy")
	if err := syscall.Mkfifo(inputFifo, 0o644); err != nil {
		t.Fatal(err)
	}
	pbFifo := filepath.Join(dir, "x.pb")
	if err := syscall.Mkfifo(pbFifo, 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(modelsDir, "s002_self_attention_v1", "model.onnx")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"FIFO as model", []string{"run", fifo, "-i", "x=random:4"}, fifo + " is a FIFO (named pipe), not a regular file"},
		{"FIFO as model (inspect)", []string{"inspect", fifo}, fifo + " is a FIFO (named pipe), not a regular file"},
		{"FIFO as external data", []string{"run", viaFifo, "-i", "x=random:4"}, `initializer "w": external data "w.bin" is a FIFO (named pipe), not a regular file`},
		{"FIFO as external data (inspect)", []string{"inspect", viaFifo}, `initializer "w": external data "w.bin" is a FIFO (named pipe), not a regular file`},
		{"socket as external data", []string{"inspect", viaSock}, `external data "w.bin" is a socket, not a regular file`},
		{"device as model", []string{"inspect", "/dev/zero"}, "/dev/zero is a device, not a regular file"},
		{"FIFO as .npy input", []string{"run", model, "-i", "x=" + inputFifo}, inputFifo + " is a FIFO (named pipe), not a regular file"},
		{"FIFO as .pb input", []string{"run", model, "-i", "x=" + pbFifo}, pbFifo + " is a FIFO (named pipe), not a regular file"},
		{"device as .npy input", []string{"run", model, "-i", "x=/dev/zero.npy"}, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			timed(t, cmdWall, c.args...).wantError(t, 1, cmdWall, c.want)
		})
	}
}

func mkdir(t *testing.T, parent, name string) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestMalformedNpyInputs: malformed .npy headers given to `run` are one
// error line each, never a Go panic (exit status 2 with a trace before).
func TestMalformedNpyInputs(t *testing.T) {
	model := filepath.Join(modelsDir, "s002_self_attention_v1", "model.onnx")
	dir := t.TempDir()
	header := func(h string, data int) []byte {
		b := []byte("\x93NUMPY\x01\x00")
		b = append(b, byte(len(h)), byte(len(h)>>8))
		return append(append(b, h...), make([]byte, data)...)
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty header", header("", 8), "malformed header"},
		{"no newline", header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 32), }", 512), "does not end with a newline"},
		{"unclosed shape", header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, }\n", 512), "malformed header"},
		{"trailing bytes", header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 32), }\n", 513), "1 trailing bytes after the 512 bytes of data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name+".npy")
			if err := os.WriteFile(p, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			timed(t, cmdWall, "run", model, "-i", "x="+p).wantError(t, 1, cmdWall, `input "x": `+p+": ", c.want)
		})
	}
}
