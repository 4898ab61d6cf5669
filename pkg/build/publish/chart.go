package publish

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// The media types of a Helm chart in an OCI registry, as Helm's own
// `helm push` writes them and `helm pull` and `helm install oci://` read
// them (helm.sh/helm/v3/pkg/registry).
const (
	// ChartConfigMediaType is the config's: Chart.yaml as JSON.
	ChartConfigMediaType types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	// ChartLayerMediaType is the one layer's: the chart package itself.
	ChartLayerMediaType types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// chartPackage is what publishing needs of a chart package.
type chartPackage struct {
	path string
	// data is the package, pushed as it is.
	data []byte
	// config is Chart.yaml as JSON, the artifact's config.
	config []byte
	// name, version and description are Chart.yaml's.
	name, version, description string
	// registry is values.yaml's image.registry.
	registry string
}

// readChart reads the chart package at path: its Chart.yaml and the
// images' registry its values.yaml defaults to.
func readChart(path string) (chartPackage, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the release's own file
	if err != nil {
		return chartPackage{}, fmt.Errorf("reading the chart package: %w (make release writes it)", err)
	}
	files, err := chartFiles(data, "Chart.yaml", "values.yaml")
	if err != nil {
		return chartPackage{}, fmt.Errorf("chart package %s: %w", path, err)
	}
	c := chartPackage{path: path, data: data}
	var meta struct {
		Name, Version, Description string
	}
	if err := yaml.Unmarshal(files["Chart.yaml"], &meta); err != nil {
		return chartPackage{}, fmt.Errorf("chart package %s: Chart.yaml: %w", path, err)
	}
	c.name, c.version, c.description = meta.Name, meta.Version, meta.Description
	if c.config, err = yaml.YAMLToJSON(files["Chart.yaml"]); err != nil {
		return chartPackage{}, fmt.Errorf("chart package %s: Chart.yaml: %w", path, err)
	}
	var values struct {
		Image struct {
			Registry string `json:"registry"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(files["values.yaml"], &values); err != nil {
		return chartPackage{}, fmt.Errorf("chart package %s: values.yaml: %w", path, err)
	}
	c.registry = values.Image.Registry
	return c, nil
}

// chartFiles returns the named files of the chart directory in the
// gzipped tar data (gpushare/NAME).
func chartFiles(data []byte, names ...string) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoChart, err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want["gpushare/"+n] = true
	}
	out := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNoChart, err)
		}
		if !want[hdr.Name] {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", hdr.Name, err)
		}
		out[hdr.Name[len("gpushare/"):]] = b
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("%w: no gpushare/%s", errNoChart, n)
		}
	}
	return out, nil
}

// rawManifest is a manifest to put as it is.
type rawManifest struct {
	data      []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.data, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }

// PushChart pushes the chart package at pkg as Helm's OCI artifact to
// REGISTRY/charts/gpushare:X.Y.Z (X.Y.Z: its Chart.yaml version), as
// `helm push` would, and returns the reference and the manifest's digest.
// opts are go-containerregistry's (credentials, transport, context).
func PushChart(registry, pkg string, opts ...remote.Option) (name.Tag, v1.Hash, error) {
	c, err := readChart(pkg)
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	return pushChart(registry, c, opts)
}

// pushChart pushes the read chart package c to registry.
func pushChart(registry string, c chartPackage, opts []remote.Option) (name.Tag, v1.Hash, error) {
	ref, err := name.NewTag(registry + "/" + ChartRepository + ":" + c.version)
	if err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("naming the chart: %w", err)
	}
	manifest, blobs, err := ChartManifest(c.config, c.data, map[string]string{
		"org.opencontainers.image.title":       c.name,
		"org.opencontainers.image.version":     c.version,
		"org.opencontainers.image.description": c.description,
	})
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	for _, b := range blobs {
		if err := remote.WriteLayer(ref.Repository, b, opts...); err != nil {
			return name.Tag{}, v1.Hash{}, fmt.Errorf("pushing the chart's blobs to %s: %w", ref.Repository, err)
		}
	}
	m := rawManifest{data: manifest, mediaType: types.OCIManifestSchema1}
	if err := remote.Put(ref, m, opts...); err != nil {
		return name.Tag{}, v1.Hash{}, fmt.Errorf("pushing the chart's manifest to %s: %w", ref, err)
	}
	digest, _, err := v1.SHA256(bytes.NewReader(manifest))
	return ref, digest, err
}

// ChartManifest is the OCI manifest of a chart package as Helm stores it
// (config: Chart.yaml as JSON; one layer: the package), with annotations,
// and the two blobs it names.
func ChartManifest(config, chart []byte, annotations map[string]string) ([]byte, []v1.Layer, error) {
	blobs := []v1.Layer{static.NewLayer(config, ChartConfigMediaType), static.NewLayer(chart, ChartLayerMediaType)}
	descs := make([]v1.Descriptor, len(blobs))
	for i, b := range blobs {
		d, err := b.Digest()
		if err != nil {
			return nil, nil, err
		}
		size, err := b.Size()
		if err != nil {
			return nil, nil, err
		}
		mt, err := b.MediaType()
		if err != nil {
			return nil, nil, err
		}
		descs[i] = v1.Descriptor{MediaType: mt, Size: size, Digest: d}
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        descs[0],
		Layers:        descs[1:],
		Annotations:   annotations,
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the chart's manifest: %w", err)
	}
	return data, blobs, nil
}
