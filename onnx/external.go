package onnx

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/attnrun/attnrun/internal/regfile"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// External data: a TensorProto whose bytes live in a file next to the
// model (data_location EXTERNAL, with location, offset and length). Large
// ones are memory-mapped instead of read (mapExternal), and every external
// tensor remembers where its bytes are (ir.Tensor.External), so that
// EncodeExternal can send a backend the reference instead of the bytes.

// externalTensor makes a tensor of need bytes stored outside the model
// file. The location must be a relative path that stays inside
// opts.BaseDir once cleaned and once symlinks are resolved, and name a
// regular file.
func externalTensor(tp *onnxpb.TensorProto, opts Options, dt ir.DType, shape []int, need int64) (*ir.Tensor, error) {
	var loc string
	offset, length := int64(0), int64(-1)
	var want ir.FileIdentity // recorded by whoever loaded the model first
	for _, kv := range tp.ExternalData {
		switch kv.GetKey() {
		case "location":
			loc = kv.GetValue()
		case fileIdentityKey:
			id, err := parseIdentity(kv.GetValue())
			if err != nil {
				return nil, err
			}
			want = id
		case "offset", "length":
			v, err := strconv.ParseInt(kv.GetValue(), 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("external data %s %q is not a non-negative integer", kv.GetKey(), kv.GetValue())
			}
			if kv.GetKey() == "offset" {
				offset = v
			} else {
				length = v
			}
		}
	}
	if loc == "" {
		return nil, fmt.Errorf("external data has no location")
	}
	if opts.BaseDir == "" {
		return nil, fmt.Errorf("external data %q: no base directory to resolve it in (use Load or set Options.BaseDir)", loc)
	}
	p := filepath.FromSlash(loc)
	if filepath.IsAbs(p) || strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, `\`) || filepath.VolumeName(p) != "" {
		return nil, fmt.Errorf("external data location %q is an absolute path; it must be relative to the model's directory", loc)
	}
	clean := filepath.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("external data location %q escapes the model's directory", loc)
	}
	base, err := filepath.Abs(opts.BaseDir)
	if err == nil {
		base, err = filepath.EvalSymlinks(base)
	}
	if err != nil {
		return nil, fmt.Errorf("external data %q: model directory: %v", loc, err)
	}
	full, err := filepath.EvalSymlinks(filepath.Join(base, clean))
	if err != nil {
		return nil, fmt.Errorf("external data %q: %v", loc, err)
	}
	rel, err := filepath.Rel(base, full)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("external data location %q escapes the model's directory (through a symbolic link)", loc)
	}
	// Checked to be a regular file before it is opened, and opened
	// non-blocking: a FIFO or a device never blocks loading.
	label := fmt.Sprintf("external data %q", loc)
	if st, err := os.Stat(full); err != nil {
		return nil, fmt.Errorf("%s: %v", label, err)
	} else if err := regfile.Check(label, st); err != nil {
		return nil, err
	}
	f, st, err := regfile.OpenNoFollow(full)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", label, err)
	}
	defer f.Close()
	// The file must be the one the reference was made from, and within
	// one decode, the one its other tensors came from.
	if !want.Known() && opts.files != nil {
		want = opts.files[full]
	}
	if err := checkIdentity(full, want, st); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	id := identityOf(st)
	if opts.files != nil {
		opts.files[full] = id
	}
	size := st.Size()
	if offset > size {
		return nil, fmt.Errorf("external data %q: offset %d is past the end of the file (%d bytes)", loc, offset, size)
	}
	if length >= 0 {
		if length > size-offset {
			return nil, fmt.Errorf("external data %q: offset %d + length %d is past the end of the file (%d bytes)", loc, offset, length, size)
		}
		if length != need {
			return nil, fmt.Errorf("dims %v of %v need %d bytes, external data %q has length %d", tp.Dims, ir.DType(tp.GetDataType()), need, loc, length)
		}
	} else if need > size-offset {
		return nil, fmt.Errorf("dims %v of %v need %d bytes, external data %q has %d bytes from offset %d", tp.Dims, ir.DType(tp.GetDataType()), need, loc, size-offset, offset)
	}
	ext := &ir.ExternalData{Dir: base, Location: filepath.ToSlash(clean), Offset: offset, Length: need, File: id}
	if need >= mapMinBytes {
		if data, ok := mapExternal(f, dt, offset, need); ok {
			ext.Mapped = true
			return &ir.Tensor{DType: dt, Shape: shape, Data: data, External: ext}, nil
		}
		if opts.ReferenceWeights && dt == ir.Float && ir.NativeLittleEndian {
			// Left in the file: a WeightStore reads it when it is read.
			return &ir.Tensor{DType: dt, Shape: shape, External: ext}, nil
		}
	}
	// Read straight into the tensor's memory when its bytes are its
	// storage (a little-endian machine): one copy, not a buffer and a
	// conversion. Weights embedded at unaligned offsets (most of PyTorch's)
	// come this way.
	if n := need / int64(max(dt.Size(), 1)); ir.NativeLittleEndian && dt != ir.Bool && dt != ir.String && !dt.Narrow() && n*int64(dt.Size()) == need && need <= math.MaxInt {
		if data := ir.MakeSlice(dt, int(n)); data != nil {
			if buf := ir.BytesOf(data); int64(len(buf)) == need {
				if _, err := f.ReadAt(buf, offset); err != nil && !(err == io.EOF && need == 0) {
					return nil, fmt.Errorf("external data %q: %v", loc, err)
				}
				return &ir.Tensor{DType: dt, Shape: shape, Data: data, External: ext}, nil
			}
		}
	}
	buf := make([]byte, need)
	if _, err := f.ReadAt(buf, offset); err != nil && !(err == io.EOF && need == 0) {
		return nil, fmt.Errorf("external data %q: %v", loc, err)
	}
	t := fromRaw(dt, shape, buf)
	t.External = ext
	return t, nil
}

// mapMinBytes is the size from which external data is memory-mapped
// rather than read.
const mapMinBytes = 1 << 20

// mapExternal maps need bytes of f at offset as a dt backing slice:
// private (a write would copy the page, never reach the file) and lazy (the
// pages are read from the file when first touched, and being clean, the
// system can drop them again under memory pressure), so that a process
// holding several GiB of weights it does not touch stays small. It fails
// (ok false) when the bytes cannot be used in place: unaligned for dt,
// bools, a big-endian machine, or no mmap. The mapping lives as long as the
// process: a tensor's data has no owner that knows when it is dropped.
func mapExternal(f *os.File, dt ir.DType, offset, need int64) (any, bool) {
	if !ir.NativeLittleEndian || dt == ir.Bool || offset%int64(max(dt.Size(), 1)) != 0 || need > math.MaxInt {
		return nil, false
	}
	page := int64(os.Getpagesize())
	start := offset &^ (page - 1)
	delta := offset - start
	if delta+need > math.MaxInt {
		return nil, false
	}
	mem, err := unix.Mmap(int(f.Fd()), start, int(delta+need), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		return nil, false
	}
	data, ok := ir.AliasBytes(dt, mem[delta:delta+need:delta+need], int(need/int64(dt.Size())))
	if !ok {
		_ = unix.Munmap(mem)
		return nil, false
	}
	return data, true
}

// readExternal returns the need bytes of a tensor stored outside the model
// file, checked as externalTensor checks them: for the narrow types, whose
// packed bytes narrowFromProto unpacks into a tensor of its own.
func readExternal(tp *onnxpb.TensorProto, opts Options, need int64) ([]byte, error) {
	t, err := externalTensor(tp, opts, ir.Uint8, []int{int(need)}, need)
	if err != nil {
		return nil, err
	}
	return t.Data.([]uint8), nil
}
