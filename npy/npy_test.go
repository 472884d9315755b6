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

// npyFile assembles a .npy file from a header dict (padded as NumPy pads
// it) and data bytes; version 1.0.
func npyFile(dict string, data []byte) []byte {
	h := dict + strings.Repeat(" ", (64-(10+len(dict)+1)%64)%64) + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	b.WriteByte(byte(len(h)))
	b.WriteByte(byte(len(h) >> 8))
	b.WriteString(h)
	b.Write(data)
	return b.Bytes()
}

// rawHeader assembles a version 1.0 file whose header bytes are exactly h.
func rawHeader(h string, data []byte) []byte {
	b := []byte("\x93NUMPY\x01\x00")
	b = append(b, byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	return append(b, data...)
}

// TestMalformedHeaders: every malformed header is an error naming what is
// wrong; none panics (npyio, the reader used before, panicked with "slice
// bounds out of range [:-1]" on an empty header or one without a newline).
func TestMalformedHeaders(t *testing.T) {
	eight := make([]byte, 8)
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty header", rawHeader("", eight), "does not end with a newline"},
		{"no newline", rawHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", eight), "does not end with a newline"},
		{"open brace", rawHeader("{\n", eight), "expected a quoted string"},
		{"just newline", rawHeader("\n", eight), "expected '{'"},
		{"empty dict", npyFile("{}", eight), `key "descr" is missing`},
		{"unclosed shape", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, }", eight), "want an integer"},
		{"negative dim", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", eight), "want an integer ≥ 0"},
		{"huge dim", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", eight), "want an integer ≥ 0"},
		{"huge product", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, 4000000000, 4000000000), }", eight), "too large"},
		{"one dim no comma", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", eight), "trailing comma"},
		{"extra key", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }", eight), `unexpected key "x"`},
		{"duplicate key", npyFile("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", eight), "given twice"},
		{"unterminated string", npyFile("{'descr: '<f4', 'fortran_order': False, 'shape': (2,) }", eight), "expected ':'"},
		{"bad bool", npyFile("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", eight), "want True or False"},
		{"text after dict", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", eight), "unexpected text"},
		{"empty descr", npyFile("{'descr': '', 'fortran_order': False, 'shape': (), }", eight), "unsupported .npy dtype"},
		{"big-endian", npyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", eight), "unsupported .npy dtype"},
		{"fortran", npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", eight), "arrays in Fortran order are not supported"},
		{"header past end", []byte("\x93NUMPY\x01\x00\xff\x00{'descr'"), "truncated .npy file"},
		{"header too long", []byte("\x93NUMPY\x02\x00\xff\xff\xff\x7f{"), "more than the"},
		{"version 9", []byte("\x93NUMPY\x09\x00\x00\x00"), "unsupported .npy format version 9.0"},
		{"magic only", []byte("\x93NUMPY"), "too short"},
		{"short data", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", eight), "has only 8 bytes of data"},
		{"trailing bytes", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", eight), "4 trailing bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, size := range []int64{int64(len(c.data)), -1} {
				got, err := Read(bytes.NewReader(c.data), size)
				if err == nil {
					t.Fatalf("size %d: read %v, want an error containing %q", size, got, c.want)
				}
				if size >= 0 && !strings.Contains(err.Error(), c.want) {
					t.Errorf("err = %v, want it to contain %q", err, c.want)
				}
			}
		})
	}
}

// TestHeaderVariants reads headers NumPy (or a hand) may write: double
// quotes, another key order, no trailing comma, Python 2 longs, version 2.0,
// native byte-order marks, float16.
func TestHeaderVariants(t *testing.T) {
	f := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40} // float32 1, 2
	v2 := []byte("\x93NUMPY\x02\x00")
	h := "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n"
	v2 = append(v2, byte(len(h)), 0, 0, 0)
	v2 = append(append(v2, h...), f...)
	cases := []struct {
		name  string
		data  []byte
		dt    ir.DType
		shape []int
	}{
		{"double quotes", npyFile(`{"descr": "<f4", "fortran_order": False, "shape": (2,)}`, f), ir.Float, []int{2}},
		{"key order", npyFile("{'shape': (1, 2), 'fortran_order': False, 'descr': '<f4'}", f), ir.Float, []int{1, 2}},
		{"long dims", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1L, 2L), }", f), ir.Float, []int{1, 2}},
		{"version 2.0", v2, ir.Float, []int{2}},
		{"native uint8", npyFile("{'descr': '=u1', 'fortran_order': False, 'shape': (8,), }", f), ir.Uint8, []int{8}},
		{"float16", npyFile("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", f), ir.Float16, []int{4}},
		{"scalar", npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f[:4]), ir.Float, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Read(bytes.NewReader(c.data), int64(len(c.data)))
			if err != nil {
				t.Fatal(err)
			}
			if got.DType != c.dt || len(got.Shape) != len(c.shape) || (len(c.shape) > 0 && !reflect.DeepEqual(got.Shape, c.shape)) {
				t.Fatalf("got %v %v, want %v %v", got.DType, got.Shape, c.dt, c.shape)
			}
		})
	}
}

// TestBoolBytesNormalized: a bool byte other than 0 or 1 reads as true.
func TestBoolBytesNormalized(t *testing.T) {
	data := npyFile("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", []byte{0, 1, 7})
	got, err := Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if b := got.Bools(); !reflect.DeepEqual(b, []bool{false, true, true}) {
		t.Fatalf("got %v", b)
	}
}

// FuzzReadNpy: no input makes Read panic, and what it accepts writes back
// to the same tensor. `go test` runs the seeds (valid files and the
// malformed headers above); `go test -fuzz FuzzReadNpy ./npy` explores.
func FuzzReadNpy(f *testing.F) {
	for _, tn := range []*ir.Tensor{
		ir.FromSlice([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
		ir.FromSlice(nil, []int64{-7}),
		ir.FromSlice([]int{2}, []bool{true, false}),
	} {
		var b bytes.Buffer
		if err := Write(&b, tn); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Add(rawHeader("", make([]byte, 8)))
	f.Add(rawHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", nil))
	f.Add(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, }", nil))
	f.Add([]byte("\x93NUMPY\x03\x00\x10\x00\x00\x00{'shape': (0,)}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int64{int64(len(data)), -1} {
			got, err := Read(bytes.NewReader(data), size)
			if err != nil {
				continue
			}
			if got.DType == ir.Float16 {
				continue // written back as <f2 too, but compare only the common types
			}
			var b bytes.Buffer
			if err := Write(&b, got); err != nil {
				t.Fatalf("read %v %v but cannot write it back: %v", got.DType, got.Shape, err)
			}
			again, err := Read(bytes.NewReader(b.Bytes()), int64(b.Len()))
			if err != nil {
				t.Fatalf("cannot read back what was written: %v", err)
			}
			if again.DType != got.DType || !reflect.DeepEqual(again.Data, got.Data) {
				t.Fatalf("round trip changed the tensor")
			}
		}
	})
}
