package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// File is the checkpoint's name in the plugin's data directory.
const File = "checkpoint.json"

// checkpointVersion is the format written; a file with another is refused.
const checkpointVersion = 1

// Device is one allocation result of a prepared claim.
type Device struct {
	// Request is the result's request name, with its subrequest if any.
	Request string `json:"request"`
	// Pool and Device name the device: the node and gpu-<index>.
	Pool   string `json:"pool"`
	Device string `json:"device"`
	// UUID and Index are the card's.
	UUID  string `json:"uuid"`
	Index int    `json:"index"`
	// MiB is the memory of the card the result holds.
	MiB int64 `json:"mib"`
	// ShareID is the allocation's share of the device; "" when none.
	ShareID string `json:"shareID,omitempty"`
	// CDIDeviceIDs are the CDI devices the claim's containers get for
	// this result. Only the first result of each request has them.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

// Claim is a claim the driver prepared.
type Claim struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Devices   []Device `json:"devices"`
}

// checkpointData is the file's content.
type checkpointData struct {
	Version int `json:"version"`
	// Claims: claim UID -> what was prepared for it.
	Claims map[types.UID]Claim `json:"claims"`
}

// Checkpoint is the file that records the prepared claims, so that they
// outlive the driver's process. It is not safe for concurrent use; the
// driver's State holds it under its lock.
type Checkpoint struct {
	path string
	// claims: claim UID -> its prepared devices, as in the file.
	claims map[types.UID]Claim
}

// Open reads the checkpoint at dir/File, or starts an empty one when there
// is none. A file it cannot parse is an error: the claims it holds would
// otherwise be forgotten, and their memory given to others.
func Open(dir string) (*Checkpoint, error) {
	c := &Checkpoint{path: filepath.Join(dir, File), claims: map[types.UID]Claim{}}
	data, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint: %w", err)
	}
	var d checkpointData
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("parsing the checkpoint %s: %w (move it away to start with no prepared claims; kubelet prepares its pods' claims again)", c.path, err)
	}
	if d.Version != checkpointVersion {
		return nil, fmt.Errorf("parsing the checkpoint %s: version %d, this driver reads %d", c.path, d.Version, checkpointVersion)
	}
	if d.Claims != nil {
		c.claims = d.Claims
	}
	return c, nil
}

// Path is the checkpoint file's path.
func (c *Checkpoint) Path() string { return c.path }

// Get returns the prepared claim with this UID.
func (c *Checkpoint) Get(uid types.UID) (Claim, bool) {
	p, ok := c.claims[uid]
	return p, ok
}

// Claims returns a copy of the map of prepared claims: UID -> claim.
func (c *Checkpoint) Claims() map[types.UID]Claim {
	out := make(map[types.UID]Claim, len(c.claims))
	for k, v := range c.claims {
		out[k] = v
	}
	return out
}

// Put records a prepared claim and writes the file; on error the record is
// as before.
func (c *Checkpoint) Put(uid types.UID, p Claim) error {
	old, had := c.claims[uid]
	c.claims[uid] = p
	if err := c.write(); err != nil {
		if had {
			c.claims[uid] = old
		} else {
			delete(c.claims, uid)
		}
		return err
	}
	return nil
}

// Delete forgets a claim and writes the file; deleting an unknown claim
// writes nothing.
func (c *Checkpoint) Delete(uid types.UID) error {
	old, had := c.claims[uid]
	if !had {
		return nil
	}
	delete(c.claims, uid)
	if err := c.write(); err != nil {
		c.claims[uid] = old
		return err
	}
	return nil
}

// write replaces the file atomically: a temporary file in the same
// directory, synced, renamed over it, and the directory synced.
func (c *Checkpoint) write() error {
	data, err := json.MarshalIndent(checkpointData{Version: checkpointVersion, Claims: c.claims}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the checkpoint: %w", err)
	}
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating the checkpoint's directory: %w", err)
	}
	return writeFileAtomic(c.path, data, 0o600)
}

// writeFileAtomic writes data to path through a hidden temporary file in
// its directory, synced and renamed, then syncs the directory. A reader, or
// a restart after a crash, sees the old content or the new, never a part.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // a no-op after the rename
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
