package oip

import (
	"math"
	"strconv"

	"github.com/attnrun/attnrun/ir"
)

// ParseJSONData decodes the "data" member of a JSON tensor into a new
// tensor of the given type and shape (checked by Shape first). The protocol
// allows the elements as one flat array in row-major order, or as arrays
// nested exactly as the shape; a rank-0 tensor may also be a bare value.
// Numbers must fit the datatype exactly (an INT64 element may not be 1.5);
// floats also take NaN, Infinity and -Infinity as Python's json writes them.
func ParseJSONData(dt ir.DType, shape []int, data []byte) (*ir.Tensor, error) {
	t := ir.NewTensor(dt, shape)
	p := &dataParser{b: data, t: t, shape: shape}
	p.space()
	var err error
	switch {
	case p.i >= len(p.b):
		err = p.errorf("no data")
	case p.b[p.i] != '[':
		if len(shape) != 0 {
			err = p.errorf("data must be an array for shape %v", shape)
		} else {
			err = p.element()
		}
	case p.peekNested():
		err = p.nested(0)
	default:
		err = p.flat()
	}
	if err == nil {
		if p.space(); p.i < len(p.b) {
			err = p.errorf("unexpected %q after the data", clip(p.b[p.i:]))
		}
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// dataParser reads JSON tensor data straight into a tensor's backing slice,
// without building a generic JSON tree.
type dataParser struct {
	b     []byte
	i     int // read position in b
	t     *ir.Tensor
	shape []int
	n     int // elements written
}

func (p *dataParser) errorf(format string, args ...any) error {
	return Errorf(InvalidArgument, "data: "+format, args...)
}

func (p *dataParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peekNested reports whether the array at p.i starts with another array.
func (p *dataParser) peekNested() bool {
	j := p.i + 1
	for j < len(p.b) && (p.b[j] == ' ' || p.b[j] == '\t' || p.b[j] == '\n' || p.b[j] == '\r') {
		j++
	}
	return j < len(p.b) && p.b[j] == '['
}

// open consumes '[' and reports whether the array is empty (consuming ']').
func (p *dataParser) open() (empty bool, err error) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		return false, p.errorf("expected an array at offset %d", p.i)
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return true, nil
	}
	return false, nil
}

// next consumes the ',' or ']' after an item and reports whether the array
// goes on.
func (p *dataParser) next() (more bool, err error) {
	p.space()
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case ',':
			p.i++
			return true, nil
		case ']':
			p.i++
			return false, nil
		}
	}
	return false, p.errorf("expected ',' or ']' at offset %d", p.i)
}

// flat reads a one-dimensional array of all the tensor's elements.
func (p *dataParser) flat() error {
	empty, err := p.open()
	for more := !empty; err == nil && more; more, err = p.next() {
		if err = p.element(); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if p.n != p.t.Len() {
		return p.errorf("%d elements for shape %v, which has %d", p.n, p.shape, p.t.Len())
	}
	return nil
}

// nested reads an array nested as shape[d:].
func (p *dataParser) nested(d int) error {
	if d == len(p.shape) {
		return p.element()
	}
	empty, err := p.open()
	if err != nil {
		return err
	}
	items := 0
	for more := !empty; more; {
		if items == p.shape[d] {
			return p.errorf("nested data has more than %d items at depth %d, for shape %v", p.shape[d], d, p.shape)
		}
		if err := p.nested(d + 1); err != nil {
			return err
		}
		items++
		if more, err = p.next(); err != nil {
			return err
		}
	}
	if items != p.shape[d] {
		return p.errorf("nested data has %d items at depth %d, but shape %v has %d", items, d, p.shape, p.shape[d])
	}
	return nil
}

// element reads one scalar into the next slot of the tensor.
func (p *dataParser) element() error {
	p.space()
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == ',' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '[' {
			break
		}
		p.i++
	}
	tok := p.b[start:p.i]
	if len(tok) == 0 {
		return p.errorf("element %d: missing value at offset %d", p.n, start)
	}
	if p.n >= p.t.Len() {
		return p.errorf("more elements than shape %v has (%d)", p.shape, p.t.Len())
	}
	if err := p.set(tok); err != nil {
		return p.errorf("element %d: %v", p.n, err)
	}
	p.n++
	return nil
}

// set parses tok as the tensor's element type and stores it at p.n.
func (p *dataParser) set(tok []byte) error {
	dt := p.t.DType
	if dt == ir.Bool {
		switch string(tok) {
		case "true":
			p.t.Data.([]bool)[p.n] = true
		case "false":
			p.t.Data.([]bool)[p.n] = false
		default:
			return Errorf(InvalidArgument, "%q is not a BOOL (true or false)", clip(tok))
		}
		return nil
	}
	if dt.IsFloat() {
		f, err := parseFloat(tok, dt)
		if err != nil {
			return err
		}
		switch d := p.t.Data.(type) {
		case []float32:
			d[p.n] = float32(f)
		case []float64:
			d[p.n] = f
		case []uint16:
			if dt == ir.Float16 {
				d[p.n] = ir.Float32ToFloat16(float32(f))
			} else {
				d[p.n] = ir.Float32ToBFloat16(float32(f))
			}
		}
		return nil
	}
	if !isJSONInt(tok) {
		return Errorf(InvalidArgument, "%q is not an integer, as %s needs", clip(tok), Datatype(dt))
	}
	bits := dt.Size() * 8
	if tok[0] == '-' || isSigned(dt) {
		v, err := strconv.ParseInt(string(tok), 10, bits)
		if err != nil || (v < 0 && !isSigned(dt)) {
			return Errorf(InvalidArgument, "%s is out of range for %s", clip(tok), Datatype(dt))
		}
		setInt(p.t.Data, p.n, v)
		return nil
	}
	v, err := strconv.ParseUint(string(tok), 10, bits)
	if err != nil {
		return Errorf(InvalidArgument, "%s is out of range for %s", clip(tok), Datatype(dt))
	}
	setUint(p.t.Data, p.n, v)
	return nil
}

func isSigned(dt ir.DType) bool {
	return dt == ir.Int8 || dt == ir.Int16 || dt == ir.Int32 || dt == ir.Int64
}

func setInt(data any, i int, v int64) {
	switch d := data.(type) {
	case []int8:
		d[i] = int8(v)
	case []int16:
		d[i] = int16(v)
	case []int32:
		d[i] = int32(v)
	case []int64:
		d[i] = v
	}
}

func setUint(data any, i int, v uint64) {
	switch d := data.(type) {
	case []uint8:
		d[i] = uint8(v)
	case []uint16:
		d[i] = uint16(v)
	case []uint32:
		d[i] = uint32(v)
	case []uint64:
		d[i] = v
	}
}

// parseFloat parses a JSON number (or NaN, Infinity, -Infinity) that must
// be finite in dt unless written as an infinity.
func parseFloat(tok []byte, dt ir.DType) (float64, error) {
	switch string(tok) {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	if !isJSONNumber(tok) {
		return 0, Errorf(InvalidArgument, "%q is not a number, as %s needs", clip(tok), Datatype(dt))
	}
	bits := 32
	if dt == ir.Double {
		bits = 64
	}
	f, err := strconv.ParseFloat(string(tok), bits)
	if err != nil || (dt == ir.Float16 && math.Abs(f) > 65504) {
		return 0, Errorf(InvalidArgument, "%s is out of range for %s", clip(tok), Datatype(dt))
	}
	return f, nil
}

// isJSONInt reports whether tok is a JSON integer: -?(0|[1-9][0-9]*).
func isJSONInt(tok []byte) bool {
	if len(tok) > 0 && tok[0] == '-' {
		tok = tok[1:]
	}
	if len(tok) == 0 || (tok[0] == '0' && len(tok) > 1) {
		return false
	}
	for _, c := range tok {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isJSONNumber reports whether tok is a JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func isJSONNumber(tok []byte) bool {
	i := 0
	digits := func() int {
		s := i
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
		return i - s
	}
	if i < len(tok) && tok[i] == '-' {
		i++
	}
	start := i
	if n := digits(); n == 0 || (n > 1 && tok[start] == '0') {
		return false
	}
	if i < len(tok) && tok[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(tok)
}

// clip shortens a token for an error message.
func clip(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "…"
	}
	return string(b)
}

// AppendJSONData appends a tensor's elements to dst as one flat JSON array
// (row-major). Floats are written in their shortest exact form; NaN and the
// infinities as NaN, Infinity and -Infinity, as Python's json writes them
// (clients with strict JSON parsers should ask for binary outputs). FP16
// and BF16 are written as the numbers they hold.
func AppendJSONData(dst []byte, t *ir.Tensor) []byte {
	dst = append(dst, '[')
	n := t.Len()
	for i := 0; i < n; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendElement(dst, t, i)
	}
	return append(dst, ']')
}

func appendElement(dst []byte, t *ir.Tensor, i int) []byte {
	switch d := t.Data.(type) {
	case []float32:
		return appendFloat(dst, float64(d[i]), 32)
	case []float64:
		return appendFloat(dst, d[i], 64)
	case []uint16:
		switch t.DType {
		case ir.Float16:
			return appendFloat(dst, float64(ir.Float16ToFloat32(d[i])), 32)
		case ir.BFloat16:
			return appendFloat(dst, float64(ir.BFloat16ToFloat32(d[i])), 32)
		}
		return strconv.AppendUint(dst, uint64(d[i]), 10)
	case []bool:
		return strconv.AppendBool(dst, d[i])
	case []int8:
		return strconv.AppendInt(dst, int64(d[i]), 10)
	case []int16:
		return strconv.AppendInt(dst, int64(d[i]), 10)
	case []int32:
		return strconv.AppendInt(dst, int64(d[i]), 10)
	case []int64:
		return strconv.AppendInt(dst, d[i], 10)
	case []uint8:
		return strconv.AppendUint(dst, uint64(d[i]), 10)
	case []uint32:
		return strconv.AppendUint(dst, uint64(d[i]), 10)
	case []uint64:
		return strconv.AppendUint(dst, d[i], 10)
	}
	return dst
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}
