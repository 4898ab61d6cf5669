package repo

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpushare/gpushare"

// arrow is an import the architecture forbids (docs/architecture.md):
// no package matching from may import a package whose path starts with
// to, except the packages matching except.
type arrow struct {
	name   string
	from   func(pkg string) bool
	to     []string
	except func(pkg string) bool
}

// under reports whether pkg is one of the module's paths or below one.
func under(paths ...string) func(string) bool {
	return func(pkg string) bool {
		return slices.ContainsFunc(paths, func(p string) bool { return pkg == module+"/"+p || strings.HasPrefix(pkg, module+"/"+p+"/") })
	}
}

// arrows are the rules of docs/architecture.md, over the product code:
// what the module's packages import, their tests aside.
var arrows = []arrow{
	{name: "the pure packages talk to no API server",
		from: under("pkg/allocator", "pkg/workload", "pkg/gpushare", "pkg/sampling", "pkg/kubeinfo", "pkg/inspectapi", "pkg/preemption/planner"),
		to:   []string{"k8s.io/client-go"}},
	{name: "the allocation cache is fed, it watches nothing itself",
		from: under("pkg/cache"), to: []string{"k8s.io/client-go"}},
	{name: "the pure packages import no state of the extender's",
		from: under("pkg/allocator", "pkg/workload", "pkg/gpushare", "pkg/sampling"),
		to:   []string{module + "/pkg/cache", module + "/pkg/feed", module + "/pkg/extender", module + "/pkg/preemption"}},
	{name: "only gpushare-simulate's main imports the simulator",
		from: func(pkg string) bool { return strings.HasPrefix(pkg, module+"/") }, to: []string{module + "/pkg/simulator"},
		except: under("pkg/simulator", "simulator")},
	{name: "build tooling is for hack/ and test/ only",
		from: under("pkg", "extender", "deviceplugin", "kubectl-inspect-gpushare", "simulator"), to: []string{module + "/pkg/build"},
		except: under("pkg/build")},
	{name: "product code imports no test harness or script",
		from: under("pkg", "extender", "deviceplugin", "kubectl-inspect-gpushare", "simulator"),
		to:   []string{module + "/test", module + "/hack"}},
}

// listed is what go list says of one package.
type listed struct {
	ImportPath string
	Imports    []string
}

// TestImportArrows: the import graph keeps the arrows the architecture
// promises (no arrow back up, the allocator free of client-go, the
// simulator and the build tooling out of the product), for the root
// module's product code; tests may import what they like.
func TestImportArrows(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(out)
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the module has dozens", len(pkgs))
	}
	for _, a := range arrows {
		t.Run(a.name, func(t *testing.T) {
			for _, p := range pkgs {
				if !a.from(p.ImportPath) || a.except != nil && a.except(p.ImportPath) {
					continue
				}
				for _, imp := range p.Imports {
					if slices.ContainsFunc(a.to, func(to string) bool { return imp == to || strings.HasPrefix(imp, to+"/") }) {
						t.Errorf("%s imports %s", strings.TrimPrefix(p.ImportPath, module+"/"), imp)
					}
				}
			}
		})
	}
}
