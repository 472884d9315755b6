package viz

import (
	"html/template"
	"os"
	"strconv"
	"strings"
)

// indexPage lays every core (layer) × head out as a grid of thumbnails, one
// table per batch item; each thumbnail links to its full picture.
var indexPage = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>attention maps: {{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 4px; text-align: center; vertical-align: top; }
th.core { text-align: left; font-weight: normal; max-width: 18em; font-size: 85%; }
img { width: 200px; height: auto; display: block; }
code { font-size: 90%; }
</style>
</head>
<body>
<h1>Attention maps</h1>
<p>{{.Title}}</p>
<p>Rows are attention cores (layers) in execution order, columns heads. Each map shows the softmax weights of one batch item and head: queries down, keys across, viridis from 0 to the map's largest weight, masked positions grey (unless a finite fill leaves them weight). Click a map for the full picture.</p>
<ul>
{{- range $k, $c := .Cores}}
<li>core {{$k}}: <code>{{$c.Name}}</code>, weights [{{range $i, $d := $c.Shape}}{{if $i}}×{{end}}{{$d}}{{end}}] in <a href="{{$c.NPY}}">{{$c.NPY}}</a></li>
{{- end}}
</ul>
{{- range .Batches}}
<h2>{{.Heading}}</h2>
<table>
<tr><th>core</th>{{range .Heads}}<th>{{.}}</th>{{end}}</tr>
{{- range .Rows}}
<tr><th class="core">core {{.Core}}<br><code>{{.Name}}</code></th>{{range .Maps}}<td>{{if .PNG}}<a href="{{.PNG}}"><img src="{{.PNG}}" alt="{{.Alt}}" title="{{.Alt}}"></a>{{end}}</td>{{end}}</tr>
{{- end}}
</table>
{{- end}}
<p id="status"></p>
<script>
// Once everything has loaded, say how many pictures did (data-images-loaded
// on <body>, read by attnrun's browser test) and name any that did not.
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  document.body.setAttribute("data-images", String(imgs.length));
  document.body.setAttribute("data-images-loaded", String(imgs.length - broken.length));
  if (broken.length > 0) {
    document.getElementById("status").textContent = broken.length + " picture(s) failed to load: " +
      broken.map(function (i) { return i.getAttribute("src"); }).join(", ");
  }
});
</script>
</body>
</html>
`))

type indexData struct {
	Title   string
	Cores   []CoreFiles
	Batches []indexBatch
}

type indexBatch struct {
	Heading string
	Heads   []string
	Rows    []indexRow
}

type indexRow struct {
	Core int
	Name string
	Maps []indexCell
}

type indexCell struct{ PNG, Alt string }

// writeIndex writes index.html for the maps of cores.
func writeIndex(path, title string, cores []CoreFiles) error {
	d := indexData{Title: title, Cores: cores}
	batchOf := map[int]int{} // batch item → index in d.Batches
	for k, c := range cores {
		for _, m := range c.Maps {
			bi, ok := batchOf[m.Batch]
			if !ok {
				bi = len(d.Batches)
				batchOf[m.Batch] = bi
				d.Batches = append(d.Batches, indexBatch{Heading: "batch item " + strconv.Itoa(m.Batch)})
			}
			b := &d.Batches[bi]
			for len(b.Heads) <= m.Head {
				// Rank-3 weights ([N, Sq, Sk]) have items, which may be
				// batch items or heads folded into the batch.
				kind := "head "
				if strings.HasPrefix(m.Label, "item ") {
					kind = "item "
				}
				b.Heads = append(b.Heads, kind+strconv.Itoa(len(b.Heads)))
			}
			if len(b.Rows) == 0 || b.Rows[len(b.Rows)-1].Core != k {
				b.Rows = append(b.Rows, indexRow{Core: k, Name: c.Name})
			}
			row := &b.Rows[len(b.Rows)-1]
			for len(row.Maps) < m.Head {
				row.Maps = append(row.Maps, indexCell{})
			}
			alt := "core " + strconv.Itoa(k) + " " + c.Name
			if m.Label != "" {
				alt += ", " + m.Label
			}
			row.Maps = append(row.Maps, indexCell{PNG: m.PNG, Alt: alt})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := indexPage.Execute(f, d); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
