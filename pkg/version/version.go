// Package version holds the build's version, set by the Makefile with
// -ldflags "-X github.com/gpushare/gpushare/pkg/version.Version=...".
package version

// Version of this build; "dev" for a plain go build.
var Version = "dev"
