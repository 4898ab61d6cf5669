package chart

import (
	"fmt"

	"helm.sh/helm/v3/pkg/chartutil"

	gpversion "github.com/gpushare/gpushare/pkg/version"
)

// Package writes the chart as `helm package` does, stamped for release
// version (v0.1.0: chart version 0.1.0, appVersion v0.1.0, which is the
// images' default tag), into the directory out, and returns the package's
// path (out/gpushare-0.1.0.tgz).
func Package(version, out string) (string, error) {
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
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("validating the chart: %w", err)
	}
	p, err := chartutil.Save(c, out)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	return p, nil
}
