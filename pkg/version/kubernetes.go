package version

import (
	"fmt"
	"strconv"
	"strings"
)

// KubernetesMinor returns the minor version of a Kubernetes version
// v1.MINOR[.PATCH[-PRERELEASE]], the v optional: 37 for v1.37.2.
func KubernetesMinor(v string) (int, error) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "1" {
		return 0, fmt.Errorf("parsing Kubernetes version %q: want v1.MINOR[.PATCH]", v)
	}
	minorStr, _, _ := strings.Cut(parts[1], "-")
	minor, err := strconv.Atoi(minorStr)
	if err != nil || minor < 0 {
		return 0, fmt.Errorf("parsing Kubernetes version %q: want v1.MINOR[.PATCH]", v)
	}
	return minor, nil
}
