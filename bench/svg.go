package bench

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Plot is a line chart with logarithmic axes, one line per series.
type Plot struct {
	Title, XLabel, YLabel string
	Series                []Series
}

// Series is one line of a Plot. Points with a value <= 0 cannot be placed
// on a log scale and are refused.
type Series struct {
	Name   string
	Points []Point
	Dashed bool
}

// Point is one (x, y) of a series.
type Point struct{ X, Y float64 }

// Geometry of the picture, in pixels. The legend gets its own column on the
// right so that it never hides a line.
const (
	svgWidth     = 760
	svgHeight    = 460
	marginLeft   = 72
	marginRight  = 230
	marginTop    = 44
	marginBottom = 56
)

// Colours that stay distinct for readers with the common colour blindnesses
// (Okabe–Ito, then three of Paul Tol's muted colours).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#882255", "#999933", "#888888"}

// WriteSVG draws p as a standalone SVG document.
func (p Plot) WriteSVG(w io.Writer) error {
	if len(p.Series) == 0 {
		return errors.New("plot: no series")
	}
	xs, ys, err := p.ranges()
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	d := drawing{w: bw, xs: xs, ys: ys}
	d.printf(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	d.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	d.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	d.text(svgWidth/2-marginRight/2+marginLeft/2, 24, "middle", `font-size="15" font-weight="bold"`, p.Title)
	d.axes(p.XLabel, p.YLabel)
	for i, s := range p.Series {
		d.series(i, s)
	}
	d.printf("</svg>\n")
	if d.err != nil {
		return d.err
	}
	return bw.Flush()
}

// ranges returns the decades the axes span, as powers of ten.
func (p Plot) ranges() (xs, ys [2]int, err error) {
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for _, pt := range s.Points {
			if pt.X <= 0 || pt.Y <= 0 || math.IsInf(pt.X, 0) || math.IsInf(pt.Y, 0) || math.IsNaN(pt.X) || math.IsNaN(pt.Y) {
				return xs, ys, fmt.Errorf("plot: series %q: point (%v, %v) cannot be drawn on log axes", s.Name, pt.X, pt.Y)
			}
			minX, maxX = min(minX, pt.X), max(maxX, pt.X)
			minY, maxY = min(minY, pt.Y), max(maxY, pt.Y)
		}
	}
	if math.IsInf(minX, 1) {
		return xs, ys, errors.New("plot: no points")
	}
	return decades(minX, maxX), decades(minY, maxY), nil
}

// decades returns [floor(log10 lo), ceil(log10 hi)], at least one decade wide.
func decades(lo, hi float64) [2]int {
	a, b := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	if b <= a {
		b = a + 1
	}
	return [2]int{a, b}
}

// drawing writes SVG elements, keeping the first write error.
type drawing struct {
	w      io.Writer
	xs, ys [2]int
	err    error
}

func (d *drawing) printf(format string, args ...any) {
	if d.err == nil {
		_, d.err = fmt.Fprintf(d.w, format, args...)
	}
}

func (d *drawing) text(x, y float64, anchor, attrs, s string) {
	d.printf(`<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, attrs, escape(s))
}

func (d *drawing) px(x float64) float64 {
	f := (math.Log10(x) - float64(d.xs[0])) / float64(d.xs[1]-d.xs[0])
	return marginLeft + f*(svgWidth-marginLeft-marginRight)
}

func (d *drawing) py(y float64) float64 {
	f := (math.Log10(y) - float64(d.ys[0])) / float64(d.ys[1]-d.ys[0])
	return svgHeight - marginBottom - f*(svgHeight-marginTop-marginBottom)
}

// axes draws the frame, a grid line per decade (and fainter ones at 2..9
// times it), tick labels and the axis titles.
func (d *drawing) axes(xLabel, yLabel string) {
	left, right := float64(marginLeft), float64(svgWidth-marginRight)
	top, bottom := float64(marginTop), float64(svgHeight-marginBottom)
	for e := d.xs[0]; e <= d.xs[1]; e++ {
		for m := 1; m <= 9 && (m == 1 || e < d.xs[1]); m++ {
			x := d.px(float64(m) * math.Pow10(e))
			d.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, top, x, bottom, gridColour(m))
		}
		d.text(d.px(math.Pow10(e)), bottom+18, "middle", "", tickLabel(e))
	}
	for e := d.ys[0]; e <= d.ys[1]; e++ {
		for m := 1; m <= 9 && (m == 1 || e < d.ys[1]); m++ {
			y := d.py(float64(m) * math.Pow10(e))
			d.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, y, right, y, gridColour(m))
		}
		d.text(left-8, d.py(math.Pow10(e))+4, "end", "", tickLabel(e))
	}
	d.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, right-left, bottom-top)
	d.text((left+right)/2, svgHeight-14, "middle", "", xLabel)
	d.text(18, (top+bottom)/2, "middle", fmt.Sprintf(`transform="rotate(-90 18 %.1f)"`, (top+bottom)/2), yLabel)
}

func gridColour(m int) string {
	if m == 1 {
		return "#bbb"
	}
	return "#eee"
}

// tickLabel writes 10^e plainly: 0.01, 1, 1000.
func tickLabel(e int) string {
	return strconv.FormatFloat(math.Pow10(e), 'f', -1, 64)
}

// series draws the i-th line with its markers and its legend entry.
func (d *drawing) series(i int, s Series) {
	colour := palette[i%len(palette)]
	dash := ""
	if s.Dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	d.printf(`<polyline class="series" fill="none" stroke="%s" stroke-width="2"%s points="`, colour, dash)
	for j, pt := range s.Points {
		if j > 0 {
			d.printf(" ")
		}
		d.printf("%.1f,%.1f", d.px(pt.X), d.py(pt.Y))
	}
	d.printf(`"><title>%s</title></polyline>`+"\n", escape(s.Name))
	for _, pt := range s.Points {
		d.printf(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", d.px(pt.X), d.py(pt.Y), colour)
	}
	x, y := float64(svgWidth-marginRight+16), float64(marginTop+10+i*22)
	d.printf(`<g class="legend"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`, x, y, x+28, y, colour, dash)
	d.printf(`<text x="%.1f" y="%.1f">%s</text></g>`+"\n", x+36, y+4, escape(s.Name))
}

func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}
