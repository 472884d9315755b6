package ir

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestFormatList(t *testing.T) {
	if got := FormatList([]int64{1, 2, 3}); got != "[1 2 3]" {
		t.Errorf("short list: %q", got)
	}
	long := make([]int, 2_000_000)
	for i := range long {
		long[i] = i
	}
	if got, want := FormatList(long), "[0 1 2 3 4 5 6 7 … 1999990 more … 1999998 1999999]"; got != want {
		t.Errorf("long list: %q, want %q", got, want)
	}
}

// TestElide: a node error carrying a 2M-entry list (a Transpose perm once
// made a 14.9 MB error line) comes out short, with the list's count, and
// still unwraps to its cause.
func TestElide(t *testing.T) {
	long := make([]int, 2_000_000)
	cause := errors.New("cause")
	n := &Node{Name: "/Transpose", OpType: "Transpose"}
	err := n.Errorf("perm %v is not a permutation: %w", long, cause)
	msg := err.Error()
	if len(msg) > MaxMessageBytes {
		t.Fatalf("message is %d bytes", len(msg))
	}
	if !strings.HasPrefix(msg, `node "/Transpose" (Transpose): perm [0 0 0 0 0 0 0 0 … 1999990 more … 0 0] is not`) {
		t.Errorf("message %q", msg)
	}
	if !errors.Is(err, cause) {
		t.Error("the elided error does not unwrap to its cause")
	}
	// Text without lists is cut in the middle, saying how much.
	msg = Elide(strings.Repeat("x", 10*MaxMessageBytes))
	if len(msg) > MaxMessageBytes || !strings.Contains(msg, fmt.Sprintf("(%d bytes left out)", 10*MaxMessageBytes-2*(MaxMessageBytes/2-20))) {
		t.Errorf("cut message %q", msg)
	}
	if s := "short [1 2 3]"; Elide(s) != s {
		t.Errorf("short message changed")
	}
}
