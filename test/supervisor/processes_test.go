package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadProcesses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string // "" : no file
		want    []Process
		wantErr bool
	}{
		{name: "no file"},
		{name: "named and unnamed", content: "12 /usr/bin/etcd etcd\n34 /opt/kube-apiserver\n\n",
			want: []Process{{PID: 12, Exe: "/usr/bin/etcd", Name: "etcd"}, {PID: 34, Exe: "/opt/kube-apiserver", Name: "kube-apiserver"}}},
		{name: "short line skipped", content: "56\n78 /bin/x y\n", want: []Process{{PID: 78, Exe: "/bin/x", Name: "y"}}},
		{name: "not a PID", content: "x /bin/x\n", wantErr: true},
		{name: "init is never ours", content: "1 /sbin/init\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "processes")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ReadProcesses(path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("processes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDownStopsOnlyRecordedExecutables: with no supervisor running, Down
// stops a recorded process that still runs its executable, and leaves
// alone one whose PID now runs another (a reused PID is never ours).
func TestDownStopsOnlyRecordedExecutables(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd
	}
	ours, reused := start(), start()
	f := Files{Dir: t.TempDir(), PID: "demo.pid", Ready: "ready", Failed: "failed", Log: "demo.log"}
	list := fmt.Sprintf("%d sleep ours\n%d /usr/bin/not-sleep reused\n", ours.Process.Pid, reused.Process.Pid)
	if err := os.WriteFile(f.Path("processes"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- ours.Wait() }()

	var out bytes.Buffer
	n, err := Down(f, "processes", &out)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || !strings.Contains(out.String(), fmt.Sprintf("stopping ours (pid %d)", ours.Process.Pid)) || strings.Contains(out.String(), "reused") {
		t.Errorf("Down stopped %d, said %q; want it to stop ours alone", n, out.String())
	}
	if err := <-exited; err == nil {
		t.Error("the recorded process exited 0; want it stopped by a signal")
	}
	if _, err := Cmdline(reused.Process.Pid); err != nil {
		t.Errorf("the process whose executable differs was stopped: %v", err)
	}
}
