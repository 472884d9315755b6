package onnx

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ir"
)

// TestFileIdentityKey: the identity value reads back exactly as written,
// and anything else under the key is refused, by parseIdentity and by
// Decode.
func TestFileIdentityKey(t *testing.T) {
	id := ir.FileIdentity{Dev: 2049, Ino: 1234567, Size: 3 << 20, ModTimeNs: 1764000000123456789}
	if s := formatIdentity(id); s != "dev=2049,ino=1234567,size=3145728,mtime_ns=1764000000123456789" {
		t.Fatalf("formatIdentity = %q", s)
	}
	if back, err := parseIdentity(formatIdentity(id)); err != nil || back != id {
		t.Fatalf("parseIdentity(formatIdentity(%+v)) = %+v, %v", id, back, err)
	}
	for _, bad := range []string{
		"",
		"dev=1,ino=2",
		"dev=1,ino=2,size=3,mtime_ns=4 ",
		" dev=1,ino=2,size=3,mtime_ns=4",
		"dev=1,ino=2,size=3,mtime_ns=4,x=5",
		"dev=-1,ino=2,size=3,mtime_ns=4",
		"dev=01,ino=2,size=3,mtime_ns=4",
		"ino=2,dev=1,size=3,mtime_ns=4",
		"dev=0,ino=0,size=0,mtime_ns=0",
	} {
		if got, err := parseIdentity(bad); err == nil {
			t.Errorf("parseIdentity(%q) = %+v, want an error", bad, got)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), make([]byte, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	path := externalModelDims(t, dir, []int64{4}, "location", "w.bin", fileIdentityKey, "dev=1,ino=2")
	if _, err := Load(path, Options{}); err == nil || !strings.Contains(err.Error(), fileIdentityKey) || !strings.Contains(err.Error(), `initializer "w"`) {
		t.Fatalf("Load with a malformed %s: %v", fileIdentityKey, err)
	}
}

// TestFileIdentityChecked: a weight loaded from a file (external data, or
// embedded in the model file) records the file's identity, EncodeExternal
// sends it with the reference, and decoding the reference reads the file
// when it is unchanged; when the file was renamed over, written in place
// or grown since, decoding the reference (a restarted backend) and
// opening a WeightStore (the host, right after Load) fail with an error
// naming the initializer, the file and what changed.
func TestFileIdentityChecked(t *testing.T) {
	changes := []struct {
		name string
		// change alters the file at path; want is in the error.
		change func(t *testing.T, path string, offset int64)
		want   string
	}{
		{"renamed over", func(t *testing.T, path string, offset int64) {
			// A retrained model of the same shapes: same size, other weights.
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			copy(data[offset:], []byte{1, 2, 3, 4, 5, 6, 7, 8})
			tmp := filepath.Join(filepath.Dir(path), "new.tmp")
			if err := os.WriteFile(tmp, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, "another file: device"},
		{"written in place", func(t *testing.T, path string, offset int64) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt([]byte{1, 2, 3, 4, 5, 6, 7, 8}, offset)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			// The kernel stamps writes with a clock that ticks every few
			// ms: set the time a later write would have.
			later := time.Now().Add(time.Second)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}, "modified "},
		{"grown", func(t *testing.T, path string, _ int64) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Write(make([]byte, 8))
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
		}, " bytes, was "},
	}
	sources := []struct {
		name string
		// write writes a model whose initializer (returned) of 3 MiB is at
		// an offset not aligned for float32 in its file.
		write func(t *testing.T, dir string) (path, weight string)
	}{
		{"external data", func(t *testing.T, dir string) (string, string) {
			if err := os.WriteFile(filepath.Join(dir, "w.bin"), bytes.Repeat([]byte{0, 0, 0x80, 0x3f}, 3<<18+1), 0o644); err != nil {
				t.Fatal(err)
			}
			return externalModelDims(t, dir, []int64{3 << 18}, "location", "w.bin", "offset", "2", "length", "3145728"), "w"
		}},
		{"embedded", func(t *testing.T, dir string) (string, string) {
			for _, name := range []string{"w", "ww", "www", "wwww"} {
				path, _ := embeddedModel(t, dir, name, 3<<18)
				m, err := Load(path, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if m.Graph.Initializers[name].External.Offset%4 != 0 {
					return path, name
				}
			}
			t.Fatal("no name puts the weight at an unaligned offset")
			return "", ""
		}},
	}
	for _, src := range sources {
		for _, c := range changes {
			t.Run(src.name+"/"+c.name, func(t *testing.T) {
				path, name := src.write(t, t.TempDir())
				m, err := Load(path, Options{ReferenceWeights: true})
				if err != nil {
					t.Fatal(err)
				}
				w := m.Graph.Initializers[name]
				if !w.Released() {
					t.Fatalf("weight %q is not loaded by reference: %+v", name, w.External)
				}
				file := filepath.Join(w.External.Dir, w.External.Location)
				st, err := os.Stat(file)
				if err != nil {
					t.Fatal(err)
				}
				if w.External.File != identityOf(st) || !w.External.File.Known() || w.External.File.Ino == 0 {
					t.Fatalf("recorded identity %+v, the file's is %+v", w.External.File, identityOf(st))
				}
				data, dir, err := EncodeExternal(m)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(data, []byte(formatIdentity(w.External.File))) {
					t.Fatalf("EncodeExternal did not send %s", fileIdentityKey)
				}
				back, err := Decode(data, Options{BaseDir: dir})
				if err != nil {
					t.Fatalf("decoding the reference to the unchanged file: %v", err)
				}
				read, err := Load(path, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := back.Graph.Initializers[name], read.Graph.Initializers[name].Float32s(); got.External == nil || got.External.File != w.External.File || !slices.Equal(got.Float32s(), want) {
					t.Fatalf("decoded %+v, values equal %v", got.External, slices.Equal(got.Float32s(), want))
				}
				c.change(t, file, w.External.Offset)
				for what, open := range map[string]func() error{
					"Decode": func() error { _, err := Decode(data, Options{BaseDir: dir}); return err },
					"NewWeightStore": func() error {
						s, err := NewWeightStore(m)
						if err == nil {
							s.Close()
						}
						return err
					},
				} {
					err := open()
					if err == nil {
						t.Fatalf("%s after the file was %s: no error", what, c.name)
					}
					for _, part := range []string{`initializer "` + name + `"`, file, "changed since the model was loaded", c.want, "open a new session"} {
						if !strings.Contains(err.Error(), part) {
							t.Errorf("%s: error %q does not say %q", what, err, part)
						}
					}
				}
			})
		}
	}
}
