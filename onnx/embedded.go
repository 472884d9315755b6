package onnx

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/attnrun/attnrun/internal/regfile"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Weights embedded in the model file (raw_data, as PyTorch writes them) are
// treated as external data stored in the model file itself: Load rewrites
// each large initializer's raw_data into a reference (location: the model
// file's name, offset: where raw_data's bytes are in it), so that decoding
// maps those bytes from the file (mapExternal) instead of reading the file
// whole, copying the bytes out of the protobuf and converting them again;
// and the reference, not the bytes, is what EncodeExternal sends a backend,
// which maps the same file. A 340 MB model then costs the host a few MB of
// heap instead of ~1.6 GB, and the backend the packed weights instead of
// the packed weights plus three copies of the message.

// Field numbers of onnx.proto that referenceEmbedded reads and writes.
const (
	modelGraphField        = 7  // ModelProto.graph
	graphInitializerField  = 5  // GraphProto.initializer
	tensorRawDataField     = 9  // TensorProto.raw_data
	tensorExternalField    = 13 // TensorProto.external_data
	tensorDataLocField     = 14 // TensorProto.data_location
	stringStringKeyField   = 1  // StringStringEntryProto.key
	stringStringValueField = 2  // StringStringEntryProto.value
)

// embeddedMinBytes is the size from which an embedded initializer is
// referenced in place rather than decoded from the message: mapMinBytes,
// the size from which external data is mapped.
const embeddedMinBytes = mapMinBytes

// loadReferenced returns the model file at path serialized with its large
// embedded initializers rewritten as references to themselves (see above),
// for Decode. It returns ok false, and no error, when that does not apply
// (no initializer that large, the file cannot be mapped, or the path's
// directory is not where the file really is, so that a reference by name
// would not resolve): Load then reads the file as before.
func loadReferenced(path string) (_ []byte, ok bool, err error) {
	f, st, err := regfile.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if st.Size() > maxModelFileBytes {
		return nil, false, fmt.Errorf("%s is %d bytes, more than the %d this file may have", path, st.Size(), int64(maxModelFileBytes))
	}
	if st.Size() < embeddedMinBytes {
		return nil, false, nil
	}
	// A reference by the file's name must reach this very file from its
	// directory, as externalTensor resolves it (symbolic links included).
	dir, err := filepath.Abs(filepath.Dir(path))
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, false, nil
	}
	name := filepath.Base(path)
	real, err := os.Stat(filepath.Join(dir, name))
	if err != nil || !os.SameFile(real, st) {
		return nil, false, nil
	}
	if resolved, err := filepath.EvalSymlinks(filepath.Join(dir, name)); err != nil || filepath.Dir(resolved) != dir {
		return nil, false, nil
	}
	return scanMapped(f, st, path, filepath.ToSlash(name))
}

// scanMapped maps the model file f (st: its Stat) and rewrites it with
// referenceEmbedded (location: the file's name; the references carry the
// file's identity, which whoever opens it by path checks).
func scanMapped(f *os.File, st fs.FileInfo, path, location string) (_ []byte, ok bool, err error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, false, nil
	}
	defer unix.Munmap(mem)
	// A file cut short while it is scanned faults (SIGBUS) past its new
	// end: an error, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s changed while being read: %v", path, r)
		}
	}()
	// Only the message's structure is read: the pages of the weights are
	// skipped over, never touched.
	out, n := referenceEmbedded(mem, location, identityOf(st), embeddedMinBytes)
	if n == 0 {
		return nil, false, nil
	}
	return out, true, nil
}

// referenceEmbedded returns a copy of the serialized ModelProto data in
// which every top-level graph initializer with at least minBytes of
// raw_data is an external-data reference to location at raw_data's offset
// in data (carrying file, the identity of the file data is, when known),
// and how many it rewrote. Anything it does not expect (a second
// graph field, malformed wire data, an initializer already external) is
// left as it is, or the whole rewrite given up (n 0), for Decode to judge.
func referenceEmbedded(data []byte, location string, file ir.FileIdentity, minBytes int) (out []byte, n int) {
	out = make([]byte, 0, 1<<16)
	graphs := 0
	for off := 0; off < len(data); {
		num, typ, tagLen := protowire.ConsumeTag(data[off:])
		if tagLen < 0 {
			return nil, 0
		}
		valLen := protowire.ConsumeFieldValue(num, typ, data[off+tagLen:])
		if valLen < 0 {
			return nil, 0
		}
		if num != modelGraphField || typ != protowire.BytesType {
			out = append(out, data[off:off+tagLen+valLen]...)
			off += tagLen + valLen
			continue
		}
		graphs++
		g, gStart := bytesValue(data, off+tagLen)
		if g == nil || graphs > 1 {
			return nil, 0
		}
		gOut, k := referenceGraph(data, gStart, len(g), location, file, minBytes)
		if gOut == nil {
			return nil, 0
		}
		out = protowire.AppendTag(out, modelGraphField, protowire.BytesType)
		out = protowire.AppendBytes(out, gOut)
		n += k
		off += tagLen + valLen
	}
	return out, n
}

// bytesValue returns the bytes of the length-delimited value at data[at:]
// and where they start in data; nil when malformed.
func bytesValue(data []byte, at int) ([]byte, int) {
	v, l := protowire.ConsumeBytes(data[at:])
	if l < 0 {
		return nil, 0
	}
	return v, at + l - len(v)
}

// referenceGraph rewrites the GraphProto at data[start:start+size].
func referenceGraph(data []byte, start, size int, location string, file ir.FileIdentity, minBytes int) ([]byte, int) {
	out := make([]byte, 0, 1<<12)
	n := 0
	for off := start; off < start+size; {
		num, typ, tagLen := protowire.ConsumeTag(data[off : start+size])
		if tagLen < 0 {
			return nil, 0
		}
		valLen := protowire.ConsumeFieldValue(num, typ, data[off+tagLen:start+size])
		if valLen < 0 {
			return nil, 0
		}
		field := data[off : off+tagLen+valLen]
		off += tagLen + valLen
		if num != graphInitializerField || typ != protowire.BytesType {
			out = append(out, field...)
			continue
		}
		t, tStart := bytesValue(data, off-valLen)
		if t == nil {
			return nil, 0
		}
		tOut, ok := referenceTensor(t, int64(tStart), location, file, minBytes)
		if !ok {
			out = append(out, field...)
			continue
		}
		out = protowire.AppendTag(out, graphInitializerField, protowire.BytesType)
		out = protowire.AppendBytes(out, tOut)
		n++
	}
	return out, n
}

// referenceTensor rewrites a TensorProto whose bytes t start at offset
// base of the file: its raw_data, when of minBytes or more, becomes a
// reference. ok is
// false when the tensor is left as it is.
func referenceTensor(t []byte, base int64, location string, file ir.FileIdentity, minBytes int) ([]byte, bool) {
	rawAt, rawLen, raws := -1, 0, 0
	for off := 0; off < len(t); {
		num, typ, tagLen := protowire.ConsumeTag(t[off:])
		if tagLen < 0 {
			return nil, false
		}
		valLen := protowire.ConsumeFieldValue(num, typ, t[off+tagLen:])
		if valLen < 0 {
			return nil, false
		}
		switch num {
		case tensorExternalField, tensorDataLocField:
			return nil, false // already external (or about to be judged so)
		case tensorRawDataField:
			if typ != protowire.BytesType {
				return nil, false
			}
			v, at := bytesValue(t, off+tagLen)
			if v == nil {
				return nil, false
			}
			rawAt, rawLen = at, len(v)
			raws++
		}
		off += tagLen + valLen
	}
	if raws != 1 || rawLen < minBytes {
		return nil, false
	}
	out := make([]byte, 0, 256)
	for off := 0; off < len(t); {
		num, typ, tagLen := protowire.ConsumeTag(t[off:])
		valLen := protowire.ConsumeFieldValue(num, typ, t[off+tagLen:])
		if num != tensorRawDataField {
			out = append(out, t[off:off+tagLen+valLen]...)
		}
		off += tagLen + valLen
	}
	// Only a tensor whose raw_data is exactly what its dims and type need
	// becomes a reference: any other is decoded as it is, so that its error
	// speaks of raw_data, not of external data the model does not have.
	var tp onnxpb.TensorProto
	if err := proto.Unmarshal(out, &tp); err != nil || !rawDataFits(&tp, rawLen) {
		return nil, false
	}
	entries := [][2]string{{"location", location}, {"offset", strconv.FormatInt(base+int64(rawAt), 10)}, {"length", strconv.Itoa(rawLen)}}
	if file.Known() {
		entries = append(entries, [2]string{fileIdentityKey, formatIdentity(file)})
	}
	for _, kv := range entries {
		var e []byte
		e = protowire.AppendTag(e, stringStringKeyField, protowire.BytesType)
		e = protowire.AppendString(e, kv[0])
		e = protowire.AppendTag(e, stringStringValueField, protowire.BytesType)
		e = protowire.AppendString(e, kv[1])
		out = protowire.AppendTag(out, tensorExternalField, protowire.BytesType)
		out = protowire.AppendBytes(out, e)
	}
	out = protowire.AppendTag(out, tensorDataLocField, protowire.VarintType)
	out = protowire.AppendVarint(out, 1) // DataLocation EXTERNAL
	return out, true
}

// rawDataFits reports whether n bytes of raw_data are exactly what the
// tensor's dims and (fixed-size, non-string) type need.
func rawDataFits(tp *onnxpb.TensorProto, n int) bool {
	dt := ir.DType(tp.GetDataType())
	if !dt.Known() || dt == ir.String || dt.Narrow() || dt.Size() <= 0 || tp.Segment != nil {
		return false
	}
	elems := int64(1)
	for _, d := range tp.Dims {
		if d < 0 || (d != 0 && elems > int64(n)/d) {
			return false
		}
		elems *= d
	}
	need, _, ok := needBytes(elems, dt.Size())
	return ok && need == int64(n)
}
