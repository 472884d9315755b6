// Package npy reads and writes NumPy .npy files as ir.Tensors, the format
// attnrun uses for user-facing tensors. Reading goes through
// github.com/sbinet/npyio, after checking the header's declared size
// against the file so that a lying header cannot trigger a huge allocation.
package npy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sbinet/npyio"

	"github.com/attnrun/attnrun/ir"
)

var descrs = map[string]ir.DType{
	"<f4": ir.Float, "<f8": ir.Double,
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

// ReadFile reads a .npy file into a tensor.
func ReadFile(path string) (*ir.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	t, err := Read(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Read decodes a .npy stream of the given total size (used to reject
// headers that declare more data than the stream holds).
func Read(r io.Reader, size int64) (*ir.Tensor, error) {
	rd, err := npyio.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not a .npy file: %w", err)
	}
	h := rd.Header
	if h.Descr.Fortran {
		return nil, fmt.Errorf("Fortran-order arrays are not supported; save with np.ascontiguousarray")
	}
	typ := h.Descr.Type
	if typ == "<b1" || typ == ">b1" {
		typ = "|b1"
	}
	if typ == "<i1" {
		typ = "|i1"
	}
	if typ == "<u1" {
		typ = "|u1"
	}
	dt, ok := descrs[typ]
	if !ok {
		return nil, fmt.Errorf("unsupported .npy dtype %q (big-endian, complex, object and string arrays are not supported)", h.Descr.Type)
	}
	shape := append([]int{}, h.Descr.Shape...)
	n := ir.NumElements(shape)
	if n < 0 {
		return nil, fmt.Errorf("invalid shape %v", shape)
	}
	if size >= 0 && n*int64(dt.Size()) > size {
		return nil, fmt.Errorf("header declares shape %v (%d bytes of %v) but the file has only %d bytes", shape, n*int64(dt.Size()), dt, size)
	}
	t := &ir.Tensor{DType: dt, Shape: shape}
	if dt == ir.Float16 {
		return nil, fmt.Errorf("float16 .npy files are not supported; save as float32")
	}
	ptr := ir.MakeSlice(dt, int(n))
	if n > 0 {
		if err := readInto(rd, dt, &ptr); err != nil {
			return nil, fmt.Errorf("reading %v data of shape %v: %w", dt, shape, err)
		}
	}
	t.Data = ptr
	return t, t.Check()
}

func readInto(rd *npyio.Reader, dt ir.DType, data *any) error {
	switch s := (*data).(type) {
	case []float32:
		return rd.Read(&s)
	case []float64:
		return rd.Read(&s)
	case []int64:
		return rd.Read(&s)
	case []int32:
		return rd.Read(&s)
	case []int16:
		return rd.Read(&s)
	case []int8:
		return rd.Read(&s)
	case []uint8:
		return rd.Read(&s)
	case []uint16:
		return rd.Read(&s)
	case []uint32:
		return rd.Read(&s)
	case []uint64:
		return rd.Read(&s)
	case []bool:
		return rd.Read(&s)
	}
	return fmt.Errorf("unsupported dtype %v", dt)
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
