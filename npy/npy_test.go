package npy

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		t    *ir.Tensor
	}{
		{"float32 2x3", ir.FromSlice([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6.5})},
		{"float64 vector", ir.FromSlice([]int{3}, []float64{1, -2, 3e100})},
		{"int64 scalar", ir.FromSlice(nil, []int64{-7})},
		{"int32 1x1x2", ir.FromSlice([]int{1, 1, 2}, []int32{5, -5})},
		{"bool 2x2", ir.FromSlice([]int{2, 2}, []bool{true, false, false, true})},
		{"uint8", ir.FromSlice([]int{4}, []uint8{0, 1, 254, 255})},
		{"int8", ir.FromSlice([]int{2}, []int8{-128, 127})},
		{"empty 0x4", ir.FromSlice([]int{0, 4}, []float32{})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.npy")
			if err := WriteFile(path, c.t); err != nil {
				t.Fatal(err)
			}
			got, err := ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.DType != c.t.DType || !reflect.DeepEqual(got.Shape, c.t.Shape) && !(len(got.Shape) == 0 && len(c.t.Shape) == 0) {
				t.Fatalf("got %v %v, want %v %v", got.DType, got.Shape, c.t.DType, c.t.Shape)
			}
			if !reflect.DeepEqual(got.Data, c.t.Data) {
				t.Fatalf("data %v, want %v", got.Data, c.t.Data)
			}
		})
	}
}

func TestHeaderIs64ByteAligned(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, ir.FromSlice([]int{2}, []float32{1, 2})); err != nil {
		t.Fatal(err)
	}
	if got := b.Len() - 8; got%64 != 0 {
		t.Fatalf("header is %d bytes, want a multiple of 64", got)
	}
}

func TestRejectsBadFiles(t *testing.T) {
	var lying bytes.Buffer
	hdr := "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000), }"
	hdr += strings.Repeat(" ", (64-(10+len(hdr)+1)%64)%64) + "\n"
	lying.WriteString("\x93NUMPY\x01\x00")
	lying.WriteByte(byte(len(hdr)))
	lying.WriteByte(byte(len(hdr) >> 8))
	lying.WriteString(hdr)
	cases := []struct {
		name, data, want string
	}{
		{"text", "hello, world, this is not numpy", "not a .npy file"},
		{"empty", "", "not a .npy file"},
		{"lying header", lying.String(), "but the file has only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.data), int64(len(c.data)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}
