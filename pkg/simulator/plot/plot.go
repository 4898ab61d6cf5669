package plot

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"

	"github.com/gpushare/gpushare/pkg/simulator"
)

// plotXMin is the first arrival level plotted, in percent: below it every
// policy allocates everything that arrived.
const plotXMin = 70

// plotColors are the line colours, one per policy in order.
var plotColors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
}

// frame is the plot's geometry: data ranges and the pixel box they map to.
type frame struct {
	w, h                   int
	left, right, top, bot  int
	xmin, xmax, ymin, ymax float64
}

func newFrame(sums []simulator.Summary) frame {
	f := frame{w: 760, h: 460, left: 64, right: 200, top: 40, bot: 56, xmin: plotXMin, ymax: 100}
	longest := 0
	for _, s := range sums {
		longest = max(longest, len(s.Curve)-1)
	}
	f.xmax = math.Max(float64(plotXMin+10), math.Ceil(float64(longest)/10)*10)
	low := 100.0
	for _, s := range sums {
		for x := plotXMin; x < len(s.Curve); x++ {
			low = math.Min(low, s.Curve[x])
		}
	}
	f.ymin = math.Max(0, math.Floor((low-1)/5)*5)
	if f.ymin >= f.ymax {
		f.ymin = f.ymax - 10
	}
	return f
}

func (f *frame) px(x float64) float64 {
	return float64(f.left) + (x-f.xmin)/(f.xmax-f.xmin)*float64(f.w-f.left-f.right)
}

func (f *frame) py(y float64) float64 {
	return float64(f.h-f.bot) - (y-f.ymin)/(f.ymax-f.ymin)*float64(f.h-f.top-f.bot)
}

// points returns a summary's curve in pixels, from plotXMin on.
func (f *frame) points(s *simulator.Summary) [][2]float64 {
	var pts [][2]float64
	for x := plotXMin; x < len(s.Curve) && float64(x) <= f.xmax; x++ {
		if math.IsNaN(s.Curve[x]) {
			continue
		}
		pts = append(pts, [2]float64{f.px(float64(x)), f.py(math.Max(f.ymin, s.Curve[x]))})
	}
	return pts
}

func (f *frame) xTicks() []float64 {
	var t []float64
	for x := f.xmin; x <= f.xmax+1e-9; x += 10 {
		t = append(t, x)
	}
	return t
}

func (f *frame) yTicks() []float64 {
	step := 5.0
	if f.ymax-f.ymin > 40 {
		step = 10
	}
	var t []float64
	for y := math.Ceil(f.ymin/step) * step; y <= f.ymax+1e-9; y += step {
		t = append(t, y)
	}
	return t
}

const (
	plotTitle  = "allocated vs arrived GPU demand"
	plotXLabel = "arrived GPU demand, % of capacity"
	plotYLabel = "allocated, %"
)

// legend is a policy's legend text: its name and allocation at 100%.
func legend(s *simulator.Summary) string {
	return fmt.Sprintf("%s %s%%", s.Policy, simulator.Pct(s.AllocAt[100]))
}

// WriteSVG draws the allocation curves of sums, one line per policy.
func WriteSVG(w io.Writer, sums []simulator.Summary) error {
	f := newFrame(sums)
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", f.w, f.h, f.w, f.h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", f.w, f.h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", f.left, plotTitle)
	x0, x1, y0, y1 := f.px(f.xmin), f.px(f.xmax), f.py(f.ymin), f.py(f.ymax)
	for _, x := range f.xTicks() {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", f.px(x), y0, f.px(x), y1)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", f.px(x), y0+16, x)
	}
	for _, y := range f.yTicks() {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, f.py(y), x1, f.py(y))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n", x0-6, f.py(y)+4, y)
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", x0, y1, x1-x0, y0-y1)
	// Everything that arrived is allocated: the ideal.
	ix0, ix1 := math.Max(f.xmin, f.ymin), math.Min(f.xmax, f.ymax)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="4 4"/>`+"\n", f.px(ix0), f.py(ix0), f.px(ix1), f.py(ix1))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, float64(f.h)-14, plotXLabel)
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (y0+y1)/2, plotYLabel)
	for i := range sums {
		s := &sums[i]
		c := plotColors[i%len(plotColors)]
		var pts []string
		for _, p := range f.points(s) {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", p[0], p[1]))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#%02x%02x%02x" stroke-width="2" points="%s"/>`+"\n", c.R, c.G, c.B, strings.Join(pts, " "))
		ly := float64(f.top + 14 + 20*i)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#%02x%02x%02x" stroke-width="3"/>`+"\n", x1+14, ly, x1+34, ly, c.R, c.G, c.B)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x1+40, ly+4, legend(s))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// WritePNG draws the same plot as WriteSVG as a PNG.
func WritePNG(w io.Writer, sums []simulator.Summary) error {
	f := newFrame(sums)
	img := image.NewRGBA(image.Rect(0, 0, f.w, f.h))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	grid := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	ink := color.RGBA{0x33, 0x33, 0x33, 0xff}
	x0, x1, y0, y1 := f.px(f.xmin), f.px(f.xmax), f.py(f.ymin), f.py(f.ymax)
	drawText(img, f.left, 8, plotTitle, ink, 2)
	for _, x := range f.xTicks() {
		drawLine(img, f.px(x), y0, f.px(x), y1, grid, 1)
		label := fmt.Sprintf("%g", x)
		drawText(img, int(f.px(x))-textWidth(label, 1)/2, int(y0)+8, label, ink, 1)
	}
	for _, y := range f.yTicks() {
		drawLine(img, x0, f.py(y), x1, f.py(y), grid, 1)
		label := fmt.Sprintf("%g", y)
		drawText(img, int(x0)-8-textWidth(label, 1), int(f.py(y))-3, label, ink, 1)
	}
	drawLine(img, x0, y0, x1, y0, ink, 1)
	drawLine(img, x0, y1, x1, y1, ink, 1)
	drawLine(img, x0, y0, x0, y1, ink, 1)
	drawLine(img, x1, y0, x1, y1, ink, 1)
	ix0, ix1 := math.Max(f.xmin, f.ymin), math.Min(f.xmax, f.ymax)
	drawDashed(img, f.px(ix0), f.py(ix0), f.px(ix1), f.py(ix1), color.RGBA{0x99, 0x99, 0x99, 0xff})
	drawText(img, int((x0+x1)/2)-textWidth(plotXLabel, 1)/2, f.h-22, plotXLabel, ink, 1)
	drawText(img, 4, f.top-11, plotYLabel, ink, 1)
	for i := range sums {
		s := &sums[i]
		c := plotColors[i%len(plotColors)]
		pts := f.points(s)
		for j := 1; j < len(pts); j++ {
			drawLine(img, pts[j-1][0], pts[j-1][1], pts[j][0], pts[j][1], c, 2)
		}
		ly := float64(f.top + 14 + 20*i)
		drawLine(img, x1+14, ly, x1+34, ly, c, 3)
		drawText(img, int(x1)+40, int(ly)-3, legend(s), ink, 1)
	}
	return png.Encode(w, img)
}

// drawLine draws a line of width px pixels by stepping along its longer axis.
func drawLine(img *image.RGBA, xa, ya, xb, yb float64, c color.RGBA, width int) {
	steps := int(math.Max(math.Abs(xb-xa), math.Abs(yb-ya))) + 1
	for i := 0; i <= steps; i++ {
		t := float64(i) / float64(steps)
		x, y := xa+(xb-xa)*t, ya+(yb-ya)*t
		for dx := 0; dx < width; dx++ {
			for dy := 0; dy < width; dy++ {
				img.SetRGBA(int(math.Round(x))+dx-width/2, int(math.Round(y))+dy-width/2, c)
			}
		}
	}
}

func drawDashed(img *image.RGBA, xa, ya, xb, yb float64, c color.RGBA) {
	length := math.Hypot(xb-xa, yb-ya)
	for d := 0.0; d < length; d += 8 {
		t0, t1 := d/length, math.Min(1, (d+4)/length)
		drawLine(img, xa+(xb-xa)*t0, ya+(yb-ya)*t0, xa+(xb-xa)*t1, ya+(yb-ya)*t1, c, 1)
	}
}

// textWidth is the width in pixels of s drawn at scale.
func textWidth(s string, scale int) int { return len(s) * 6 * scale }

// drawText draws s with the 5×7 font, top-left at (x, y).
func drawText(img *image.RGBA, x, y int, s string, c color.RGBA, scale int) {
	for _, r := range strings.ToLower(s) {
		g, ok := font5x7[r]
		if ok {
			rows := strings.Split(g, "|")
			for gy, row := range rows {
				for gx, px := range row {
					if px != '#' {
						continue
					}
					for sx := 0; sx < scale; sx++ {
						for sy := 0; sy < scale; sy++ {
							img.SetRGBA(x+gx*scale+sx, y+gy*scale+sy, c)
						}
					}
				}
			}
		}
		x += 6 * scale
	}
}

// font5x7 holds the glyphs the plot uses: 7 rows of 5 pixels, "#" set,
// and an eighth for descenders.
var font5x7 = map[rune]string{
	'0': ".###.|#...#|#..##|#.#.#|##..#|#...#|.###.",
	'1': "..#..|.##..|..#..|..#..|..#..|..#..|.###.",
	'2': ".###.|#...#|....#|...#.|..#..|.#...|#####",
	'3': "#####|...#.|..#..|...#.|....#|#...#|.###.",
	'4': "...#.|..##.|.#.#.|#..#.|#####|...#.|...#.",
	'5': "#####|#....|####.|....#|....#|#...#|.###.",
	'6': "..##.|.#...|#....|####.|#...#|#...#|.###.",
	'7': "#####|....#|...#.|..#..|.#...|.#...|.#...",
	'8': ".###.|#...#|#...#|.###.|#...#|#...#|.###.",
	'9': ".###.|#...#|#...#|.####|....#|...#.|.##..",
	'%': "##...|##..#|...#.|..#..|.#...|#..##|...##",
	'.': ".....|.....|.....|.....|.....|.##..|.##..",
	',': ".....|.....|.....|.....|.##..|..#..|.#...",
	'-': ".....|.....|.....|#####|.....|.....|.....",
	':': ".....|.##..|.##..|.....|.##..|.##..|.....",
	'(': "...#.|..#..|.#...|.#...|.#...|..#..|...#.",
	')': ".#...|..#..|...#.|...#.|...#.|..#..|.#...",
	'/': ".....|....#|...#.|..#..|.#...|#....|.....",
	'a': ".....|.....|.###.|....#|.####|#...#|.####",
	'b': "#....|#....|#.##.|##..#|#...#|#...#|####.",
	'c': ".....|.....|.###.|#....|#....|#...#|.###.",
	'd': "....#|....#|.##.#|#..##|#...#|#...#|.####",
	'e': ".....|.....|.###.|#...#|#####|#....|.###.",
	'f': "..##.|.#..#|.#...|###..|.#...|.#...|.#...",
	'g': ".....|.....|.####|#...#|#...#|.####|....#|.###.",
	'h': "#....|#....|#.##.|##..#|#...#|#...#|#...#",
	'i': "..#..|.....|.##..|..#..|..#..|..#..|.###.",
	'j': "...#.|.....|..##.|...#.|...#.|...#.|#..#.|.##..",
	'k': "#....|#....|#..#.|#.#..|##...|#.#..|#..#.",
	'l': ".##..|..#..|..#..|..#..|..#..|..#..|.###.",
	'm': ".....|.....|##.#.|#.#.#|#.#.#|#...#|#...#",
	'n': ".....|.....|#.##.|##..#|#...#|#...#|#...#",
	'o': ".....|.....|.###.|#...#|#...#|#...#|.###.",
	'p': ".....|.....|####.|#...#|#...#|####.|#....|#....",
	'q': ".....|.....|.####|#...#|#...#|.####|....#|....#",
	'r': ".....|.....|#.##.|##..#|#....|#....|#....",
	's': ".....|.....|.###.|#....|.###.|....#|####.",
	't': ".#...|.#...|###..|.#...|.#...|.#..#|..##.",
	'u': ".....|.....|#...#|#...#|#...#|#..##|.##.#",
	'v': ".....|.....|#...#|#...#|#...#|.#.#.|..#..",
	'w': ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#.",
	'x': ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#",
	'y': ".....|.....|#...#|#...#|#...#|.####|....#|.###.",
	'z': ".....|.....|#####|...#.|..#..|.#...|#####",
}
