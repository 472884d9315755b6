package ir

import (
	"fmt"
	"strings"
)

// Error messages stay short whatever a model holds: a list of two million
// perm entries or dims must not become a 15 MB error line.

// MaxMessageBytes is the length past which Elide shortens a message.
const MaxMessageBytes = 1000

// listKeep is how many items of a long list Elide keeps at its start (and
// listKeepEnd at its end).
const (
	listKeep    = 8
	listKeepEnd = 2
)

// FormatList formats vals like %v does ([1 2 3]), eliding the middle of a
// long list with a count: [0 1 2 3 4 5 6 7 … 1999990 more … 1999998 1999999].
func FormatList[T any](vals []T) string {
	if len(vals) <= listKeep+listKeepEnd+1 {
		return fmt.Sprint(vals)
	}
	return fmt.Sprintf("%v … %d more … %v", strings.TrimSuffix(fmt.Sprint(vals[:listKeep]), "]"),
		len(vals)-listKeep-listKeepEnd, strings.TrimPrefix(fmt.Sprint(vals[len(vals)-listKeepEnd:]), "["))
}

// Elide shortens a message longer than MaxMessageBytes: first every long
// bracketed list in it ([...] whose items are separated by spaces or
// commas) keeps its first and last items and gives the count of the rest,
// then, if that is not enough, the middle of the message is cut, saying
// how many bytes were left out. Shorter messages are returned as they are.
func Elide(msg string) string {
	if len(msg) <= MaxMessageBytes {
		return msg
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '[')
		if i < 0 {
			b.WriteString(msg)
			break
		}
		j := strings.IndexByte(msg[i:], ']')
		if j < 0 {
			b.WriteString(msg)
			break
		}
		b.WriteString(msg[:i])
		b.WriteString(elideList(msg[i+1 : i+j]))
		msg = msg[i+j+1:]
	}
	out := b.String()
	if len(out) <= MaxMessageBytes {
		return out
	}
	half := MaxMessageBytes/2 - 20
	cut := len(out) - 2*half
	return out[:half] + fmt.Sprintf(" … (%d bytes left out) … ", cut) + out[len(out)-half:]
}

// elideList returns "[items]" with a long list's middle items replaced by
// their count.
func elideList(items string) string {
	if len(items) <= 100 {
		return "[" + items + "]"
	}
	sep := " "
	if strings.Contains(items, ", ") {
		sep = ", "
	}
	parts := strings.Split(items, sep)
	if len(parts) <= listKeep+listKeepEnd+1 {
		return "[" + items + "]"
	}
	return "[" + strings.Join(parts[:listKeep], sep) + fmt.Sprintf(" … %d more … ", len(parts)-listKeep-listKeepEnd) +
		strings.Join(parts[len(parts)-listKeepEnd:], sep) + "]"
}

// elidedError is an error whose message was shortened by Elide; it unwraps
// to the original.
type elidedError struct {
	msg string
	err error
}

func (e *elidedError) Error() string { return e.msg }
func (e *elidedError) Unwrap() error { return e.err }

// ElideError returns err with its message shortened by Elide (err itself
// when it is short), still matching errors.Is and errors.As.
func ElideError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if short := Elide(msg); len(short) < len(msg) {
		return &elidedError{msg: short, err: err}
	}
	return err
}
