package npy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The .npy header (NumPy's format.py, versions 1.0 to 3.0):
//
//	"\x93NUMPY" major minor       6 + 2 bytes
//	header length                 uint16 (1.x) or uint32 (2.x, 3.x), little-endian
//	header                        a Python dict literal, padded with spaces, ending in '\n':
//	                              {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//
// The header is parsed here by a strict tokenizer that accepts exactly the
// literal NumPy writes (and what a hand-written one may vary: quotes, spaces,
// key order, trailing commas, Python 2 long suffixes), with every count and
// size checked before use. Nothing in a malformed header can make the reader
// panic or allocate more than the header's own bytes.

// maxHeaderBytes bounds the header length a file may declare. NumPy itself
// refuses headers above 10000 bytes unless told otherwise
// (max_header_size); a header that only describes an array needs ~100.
const maxHeaderBytes = 1 << 16

// maxRank bounds the number of dims (NumPy's own limit is 64).
const maxRank = 64

// header is a parsed .npy header.
type header struct {
	descr   string
	fortran bool
	shape   []int
}

// parseHeader parses the dict literal of a .npy header (without the
// trailing newline and padding, which the caller checked).
func parseHeader(s string) (header, error) {
	p := &dictParser{s: s}
	h, err := p.dict()
	if err != nil {
		return header{}, fmt.Errorf("malformed header %s: %w", quoteShort(s), err)
	}
	return h, nil
}

// quoteShort quotes a header for an error message, eliding its middle when
// it is long.
func quoteShort(s string) string {
	const keep = 60
	if len(s) <= 2*keep {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:keep]) + fmt.Sprintf(" … (%d bytes) … ", len(s)-2*keep) + strconv.Quote(s[len(s)-keep:])
}

type dictParser struct {
	s   string
	pos int
}

func (p *dictParser) skipSpace() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

// peek returns the next non-space byte (0 at the end).
func (p *dictParser) peek() byte {
	p.skipSpace()
	if p.pos >= len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

func (p *dictParser) expect(c byte) error {
	if got := p.peek(); got != c {
		if got == 0 {
			return fmt.Errorf("expected %q at byte %d, found the end", c, p.pos)
		}
		return fmt.Errorf("expected %q at byte %d, found %q", c, p.pos, got)
	}
	p.pos++
	return nil
}

// str reads a quoted string without escapes (none of the three values
// NumPy writes has any).
func (p *dictParser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", fmt.Errorf("expected a quoted string at byte %d", p.pos)
	}
	end := strings.IndexByte(p.s[p.pos+1:], q)
	if end < 0 {
		return "", fmt.Errorf("unterminated string at byte %d", p.pos)
	}
	v := p.s[p.pos+1 : p.pos+1+end]
	if strings.ContainsRune(v, '\\') {
		return "", fmt.Errorf("escape sequences are not supported (string at byte %d)", p.pos)
	}
	p.pos += end + 2
	return v, nil
}

// word reads an identifier or number token.
func (p *dictParser) word() string {
	p.skipSpace()
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '+' {
			p.pos++
			continue
		}
		break
	}
	return p.s[start:p.pos]
}

func (p *dictParser) boolean() (bool, error) {
	switch w := p.word(); w {
	case "True":
		return true, nil
	case "False":
		return false, nil
	default:
		return false, fmt.Errorf("fortran_order is %q, want True or False", w)
	}
}

// shape reads a tuple of non-negative ints: (), (3,), (2, 3), (2, 3,).
func (p *dictParser) shape() ([]int, error) {
	if err := p.expect('('); err != nil {
		return nil, err
	}
	shape := []int{}
	for {
		if p.peek() == ')' {
			p.pos++
			break
		}
		if len(shape) == maxRank {
			return nil, fmt.Errorf("shape has more than %d dims", maxRank)
		}
		w := strings.TrimSuffix(p.word(), "L") // Python 2 long
		d, err := strconv.ParseInt(w, 10, 64)
		if err != nil || d < 0 || d > math.MaxInt32*int64(math.MaxInt32) {
			return nil, fmt.Errorf("shape dim %d is %q, want an integer ≥ 0", len(shape), w)
		}
		shape = append(shape, int(d))
		switch p.peek() {
		case ',':
			p.pos++
		case ')':
			if len(shape) == 1 {
				return nil, fmt.Errorf("a one-dim shape needs a trailing comma: (%d,)", shape[0])
			}
		default:
			return nil, fmt.Errorf("expected ',' or ')' in the shape at byte %d", p.pos)
		}
	}
	return shape, nil
}

// dict reads the header dict: exactly the keys descr, fortran_order and
// shape, each once.
func (p *dictParser) dict() (header, error) {
	var h header
	if err := p.expect('{'); err != nil {
		return h, err
	}
	seen := map[string]bool{}
	for {
		if p.peek() == '}' {
			p.pos++
			break
		}
		key, err := p.str()
		if err != nil {
			return h, err
		}
		if seen[key] {
			return h, fmt.Errorf("key %q is given twice", key)
		}
		seen[key] = true
		if err := p.expect(':'); err != nil {
			return h, err
		}
		switch key {
		case "descr":
			h.descr, err = p.str()
		case "fortran_order":
			h.fortran, err = p.boolean()
		case "shape":
			h.shape, err = p.shape()
		default:
			return h, fmt.Errorf("unexpected key %q (a header has descr, fortran_order and shape)", key)
		}
		if err != nil {
			return h, err
		}
		switch p.peek() {
		case ',':
			p.pos++
		case '}':
		default:
			return h, fmt.Errorf("expected ',' or '}' at byte %d", p.pos)
		}
	}
	if rest := strings.TrimSpace(p.s[p.pos:]); rest != "" {
		return h, fmt.Errorf("unexpected text after the dict: %s", quoteShort(rest))
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf("key %q is missing", k)
		}
	}
	return h, nil
}
