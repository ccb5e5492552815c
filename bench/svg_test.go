package bench

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestWriteSVGIsXMLWithOneLinePerSeries(t *testing.T) {
	p := Plot{Title: "latency <median> & p99", XLabel: "keys", YLabel: "ms", Series: []Series{
		{Name: "a", Points: []Point{{1, 0.4}, {10, 1.9}, {100, 6}, {1000, 55}}},
		{Name: "b & c", Points: []Point{{1, 0.3}, {10, 3}, {100, 30}, {1000, 300}}, Dashed: true},
		{Name: "d", Points: []Point{{1, 0.5}}},
	}}
	var b strings.Builder
	if err := p.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	lines, legends, texts := 0, 0, []string{}
	dec := xml.NewDecoder(strings.NewReader(b.String()))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b.String())
		}
		switch el := tok.(type) {
		case xml.StartElement:
			for _, a := range el.Attr {
				if a.Name.Local == "class" && a.Value == "series" && el.Name.Local == "polyline" {
					lines++
				}
				if a.Name.Local == "class" && a.Value == "legend" {
					legends++
				}
			}
		case xml.CharData:
			texts = append(texts, string(el))
		}
	}
	if lines != 3 || legends != 3 {
		t.Errorf("%d lines and %d legend entries, want 3 and 3", lines, legends)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"latency <median> & p99", "b & c", "keys", "ms", "1000", "0.1", "100"} {
		if !strings.Contains(all, want) {
			t.Errorf("text %q missing from %q", want, all)
		}
	}
}

func TestWriteSVGRefusesWhatLogAxesCannotShow(t *testing.T) {
	for _, p := range []Plot{
		{},
		{Series: []Series{{Name: "empty"}}},
		{Series: []Series{{Name: "zero", Points: []Point{{1, 0}}}}},
		{Series: []Series{{Name: "negative", Points: []Point{{-1, 1}}}}},
	} {
		if err := p.WriteSVG(io.Discard); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}
