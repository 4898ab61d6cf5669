package chart

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"helm.sh/helm/v3/pkg/chartutil"

	gpversion "github.com/gpushare/gpushare/pkg/version"
)

// registryLine is values.yaml's image.registry line, after the comments
// above it, so that packaging replaces its value and keeps the comments.
var registryLine = regexp.MustCompile(`(?m)^(image:\n(?:  #.*\n)*  registry: ).*$`)

// Package writes the chart as `helm package` does, stamped for release
// version (v0.1.0: chart version 0.1.0, appVersion v0.1.0, which is the
// images' default tag) and for registry (the images' default
// image.registry, REGISTRY/, where `make publish` pushes them; empty:
// values.yaml's), into the directory out, and returns the package's path
// (out/gpushare-0.1.0.tgz).
func Package(version, registry, out string) (string, error) {
	chartVersion, err := gpversion.Chart(version)
	if err != nil {
		return "", err
	}
	c, err := Load()
	if err != nil {
		return "", err
	}
	c.Metadata.Version = chartVersion
	c.Metadata.AppVersion = version
	if registry != "" {
		registry = strings.TrimSuffix(registry, "/") + "/"
		found := false
		for _, f := range c.Raw {
			if f.Name != chartutil.ValuesfileName {
				continue
			}
			if !registryLine.Match(f.Data) {
				return "", fmt.Errorf("values.yaml has no image.registry line right under image: and its comments to stamp %s into", registry)
			}
			f.Data = registryLine.ReplaceAll(f.Data, []byte("${1}"+strconv.Quote(registry)))
			found = true
		}
		if !found {
			return "", fmt.Errorf("the chart has no %s", chartutil.ValuesfileName)
		}
		img, ok := c.Values["image"].(map[string]any)
		if !ok {
			return "", fmt.Errorf("values.yaml has no image: map")
		}
		img["registry"] = registry
	}
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("validating the chart: %w", err)
	}
	if err := chartutil.ValidateAgainstSchema(c, c.Values); err != nil {
		return "", fmt.Errorf("validating the chart's defaults: %w", err)
	}
	p, err := chartutil.Save(c, out)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	return p, nil
}
