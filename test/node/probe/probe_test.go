package probe

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	r := Report{
		UID: 65532, GID: 65532,
		Env:    []string{"PATH=/usr/local/bin", "NVIDIA_VISIBLE_DEVICES=GPU-1", "MULTI=a\nb", "EMPTY="},
		Mounts: []Mount{{Target: "/dev/shm", FSType: "tmpfs", Source: "shm"}, {Target: "/with space", FSType: "ext4", Source: "/dev/vda 1"}},
	}
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	got, err := Parse("some earlier line\n" + b.String() + "== gpuprobe\nuid=1 gid=1\n")
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, b.String())
	}
	want := r
	want.Env = []string{"EMPTY=", "NVIDIA_VISIBLE_DEVICES=GPU-1", "PATH=/usr/local/bin"} // sorted, the multi-line one left out
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if v, ok := got.Getenv("NVIDIA_VISIBLE_DEVICES"); !ok || v != "GPU-1" {
		t.Errorf("Getenv = %q, %v", v, ok)
	}
	if _, ok := got.Getenv("NVIDIA"); ok {
		t.Error("Getenv matched a prefix")
	}
	if m, ok := got.Mounted("/dev/shm"); !ok || m.FSType != "tmpfs" {
		t.Errorf("Mounted(/dev/shm) = %v, %v", m, ok)
	}
}

func TestParseIncomplete(t *testing.T) {
	for _, text := range []string{"", "== gpuprobe\nuid=0 gid=0\n== env\nA=b\n", "== end\n"} {
		if _, err := Parse(text); !errors.Is(err, ErrIncomplete) {
			t.Errorf("Parse(%q) = %v, want ErrIncomplete", text, err)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
100 22 0:50 / /var/lib/kubelet/pods/x/volumes/kubernetes.io~projected/kube-api-access-1 rw,relatime - tmpfs tmpfs rw,size=1024k
101 22 0:51 / /mnt/with\040space rw - overlay overlay rw,lowerdir=/a
`
	want := []Mount{
		{Target: "/", FSType: "ext4", Source: "/dev/vda"},
		{Target: "/var/lib/kubelet/pods/x/volumes/kubernetes.io~projected/kube-api-access-1", FSType: "tmpfs", Source: "tmpfs"},
		{Target: "/mnt/with space", FSType: "overlay", Source: "overlay"},
	}
	if diff := cmp.Diff(want, ParseMountinfo(in)); diff != "" {
		t.Errorf("ParseMountinfo (-want +got):\n%s", diff)
	}
}
