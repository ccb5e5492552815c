package batchlock

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The API's size limits: a name is an exported constant, variable,
// function, type or method (a struct's fields are its type's). The guarantees are stated once, in
// docs/design.md, so each doc says what its name does in a few lines.
// maxExportedNames holds the names there are: issue 59 aims at 75, so
// lower it as names go and raise it only with a reason.
const (
	maxExportedNames = 78
	maxDocLines      = 12
	maxAllDocLines   = 280
	maxPackageDoc    = 30
)

func TestAPIDocLimits(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			require.NoError(t, err)
			files = append(files, f)
		}
	}
	d, err := doc.NewFromFiles(fset, files, "github.com/batchlock/batchlock/batchlock")
	require.NoError(t, err)

	lines := map[string]int{}
	add := func(name, text string) { lines[name] = strings.Count(strings.TrimSpace(text), "\n") + 1 }
	// A name declared in a group has the group's doc and its own.
	values := func(prefix string, vs []*doc.Value) {
		for _, v := range vs {
			for _, spec := range v.Decl.Specs {
				vs := spec.(*ast.ValueSpec)
				for _, n := range vs.Names {
					if n.IsExported() {
						add(prefix+n.Name, v.Doc+vs.Doc.Text())
					}
				}
			}
		}
	}
	values("", d.Consts)
	values("", d.Vars)
	for _, f := range d.Funcs {
		add(f.Name, f.Doc)
	}
	for _, ty := range d.Types {
		add(ty.Name, ty.Doc)
		values("", ty.Consts)
		values("", ty.Vars)
		for _, f := range ty.Funcs {
			add(f.Name, f.Doc)
		}
		for _, m := range ty.Methods {
			add(ty.Name+"."+m.Name, m.Doc)
		}
	}
	all := 0
	for name, n := range lines {
		all += n
		assert.LessOrEqual(t, n, maxDocLines, "lines of %s's doc", name)
	}
	assert.LessOrEqual(t, len(lines), maxExportedNames, "exported names")
	assert.LessOrEqual(t, all, maxAllDocLines, "lines of every exported doc together")
	assert.LessOrEqual(t, strings.Count(d.Doc, "\n"), maxPackageDoc, "lines of the package doc")
	t.Logf("%d exported names, %d lines of their docs, %d of the package's", len(lines), all, strings.Count(d.Doc, "\n"))
}
