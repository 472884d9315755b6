// Package viz draws what attnrun sees inside a model: attention weights as
// heat maps with an HTML index (heatmap.go, html.go), the graph and its
// partitions as Graphviz DOT (dot.go), and run profiles as tables and
// Chrome trace-event JSON (profile.go).
//
// The heat maps are drawn with gonum's plot package (plotter.HeatMap and
// plotter.ColorBar); the colour map is viridis, interpolated in CIE L*a*b*
// between its published control colours by gonum's moreland.NewLuminance,
// so that lightness grows linearly with the weight.
package viz

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// viridisControls are matplotlib's viridis at 0, 1/8, ..., 1.
var viridisControls = []color.Color{
	color.NRGBA{0x44, 0x01, 0x54, 0xff},
	color.NRGBA{0x47, 0x2d, 0x7b, 0xff},
	color.NRGBA{0x3b, 0x52, 0x8b, 0xff},
	color.NRGBA{0x2c, 0x72, 0x8e, 0xff},
	color.NRGBA{0x21, 0x91, 0x8c, 0xff},
	color.NRGBA{0x28, 0xae, 0x80, 0xff},
	color.NRGBA{0x5e, 0xc9, 0x62, 0xff},
	color.NRGBA{0xad, 0xdc, 0x30, 0xff},
	color.NRGBA{0xfd, 0xe7, 0x25, 0xff},
}

// MaskedColor fills the cells of masked positions (and NaN weights): a flat
// light grey that viridis never reaches.
var MaskedColor = color.NRGBA{0xd9, 0xd9, 0xd9, 0xff}

// Viridis returns a viridis colour map over [min, max] (a new one each
// call: colour maps carry their range).
func Viridis(min, max float64) (palette.ColorMap, error) {
	cm, err := moreland.NewLuminance(viridisControls)
	if err != nil {
		return nil, err
	}
	cm.SetMin(min)
	cm.SetMax(max)
	return cm, nil
}

// colors is a palette.Palette of given colours.
type colors []color.Color

// Colors returns the palette's colours.
func (c colors) Colors() []color.Color { return c }

// sampled returns n colours of cm evenly spaced over [cm.Min(), cm.Max()].
// (moreland's own Palette steps to min + (n-1)·delta, which rounding can
// put past the max for some maxima, such as a weight of 1 - 11·2^-21, and
// then panics.)
func sampled(cm palette.ColorMap, n int) (palette.Palette, error) {
	lo, hi := cm.Min(), cm.Max()
	out := make(colors, n)
	for i := range out {
		c, err := cm.At(min(hi, lo+(hi-lo)*float64(i)/float64(n-1)))
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// HeatMap is one matrix of attention weights: rows are queries, columns
// keys.
type HeatMap struct {
	// Title is drawn above the map (lines separated by \n).
	Title string
	// Rows × Cols weights, row-major.
	Rows, Cols int
	Weights    []float32
	// Masked, when not nil, marks the masked positions (same layout). A
	// masked position whose weight is not 0 is drawn in colour all the
	// same: a finite fill (GPT-2's -1e4) can lose to scores lower still,
	// and then the hidden key carries the row's weight.
	Masked []bool
}

// grid adapts a HeatMap to plotter.GridXYZ: column c is key c, and grid row
// r is query Rows-1-r, so that query 0 is drawn at the top. Each cell is
// repeated k×k times: the heat map is drawn as one image, which the canvas
// scales with bilinear interpolation, and a small matrix must not blur.
type grid struct {
	h *HeatMap
	k int
}

func (g grid) Dims() (int, int) { return g.h.Cols * g.k, g.h.Rows * g.k }
func (g grid) X(c int) float64  { return (float64(c)+0.5)/float64(g.k) - 0.5 }
func (g grid) Y(r int) float64  { return (float64(r)+0.5)/float64(g.k) - 0.5 }
func (g grid) Z(c, r int) float64 {
	i := (g.h.Rows-1-r/g.k)*g.h.Cols + c/g.k
	if g.h.Masked != nil && g.h.Masked[i] && g.h.Weights[i] == 0 {
		return math.NaN()
	}
	return float64(g.h.Weights[i])
}

// queryTicks places the default ticks of the query axis at the grid rows
// of those queries (query q is grid row Rows-1-q).
type queryTicks struct{ rows int }

func (t queryTicks) Ticks(min, max float64) []plot.Tick {
	ticks := intTicks{}.Ticks(min, max) // the query range is the grid's
	for i := range ticks {
		ticks[i].Value = float64(t.rows-1) - ticks[i].Value
	}
	return ticks
}

// intTicks drops the fractional ticks of an index axis.
type intTicks struct{}

func (intTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	out := ticks[:0]
	for _, tk := range ticks {
		if tk.Value == math.Trunc(tk.Value) {
			out = append(out, tk)
		}
	}
	return out
}

// noGlyphs draws a heat map without its glyph boxes: HeatMap returns one
// per grid cell for the plot's padding, which costs more than drawing a
// big grid and pads nothing here.
type noGlyphs struct{ h *plotter.HeatMap }

func (n noGlyphs) Plot(c draw.Canvas, p *plot.Plot)            { n.h.Plot(c, p) }
func (n noGlyphs) DataRange() (xmin, xmax, ymin, ymax float64) { return n.h.DataRange() }

// cellPixels is about how many pixels of the drawn image a matrix's larger
// side gets before the canvas scales it.
const cellPixels = 256

// Size of a heat map picture.
const (
	mapWidth  = 6.4 * vg.Inch
	mapHeight = 5 * vg.Inch
	barWidth  = 1.2 * vg.Inch
	mapDPI    = 96
)

// WritePNG draws h with a colour bar and writes it to w as PNG. The colours
// span [0, the largest weight of the map]; masked positions are MaskedColor.
func (h *HeatMap) WritePNG(w io.Writer) error {
	if h.Rows <= 0 || h.Cols <= 0 || len(h.Weights) != h.Rows*h.Cols || (h.Masked != nil && len(h.Masked) != len(h.Weights)) {
		return fmt.Errorf("heat map %q: %d×%d with %d weights", h.Title, h.Rows, h.Cols, len(h.Weights))
	}
	hi, anyMasked := 0.0, false
	g := grid{h, 1}
	for r := 0; r < h.Rows; r++ {
		for c := 0; c < h.Cols; c++ {
			v := g.Z(c, r)
			if math.IsNaN(v) {
				anyMasked = true
			} else if v > hi {
				hi = v
			}
		}
	}
	if hi <= 0 {
		hi = 1
	}
	cm, err := Viridis(0, hi)
	if err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = h.Title
	p.X.Label.Text = "key"
	if anyMasked {
		p.X.Label.Text = "key   (grey: masked)"
	}
	p.Y.Label.Text = "query"
	p.X.Tick.Marker = intTicks{}
	p.Y.Tick.Marker = queryTicks{h.Rows}
	g.k = max(1, cellPixels/max(h.Rows, h.Cols))
	pal, err := sampled(cm, 256)
	if err != nil {
		return err
	}
	hm := plotter.NewHeatMap(g, pal)
	hm.Min, hm.Max = 0, hi
	hm.NaN = MaskedColor
	hm.Rasterized = true
	p.Add(noGlyphs{hm})

	bar := plot.New()
	bar.HideX()
	bar.Y.Label.Text = "weight"
	bar.Y.Padding = 0
	bar.Title.Text = strings.Repeat("\n", strings.Count(h.Title, "\n")) + " " // the map's title height
	cb := &plotter.ColorBar{ColorMap: cm, Vertical: true}
	bar.Add(cb)

	img := vgimg.NewWith(vgimg.UseWH(mapWidth, mapHeight), vgimg.UseDPI(mapDPI))
	dc := draw.New(img)
	left := draw.Crop(dc, 0, -barWidth, 0, 0)
	right := draw.Crop(dc, mapWidth-barWidth, 0, 0.45*vg.Inch, 0)
	p.Draw(left)
	bar.Draw(right)
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
