package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Claims()) != 0 {
		t.Fatalf("a new checkpoint holds %v", c.Claims())
	}
	a := Claim{Namespace: "default", Name: "a", Devices: []Device{{Request: "gpu", Pool: "node-a", Device: "gpu-0", UUID: "GPU-0", Index: 0, MiB: 4096, ShareID: "s1", CDIDeviceIDs: []string{"k=v"}}}}
	b := Claim{Namespace: "default", Name: "b", Devices: []Device{{Request: "gpu", Pool: "node-a", Device: "gpu-1", UUID: "GPU-1", Index: 1, MiB: 8192}}}
	for uid, cl := range map[types.UID]Claim{"uid-a": a, "uid-b": b} {
		if err := c.Put(uid, cl); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete("uid-b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete("uid-unknown"); err != nil {
		t.Errorf("Delete of an unknown claim: %v", err)
	}
	reopened, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[types.UID]Claim{"uid-a": a}, reopened.Claims()); diff != "" {
		t.Errorf("claims after reopening (-want +got):\n%s", diff)
	}
	if got, ok := reopened.Get("uid-a"); !ok || got.Name != "a" {
		t.Errorf("Get(uid-a) = %+v, %v", got, ok)
	}
	// No temporary file is left beside it.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != File {
		t.Errorf("directory holds %v, want only %s", entries, File)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{name: "torn", content: "{", want: "move it away to start with no prepared claims"},
		{name: "other version", content: `{"version": 2, "claims": {}}`, want: "version 2, this driver reads 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, File), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPutKeepsTheRecordWhenTheWriteFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The directory becomes a file: no write can succeed, as root neither.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("uid-a", Claim{Name: "a"}); err == nil {
		t.Fatal("Put into a read-only directory succeeded")
	}
	if _, ok := c.Get("uid-a"); ok {
		t.Error("a claim whose write failed is recorded")
	}
}
