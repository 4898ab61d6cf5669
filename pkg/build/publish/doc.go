// Package publish pushes a release's four images and its Helm chart to an
// OCI registry with go-containerregistry, as `make publish` does.
package publish
