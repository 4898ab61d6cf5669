package oci

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadIndex: a layout whose index.json is anything. Read never
// panics, never reads outside the layout (a digest naming ../ is refused
// by its form), and accepts only an index reaching the one manifest whose
// blobs verify.
func FuzzReadIndex(f *testing.F) {
	dir := filepath.Join(f.TempDir(), "layout")
	src := filepath.Join(f.TempDir(), "app")
	if err := os.WriteFile(src, []byte("#!app\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	desc, err := Write(dir, testImage(src))
	if err != nil {
		f.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(index))
	f.Add(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:../../../etc/passwd","size":10}]}`)
	f.Add(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + desc.Digest.String() + `","size":-1}]}`)
	f.Add(`{"manifests":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		if err := os.WriteFile(filepath.Join(dir, "index.json"), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := Read(dir)
		if err != nil {
			return
		}
		if got := l.Descriptor.Digest; got != desc.Digest {
			t.Fatalf("Read accepted manifest %s; only %s verifies", got, desc.Digest)
		}
	})
}
