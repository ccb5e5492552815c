package batchlock

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxREADMELines bounds the README: the guarantees live in docs/design.md,
// the rest of the docs beside it.
const maxREADMELines = 250

// exampleMark is a line of README.md.tpl that the README replaces with the
// code of an example function, or of a declaration, of example_test.go;
// from, when given, is the start of the function's first line to show (the
// README sets a Client up once).
var exampleMark = regexp.MustCompile(`(?m)^\{\{example "(\w+)"(?: from "([^"]+)")?\}\}$`)

// The README is README.md.tpl with the code of the package's Example
// functions in it, so that every Go snippet it shows compiles and is
// vetted. BATCHLOCK_UPDATE_README=1 (make readme) writes it.
func TestREADMEIsGenerated(t *testing.T) {
	tpl, err := os.ReadFile("../README.md.tpl")
	require.NoError(t, err)
	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	readme, err := renderREADME(tpl, src)
	require.NoError(t, err)
	require.NotContains(t, string(readme), "{{", "a mark of README.md.tpl that is not one line as exampleMark reads it")
	if os.Getenv("BATCHLOCK_UPDATE_README") == "1" {
		require.NoError(t, os.WriteFile("../README.md", readme, 0o644))
	}
	have, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	require.Equal(t, string(readme), string(have), "README.md differs from README.md.tpl and the examples: run make readme")
	assert.LessOrEqual(t, bytes.Count(have, []byte("\n")), maxREADMELines, "README.md lines")
}

// renderREADME puts into tpl, at each mark, the code of the example src
// names there, in a Go block.
func renderREADME(tpl, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var missing []string
	out := exampleMark.ReplaceAllFunc(tpl, func(mark []byte) []byte {
		m := exampleMark.FindSubmatch(mark)
		name, from := string(m[1]), string(m[2])
		code, ok := exampleCode(fset, f, src, name)
		if at := strings.Index(code, "\n"+from); ok && from != "" {
			if ok = at >= 0; ok {
				code = code[at+1:]
			}
		}
		if !ok {
			missing = append(missing, fmt.Sprintf("%s from %q", name, from))
		}
		return []byte("```go\n" + code + "```")
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("README.md.tpl names what example_test.go does not hold: %v", missing)
	}
	return out, nil
}

// exampleCode is the body of the function name, one tab less indented, or
// the whole declaration of the variable name with its comment.
func exampleCode(fset *token.FileSet, f *ast.File, src []byte, name string) (string, bool) {
	text := func(from, to token.Pos) string {
		return string(src[fset.Position(from).Offset:fset.Position(to).Offset])
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name != name {
				continue
			}
			body := strings.Trim(text(d.Body.Lbrace+1, d.Body.Rbrace), "\n")
			lines := strings.Split(body, "\n")
			for i, l := range lines {
				lines[i] = strings.TrimPrefix(l, "\t")
			}
			return strings.Join(lines, "\n") + "\n", true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if v, ok := s.(*ast.ValueSpec); ok && len(v.Names) == 1 && v.Names[0].Name == name {
					from := d.Pos()
					if d.Doc != nil {
						from = d.Doc.Pos()
					}
					return text(from, d.End()) + "\n", true
				}
			}
		}
	}
	return "", false
}
