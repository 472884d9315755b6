package hugepages

import (
	"os"
	"testing"
	"unsafe"
)

// TestFloats checks what Floats returns for sizes below, at and above a
// huge page: a zeroed slice of length and capacity n, starting at a huge
// page boundary when it holds one (and huge pages are not turned off).
func TestFloats(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		aligned bool
	}{
		{"empty", 0, false},
		{"one", 1, false},
		{"just under a huge page", Size/4 - 1, false},
		{"one huge page", Size / 4, true},
		{"three and a bit", 3*Size/4 + 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Floats(tc.n)
			if len(s) != tc.n || cap(s) != tc.n {
				t.Fatalf("len %d cap %d, want %d", len(s), cap(s), tc.n)
			}
			for i, v := range s {
				if v != 0 {
					t.Fatalf("s[%d] = %v, want 0", i, v)
				}
			}
			if tc.aligned && Enabled() {
				if at := uintptr(unsafe.Pointer(&s[0])) % Size; at != 0 {
					t.Fatalf("starts %d bytes past a huge page boundary", at)
				}
			}
		})
	}
}

// TestWholePages checks the page rounding that keeps release inside the
// allocation: an aligned start, an end rounded down, nothing for a range
// without a whole page.
func TestWholePages(t *testing.T) {
	page := os.Getpagesize()
	buf := make([]byte, 8*page)
	base := int(-uintptr(unsafe.Pointer(&buf[0])) & uintptr(page-1)) // first page boundary in buf
	mem := buf[base : base+6*page]
	for _, tc := range []struct {
		name         string
		lo, hi       int
		from, length int
	}{
		{"aligned", 0, 2 * page, 0, 2 * page},
		{"start rounded up", 1, 3 * page, page, 2 * page},
		{"end rounded down", 0, 3*page - 1, 0, 2 * page},
		{"both", page - 1, 5*page + 1, page, 4 * page},
		{"under a page", 10, page + 10, 0, 0},
		{"empty", page, page, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := wholePages(mem, tc.lo, tc.hi)
			if len(got) != tc.length {
				t.Fatalf("%d bytes, want %d", len(got), tc.length)
			}
			if tc.length > 0 {
				if from := int(uintptr(unsafe.Pointer(&got[0])) - uintptr(unsafe.Pointer(&mem[0]))); from != tc.from {
					t.Fatalf("starts at %d, want %d", from, tc.from)
				}
			}
		})
	}
}

// TestFloatsKeepsNeighbours fills small slices allocated around many
// Floats calls and checks that none changed: release hands back only
// pages of Floats' own allocation.
func TestFloatsKeepsNeighbours(t *testing.T) {
	var small [][]float32
	var big [][]float32
	for i := range 16 {
		s := make([]float32, 3000+i*517)
		for j := range s {
			s[j] = float32(i + 1)
		}
		small = append(small, s)
		b := Floats(Size/4 + i*10007)
		for j := range b {
			b[j] = -1
		}
		big = append(big, b)
	}
	for i, s := range small {
		for j, v := range s {
			if v != float32(i+1) {
				t.Fatalf("small slice %d [%d] = %v, want %d", i, j, v, i+1)
			}
		}
	}
	for i, b := range big {
		for j, v := range b {
			if v != -1 {
				t.Fatalf("Floats slice %d [%d] = %v, want -1", i, j, v)
			}
		}
	}
}
