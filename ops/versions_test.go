package ops

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// legacyVersions are the ops whose earliest ONNX versions attnrun does not
// register, and why. None today: every op covers every ONNX version from its
// first.
var legacyVersions = map[string]string{}

// readONNXVersions reads testdata/onnx_versions.txt (ONNX 1.22's op
// versions; see onnx_versions.py).
func readONNXVersions(t *testing.T) map[string][]int {
	f, err := os.Open("testdata/onnx_versions.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		for _, v := range fields[1:] {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			out[fields[0]] = append(out[fields[0]], n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRegistryFollowsONNX checks every default-domain op attnrun registers
// against ONNX's version history: one schema per ONNX version (the ranges
// start exactly at ONNX's versions), no gaps, the last range reaching
// MaxOpset, and the first one at ONNX's first version unless legacyVersions
// says why not.
func TestRegistryFollowsONNX(t *testing.T) {
	onnxVersions := readONNXVersions(t)
	byOp := map[string][]*Schema{}
	for _, s := range Schemas() {
		if s.Domain == DomainONNX {
			byOp[s.OpType] = append(byOp[s.OpType], s)
		}
	}
	for op, list := range byOp {
		want, ok := onnxVersions[op]
		if !ok {
			t.Errorf("%s: not an ai.onnx op of ONNX 1.22", op)
			continue
		}
		var since []int
		for i, s := range list {
			since = append(since, s.Since)
			if i > 0 && list[i-1].Until+1 != s.Since {
				t.Errorf("%s: gap or overlap between %d-%d and %d-%d", op, list[i-1].Since, list[i-1].Until, s.Since, s.Until)
			}
		}
		if last := list[len(list)-1]; last.Until != MaxOpset {
			t.Errorf("%s: last range ends at %d, not MaxOpset %d", op, last.Until, MaxOpset)
		}
		first := slices.Index(want, since[0])
		if first < 0 {
			t.Errorf("%s: starts at opset %d, which is not an ONNX version of it (%v)", op, since[0], want)
			continue
		}
		if !slices.Equal(since, want[first:]) {
			t.Errorf("%s: schemas start at %v, ONNX's versions from %d are %v", op, since, since[0], want[first:])
		}
		if first > 0 && legacyVersions[op] == "" {
			t.Errorf("%s: ONNX versions %v are not registered and legacyVersions gives no reason", op, want[:first])
		}
		if first == 0 && legacyVersions[op] != "" {
			t.Errorf("%s: every version is registered; remove it from legacyVersions", op)
		}
	}
}
