package kvevents

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoTransportImports keeps the codec free of sockets: the ZMQ
// transport lives in kvzmq, which imports this package, never the reverse.
func TestNoTransportImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "net" || strings.Contains(path, "zmq") || strings.Contains(path, "zmtpguard") {
				t.Errorf("%s imports %s: transport code belongs in kvzmq", name, path)
			}
		}
	}
}
