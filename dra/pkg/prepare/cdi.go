package prepare

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpushare/gpushare/pkg/isolation"
)

// CDI names of the claims' devices.
const (
	// ClaimCDIKind is the kind of the claims' CDI devices: a claim's
	// request gets the device ClaimCDIKind=<claim UID>-<request>.
	ClaimCDIKind = "gpushare.io/gpu-claim"
	// ClaimSpecPrefix starts the name of each claim's spec file in the CDI
	// directory: gpushare.io-gpu-claim_<claim UID>.yaml.
	ClaimSpecPrefix = "gpushare.io-gpu-claim_"
)

// ClaimEdits are the container edits of one request of a claim.
type ClaimEdits struct {
	// Request is the request's name, with its subrequest if any.
	Request string
	// Env is the environment, "NAME=value" sorted by name.
	Env []string
	// Mounts are host directories to bind-mount in mps mode.
	Mounts []isolation.Mount
}

// ClaimSpecs writes one CDI spec file per claim into a directory: each
// request of the claim is one device, named <claim UID>-<request>, that
// carries the request's container edits. A new file for a claim replaces
// the old; the runtime reads them when it creates a container.
type ClaimSpecs struct {
	dir string
}

// NewClaimSpecs returns the writer of claim specs in dir, creating it.
func NewClaimSpecs(dir string) (*ClaimSpecs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // runtimes read CDI specs
		return nil, fmt.Errorf("creating the CDI directory %s: %w", dir, err)
	}
	return &ClaimSpecs{dir: dir}, nil
}

// path is the spec file of a claim.
func (c *ClaimSpecs) path(uid types.UID) string {
	return filepath.Join(c.dir, ClaimSpecPrefix+string(uid)+".yaml")
}

// DeviceID is the qualified CDI name of a claim's request.
func DeviceID(uid types.UID, request string) string {
	return ClaimCDIKind + "=" + deviceName(uid, request)
}

// deviceName is a request's device name in its claim's spec: a request
// "gpu" of claim 0f3c… is "0f3c…-gpu"; a subrequest's "/" becomes "-".
func deviceName(uid types.UID, request string) string {
	return string(uid) + "-" + strings.ReplaceAll(request, "/", "-")
}

// Write writes the spec of a claim with one device per request.
func (c *ClaimSpecs) Write(uid types.UID, edits []ClaimEdits) error {
	spec := &cdispec.Spec{Kind: ClaimCDIKind}
	for _, e := range edits {
		d := cdispec.Device{Name: deviceName(uid, e.Request), ContainerEdits: cdispec.ContainerEdits{Env: e.Env}}
		for _, m := range e.Mounts {
			mode := "rw"
			if m.ReadOnly {
				mode = "ro"
			}
			d.ContainerEdits.Mounts = append(d.ContainerEdits.Mounts, &cdispec.Mount{
				HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: "bind", Options: []string{"rbind", mode},
			})
		}
		spec.Devices = append(spec.Devices, d)
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("finding the CDI version of claim %s's spec: %w", uid, err)
	}
	spec.Version = v
	return isolation.WriteCDISpec(c.path(uid), spec)
}

// Remove deletes a claim's spec; a missing one is no error.
func (c *ClaimSpecs) Remove(uid types.UID) error {
	if err := os.Remove(c.path(uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the CDI spec of claim %s: %w", uid, err)
	}
	return nil
}

// Claims returns the UIDs of the claims that have a spec file, sorted.
func (c *ClaimSpecs) Claims() ([]types.UID, error) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("listing the CDI directory %s: %w", c.dir, err)
	}
	var out []types.UID
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ClaimSpecPrefix) && strings.HasSuffix(name, ".yaml") {
			out = append(out, types.UID(strings.TrimSuffix(strings.TrimPrefix(name, ClaimSpecPrefix), ".yaml")))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
