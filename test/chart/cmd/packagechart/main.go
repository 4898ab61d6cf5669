// Command packagechart packages manifests/charts/gpushare for a release,
// as `helm package --version X --app-version vX` would, with Helm's own
// Go packages (no helm binary needed), its images' registry defaulting to
// --registry. `make release` runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpushare/gpushare/test/chart"
)

func main() {
	version := flag.String("version", "", "the release version, vMAJOR.MINOR.PATCH[-PRERELEASE]: the chart's version without the v, its appVersion with it")
	registry := flag.String("registry", "", "the images' default image.registry, HOST[:PORT][/PATH] (where make publish pushes them); empty: values.yaml's")
	out := flag.String("out", ".", "the directory to write gpushare-VERSION.tgz into")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil { //nolint:gosec // G301: release files are public
		fmt.Fprintln(os.Stderr, "packagechart:", err)
		os.Exit(1)
	}
	p, err := chart.Package(*version, *registry, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "packagechart:", err)
		os.Exit(1)
	}
	fmt.Println(p)
}
