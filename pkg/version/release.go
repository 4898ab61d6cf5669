package version

import (
	"fmt"
	"regexp"
	"strings"
)

// releasePattern is a release version: v, then a semantic version.
var releasePattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// Chart checks that v is a release version, vMAJOR.MINOR.PATCH with an
// optional pre-release, e.g. v0.1.0 or v1.2.0-rc.1. It returns the Helm
// chart's version: the same without the v, as Helm wants semantic versions.
// The images' tags and the chart's appVersion keep the v.
func Chart(v string) (string, error) {
	if !releasePattern.MatchString(v) {
		return "", fmt.Errorf("version %q is not a release version vMAJOR.MINOR.PATCH[-PRERELEASE]: tag the commit (git tag v0.1.0) or pass VERSION=v0.1.0", v)
	}
	return strings.TrimPrefix(v, "v"), nil
}
