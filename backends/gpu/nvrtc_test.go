//go:build cgo

package gpu

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestNVRTCCompilesKernels compiles kernels.cu with the real NVRTC (it runs
// on the CPU; no GPU is needed) for the architectures the backend may pick,
// and checks that the PTX defines every kernel the backend loads, under its
// extern "C" name. It skips when libnvrtc is not installed (on Debian:
// libnvrtc11.2 from non-free; or set ATTNRUN_CUDA_LIB_DIRS).
func TestNVRTCCompilesKernels(t *testing.T) {
	var dirs []string
	if v := os.Getenv(LibDirsEnv); v != "" {
		dirs = strings.Split(v, ":")
	}
	rtc, err := loadNVRTC(dirs)
	if err != nil {
		t.Skipf("NVRTC not available: %v", err)
	}
	t.Logf("NVRTC %s from %s", rtc.version, rtc.path)
	entry := regexp.MustCompile(`\.entry\s+([A-Za-z0-9_]+)\(\s*\.param\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]\s*\)`)
	words := map[string]int{}
	for _, s := range sampleParams() {
		words[s.name] = len(s.pb.fields)
	}
	for _, arch := range []string{"compute_80", "compute_90"} {
		t.Run(arch, func(t *testing.T) {
			ptx, err := rtc.compile(kernelSource, arch)
			if err != nil {
				if strings.Contains(err.Error(), "invalid value for --gpu-architecture") {
					t.Skipf("this NVRTC does not know %s", arch)
				}
				t.Fatal(err)
			}
			found := map[string]bool{}
			for _, m := range entry.FindAllStringSubmatch(ptx, -1) {
				found[m[1]] = true
				// One parameter, of exactly the bytes the Go side writes.
				if want := fmt.Sprint(8 * words[kernelStruct(m[1])]); m[2] != want {
					t.Errorf("kernel %s takes %s parameter bytes, the Go side writes %s", m[1], m[2], want)
				}
			}
			for _, k := range kernelNames {
				if !found[k] {
					t.Errorf("kernel %s missing from the PTX (entries: %v)", k, found)
				}
			}
			if len(found) != len(kernelNames) {
				t.Errorf("PTX has %d entries, the backend loads %d", len(found), len(kernelNames))
			}
		})
	}
	// Compile errors come back with NVRTC's log.
	if _, err := rtc.compile("extern \"C\" __global__ void k() { undefined_thing(); }", "compute_70"); err == nil ||
		!strings.Contains(err.Error(), "undefined_thing") {
		t.Errorf("a bad source compiled or lost its log: %v", err)
	}
}
