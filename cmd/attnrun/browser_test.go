package main

import (
	"context"
	"image/color"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/attnrun/attnrun/viz"
)

// chromium finds a Chromium to test pages with, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("Chromium is not installed, so the attention-map page is not checked in a browser: apt-get install chromium (scripts/install-test-deps.sh does)")
	return ""
}

// headless runs Chromium headless on url with extra flags and a fresh
// profile, returning its stdout.
func headless(t *testing.T, bin, url string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(append(args, flags...), url)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %v: %v\n%s", bin, flags, err, stderr)
	}
	return out
}

var imagesLoaded = regexp.MustCompile(`<body data-images="(\d+)" data-images-loaded="(\d+)">`)

// TestAttentionMapsInBrowser loads the index.html that `run
// --attention-maps` writes for the 2-layer, 4-head encoder in headless
// Chromium: every picture must load (the page's script counts them after
// the load event), and a screenshot must show the maps, masked cells grey.
func TestAttentionMapsInBrowser(t *testing.T) {
	bin := chromium(t)
	ds := filepath.Join(modelsDir, "s001_encoder_2x4", "test_data_set_0")
	out := t.TempDir()
	attnrun(t, "run", filepath.Join(modelsDir, "s001_encoder_2x4", "model.onnx"), "--attention-maps", out,
		"-i", "x="+filepath.Join(ds, "input_0.pb"), "-i", "mask="+filepath.Join(ds, "input_1.pb")).wantOK(t)
	url := "file://" + filepath.Join(out, "index.html")

	dom := headless(t, bin, url, "--dump-dom")
	m := imagesLoaded.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's load script did not run: no image counts on <body> in\n%.2000s", dom)
	}
	total, _ := strconv.Atoi(string(m[1]))
	loaded, _ := strconv.Atoi(string(m[2]))
	if total != 16 || loaded != total {
		t.Fatalf("%d of %d images loaded, want 16 of 16 (2 layers × 4 heads × 2 batch items)", loaded, total)
	}

	shot := filepath.Join(t.TempDir(), "index.png")
	headless(t, bin, url, "--window-size=1280,1400", "--screenshot="+shot)
	img := readPNG(t, shot)
	b := img.Bounds()
	if b.Dx() != 1280 || b.Dy() != 1400 {
		t.Errorf("screenshot is %dx%d, want 1280x1400", b.Dx(), b.Dy())
	}
	// Batch item 1 pads its last keys: their cells are grey in its 8
	// thumbnails. Viridis's dark end appears in every colour bar.
	grey, dark := 0, 0
	purple := color.NRGBA{0x44, 0x01, 0x54, 0xff}
	near := func(a, b color.NRGBA) bool {
		d := func(x, y uint8) int { return max(int(x)-int(y), int(y)-int(x)) }
		return d(a.R, b.R)+d(a.G, b.G)+d(a.B, b.B) <= 12
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			if c == viz.MaskedColor {
				grey++
			}
			if near(c, purple) {
				dark++
			}
		}
	}
	t.Logf("screenshot: %d masked-grey, %d viridis-purple pixels", grey, dark)
	if grey < 8*200 || dark < 16*10 {
		t.Errorf("screenshot shows %d masked-grey and %d viridis-purple pixels: the maps are not on the page", grey, dark)
	}
}
