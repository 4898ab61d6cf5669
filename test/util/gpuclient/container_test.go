package gpuclient

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCardNodes reads cards from a directory laid out as the driver's
// /proc/driver/nvidia/gpus.
func TestCardNodes(t *testing.T) {
	gpus := t.TempDir()
	for _, c := range []struct{ pci, uuid, minor string }{
		{"0000:07:00.0", "GPU-aaaa", "1"},
		{"0000:0b:00.0", "GPU-bbbb", "0"},
	} {
		dir := filepath.Join(gpus, c.pci)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		info := "Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t\t " + c.uuid + "\nDevice Minor: \t\t " + c.minor + "\n"
		if err := os.WriteFile(filepath.Join(dir, "information"), []byte(info), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, visible string
		want          []string
		wantErr       bool
	}{
		{name: "by UUID", visible: "GPU-bbbb", want: []string{"/dev/nvidia0"}},
		{name: "by index", visible: "0", want: []string{"/dev/nvidia1"}},
		{name: "two, in the variable's order", visible: "GPU-bbbb,GPU-aaaa", want: []string{"/dev/nvidia0", "/dev/nvidia1"}},
		{name: "all", visible: "all", want: []string{"/dev/nvidia1", "/dev/nvidia0"}},
		{name: "void", visible: "void"},
		{name: "unset", visible: ""},
		{name: "unknown card", visible: "GPU-cccc", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CardNodes(tc.visible, gpus)
			if (err != nil) != tc.wantErr {
				t.Fatalf("CardNodes(%q) error = %v, want error %v", tc.visible, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CardNodes(%q) (-want +got):\n%s", tc.visible, diff)
			}
		})
	}
}

// TestContainer runs a container as StartIn does, with a device standing
// for a card (/dev/loop-control, 10:237: a character device root opens,
// not among the devices runc creates or allows by default), where runc
// runs (as root; make test
// installs runc for the real-node tests): the container sees its
// environment, its mounts at their container paths, its own PID
// namespace and the device it was given, not the host's others, and the
// device cgroup refuses a device it was not given (/dev/kmsg, 1:11, which
// root opens for writing otherwise) even when the container makes the node
// itself.
func TestContainer(t *testing.T) {
	runc := Runc()
	if runc == "" || os.Geteuid() != 0 {
		t.Skip("needs root and runc")
	}
	for _, p := range []string{"/dev/loop-control", "/dev/kmsg"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s: %v", p, err)
		}
	}
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "pipe"), []byte("daemon here"), 0o600); err != nil {
		t.Fatal(err)
	}
	const script = `set -u
echo "env=$GPUSHARE_ISOLATION"
echo "mount=$(cat /tmp/nvidia-mps/pipe)"
echo "pid=$$"
test -c /dev/loop-control && exec 3<>/dev/loop-control && echo "given=opened"
mknod /dev/kmsg2 c 1 11 && echo "made=yes"
(exec 4>/dev/kmsg2) 2>/dev/null && echo "other=opened" || echo "other=refused"
test -e /dev/kmsg || echo "host=absent"
`
	c := Container{
		Env:    map[string]string{"GPUSHARE_ISOLATION": "mps"},
		Mounts: []Mount{{HostPath: shared, ContainerPath: "/tmp/nvidia-mps"}},
	}
	cl := startContainer(t, runc, []string{"/bin/sh", "-c", script}, c, nil, []string{"/dev/loop-control"})
	if err := cl.cmd.Wait(); err != nil {
		t.Fatalf("container: %v\n%s", err, cl.out)
	}
	want := "env=mps\nmount=daemon here\npid=1\ngiven=opened\nmade=yes\nother=refused\nhost=absent\n"
	if diff := cmp.Diff(want, cl.out.String()); diff != "" {
		t.Errorf("the container's output (-want +got):\n%s", diff)
	}
}
