// Package npy reads and writes NumPy .npy files as ir.Tensors, the format
// attnrun uses for user-facing tensors. The reader validates everything a
// file declares before using it (header.go): a malformed or lying header is
// an error naming what is wrong, never a panic or a huge allocation, and the
// file must hold exactly the data its header declares.
package npy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/attnrun/attnrun/internal/regfile"
	"github.com/attnrun/attnrun/ir"
)

var descrs = map[string]ir.DType{
	"<f4": ir.Float, "<f8": ir.Double, "<f2": ir.Float16,
	"<i8": ir.Int64, "<i4": ir.Int32, "<i2": ir.Int16, "|i1": ir.Int8,
	"|u1": ir.Uint8, "<u2": ir.Uint16, "<u4": ir.Uint32, "<u8": ir.Uint64,
	"|b1": ir.Bool,
}

func descrOf(dt ir.DType) (string, error) {
	for d, t := range descrs {
		if t == dt {
			return d, nil
		}
	}
	return "", fmt.Errorf("dtype %v cannot be written as .npy", dt)
}

// dtypeOf maps a header's descr to an element type. One-byte types may
// carry any byte-order mark; '=' (native) means little-endian here, the
// only byte order attnrun runs on.
func dtypeOf(descr string) (ir.DType, error) {
	d := descr
	if len(d) == 3 && d[0] == '=' {
		d = "<" + d[1:]
	}
	if len(d) == 3 && (d[2] == '1') && (d[0] == '<' || d[0] == '>' || d[0] == '=') {
		d = "|" + d[1:]
	}
	if dt, ok := descrs[d]; ok {
		return dt, nil
	}
	return ir.Undefined, fmt.Errorf("unsupported .npy dtype %q (big-endian, complex, object, string and structured arrays are not supported)", descr)
}

// ReadFile reads a .npy file into a tensor. The path must name a regular
// file (a FIFO or device is refused without blocking, see package regfile).
func ReadFile(path string) (*ir.Tensor, error) {
	f, st, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := Read(bufio.NewReaderSize(f, 1<<16), st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// magic starts every .npy file.
const magic = "\x93NUMPY"

// Read decodes a .npy stream of the given total size in bytes, or of
// unknown size when size < 0. The stream must hold exactly one array:
// bytes after the data are an error, as is a header declaring more data
// than the stream holds (checked before allocating when size is known).
func Read(r io.Reader, size int64) (*ir.Tensor, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("not a .npy file: %d bytes, too short for the magic string", max(size, 0))
	}
	if string(pre[:6]) != magic {
		return nil, fmt.Errorf("not a .npy file: it does not start with %q", magic)
	}
	major, minor := pre[6], pre[7]
	lenBytes := 4
	switch {
	case major == 1 && minor == 0:
		lenBytes = 2
	case (major == 2 || major == 3) && minor == 0:
	default:
		return nil, fmt.Errorf("unsupported .npy format version %d.%d (attnrun reads 1.0, 2.0 and 3.0)", major, minor)
	}
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:lenBytes]); err != nil {
		return nil, errors.New("truncated .npy file: it ends inside the header length")
	}
	hlen := int64(binary.LittleEndian.Uint32(lb[:]))
	prefix := int64(8 + lenBytes)
	if hlen > maxHeaderBytes {
		return nil, fmt.Errorf("the .npy header declares %d bytes, more than the %d attnrun reads", hlen, maxHeaderBytes)
	}
	if size >= 0 && hlen > size-prefix {
		return nil, fmt.Errorf("truncated .npy file: the header declares %d bytes, the file has %d after the magic string", hlen, size-prefix)
	}
	raw := make([]byte, hlen)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("truncated .npy file: the header declares %d bytes", hlen)
	}
	text := string(raw)
	if !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("malformed header %s: it does not end with a newline", quoteShort(text))
	}
	if major == 3 && !utf8.ValidString(text) {
		return nil, errors.New("malformed header: a version 3.0 header must be UTF-8")
	}
	h, err := parseHeader(strings.TrimRight(text, " \n"))
	if err != nil {
		return nil, err
	}
	if h.fortran {
		return nil, errors.New("arrays in Fortran order are not supported; save with np.ascontiguousarray")
	}
	dt, err := dtypeOf(h.descr)
	if err != nil {
		return nil, err
	}
	n := ir.NumElements(h.shape)
	es := int64(dt.Size())
	if n < 0 || n > (1<<62)/es {
		return nil, fmt.Errorf("shape %v is too large", h.shape)
	}
	need := n * es
	if size >= 0 {
		have := size - prefix - hlen
		switch {
		case have < need:
			return nil, fmt.Errorf("header declares shape %v (%d bytes of %v) but the file has only %d bytes of data", h.shape, need, dt, have)
		case have > need:
			return nil, fmt.Errorf("%d trailing bytes after the %d bytes of data that shape %v of %v needs", have-need, need, h.shape, dt)
		}
	}
	t := &ir.Tensor{DType: dt, Shape: h.shape}
	if t.Data, err = readData(r, dt, n, need, size >= 0); err != nil {
		return nil, fmt.Errorf("reading %v data of shape %v: %w", dt, h.shape, err)
	}
	return t, t.Check()
}

// readData reads the n elements (need bytes) of the array and checks that
// nothing follows. With sized, the stream's size was checked against need
// already, so the slice is allocated up front; otherwise the bytes are read
// first, so that a lying header cannot make it allocate more than the
// stream holds.
func readData(r io.Reader, dt ir.DType, n, need int64, sized bool) (any, error) {
	var data any
	if sized {
		data = ir.MakeSlice(dt, int(n))
		if _, err := io.ReadFull(r, ir.BytesOf(data)); err != nil {
			return nil, fmt.Errorf("the file ends early: %w", err)
		}
	} else {
		raw, err := io.ReadAll(io.LimitReader(r, need))
		if err != nil {
			return nil, err
		}
		if int64(len(raw)) < need {
			return nil, fmt.Errorf("the stream ends after %d of %d bytes", len(raw), need)
		}
		data = ir.MakeSlice(dt, int(n))
		copy(ir.BytesOf(data), raw)
	}
	var one [1]byte
	if k, _ := io.ReadFull(r, one[:]); k > 0 {
		return nil, fmt.Errorf("trailing bytes after the %d bytes of data", need)
	}
	if !ir.NativeLittleEndian && dt.Size() > 1 {
		swapInPlace(ir.BytesOf(data), dt.Size())
	}
	if b, ok := data.([]bool); ok {
		// A Go bool must be 0 or 1; NumPy writes 0 and 1, anything else
		// is true.
		for i, v := range ir.BytesOf(b) {
			if v > 1 {
				b[i] = true
			}
		}
	}
	return data, nil
}

// swapInPlace reverses the bytes of each size-byte element.
func swapInPlace(raw []byte, size int) {
	for i := 0; i+size <= len(raw); i += size {
		for a, b := i, i+size-1; a < b; a, b = a+1, b-1 {
			raw[a], raw[b] = raw[b], raw[a]
		}
	}
}

// WriteFile writes t as a version 1.0 .npy file.
func WriteFile(path string, t *ir.Tensor) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := Write(w, t); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Write encodes t in .npy format (C order, little-endian).
func Write(w io.Writer, t *ir.Tensor) error {
	if err := t.Check(); err != nil {
		return err
	}
	descr, err := descrOf(t.DType)
	if err != nil {
		return err
	}
	var shape string
	switch len(t.Shape) {
	case 0:
		shape = "()"
	case 1:
		shape = fmt.Sprintf("(%d,)", t.Shape[0])
	default:
		parts := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			parts[i] = fmt.Sprint(d)
		}
		shape = "(" + strings.Join(parts, ", ") + ")"
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape)
	// magic(6) + version(2) + header length(2) + header + padding + '\n' is a multiple of 64.
	total := 10 + len(header) + 1
	pad := (64 - total%64) % 64
	header += strings.Repeat(" ", pad) + "\n"
	if _, err := w.Write([]byte("\x93NUMPY\x01\x00")); err != nil {
		return err
	}
	if err := binary.Write(w, binary.LittleEndian, uint16(len(header))); err != nil {
		return err
	}
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	return binary.Write(w, binary.LittleEndian, t.Data)
}
