package ociimage

// Media types of the OCI image specification v1.
const (
	MediaTypeIndex     = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest  = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig    = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Annotations set on the index's manifest descriptor.
const (
	// AnnotationRefName is the image's tag; skopeo and podman find an
	// image in a layout by it ("oci-archive:FILE:TAG").
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationContainerdName is the full reference (REPOSITORY:TAG) under
	// which containerd and Docker 25+ store a loaded OCI image.
	AnnotationContainerdName = "io.containerd.image.name"
)

// Descriptor points at a blob: its media type, digest ("sha256:<hex>") and
// size in bytes.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is the operating system and CPU an image runs on, in GOOS and
// GOARCH spelling ("linux", "amd64"); Variant is "v8" for arm64.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

// Index is index.json, the layout's entry point.
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Manifest lists an image's config and layers, bottom layer first.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Config is the image configuration blob.
type Config struct {
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Variant      string        `json:"variant,omitempty"`
	Config       RuntimeConfig `json:"config"`
	RootFS       RootFS        `json:"rootfs"`
}

// RuntimeConfig is what a runtime uses to start a container from the image.
type RuntimeConfig struct {
	// User is "UID:GID"; keep it numeric, since kubelet enforces
	// runAsNonRoot only on a numeric user.
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// RootFS lists the digests of the uncompressed layers (diff IDs), bottom
// first, one per manifest layer.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// dockerManifest is one element of manifest.json, the docker-archive index
// that `docker load` reads when it predates OCI support (Docker < 25).
type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}
