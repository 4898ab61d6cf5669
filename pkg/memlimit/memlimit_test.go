package memlimit

import (
	"errors"
	"runtime/debug"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
)

func files(kv ...string) fstest.MapFS {
	m := fstest.MapFS{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1])}
	}
	return m
}

func TestLimit(t *testing.T) {
	const mib = int64(1) << 20
	for _, tc := range []struct {
		name     string
		fsys     fstest.MapFS
		want     int64
		wantFile string
		wantErr  error
	}{{
		name: "v2 in a cgroup namespace: the mount's root",
		fsys: files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "536870912\n"),
		want: 512 * mib, wantFile: "sys/fs/cgroup/memory.max",
	}, {
		name: "v2 without a namespace: the lowest of the cgroup and its ancestors",
		fsys: files("proc/self/cgroup", "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max", "268435456\n",
			"sys/fs/cgroup/kubepods/memory.max", "1073741824\n"),
		want: 256 * mib, wantFile: "sys/fs/cgroup/kubepods/pod1/memory.max",
	}, {
		name:    "v2 without limits",
		fsys:    files("proc/self/cgroup", "0::/a\n", "sys/fs/cgroup/a/memory.max", "max\n"),
		wantErr: ErrNoLimit,
	}, {
		name: "v1: the memory hierarchy's file, the host's path missing in the container",
		fsys: files("proc/self/cgroup", "12:cpu,cpuacct:/kubepods/x\n11:memory:/kubepods/pod1/c1\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "402653184\n"),
		want: 384 * mib, wantFile: "sys/fs/cgroup/memory/memory.limit_in_bytes",
	}, {
		name: "v1 unlimited (page counter max)",
		fsys: files("proc/self/cgroup", "11:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"),
		wantErr: ErrNoLimit,
	}, {
		name: "hybrid: the lower of v1's and v2's",
		fsys: files("proc/self/cgroup", "11:memory:/\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes", "402653184\n",
			"sys/fs/cgroup/memory.max", "536870912\n"),
		want: 384 * mib, wantFile: "sys/fs/cgroup/memory/memory.limit_in_bytes",
	}, {
		name:    "no limit files",
		fsys:    files("proc/self/cgroup", "0::/\n"),
		wantErr: ErrNoLimit,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, file, err := Limit(tc.fsys)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff([]any{tc.want, tc.wantFile}, []any{got, file}); diff != "" {
				t.Errorf("Limit (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLimitErrors(t *testing.T) {
	if _, _, err := Limit(files()); err == nil || errors.Is(err, ErrNoLimit) {
		t.Errorf("no /proc/self/cgroup: err %v, want a read error", err)
	}
	if _, _, err := Limit(files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "lots\n")); err == nil {
		t.Error("memory.max \"lots\": no error")
	}
}

func TestApply(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	logger, _ := ktesting.NewTestContext(t)
	limited := files("proc/self/cgroup", "0::/\n", "sys/fs/cgroup/memory.max", "1000000000\n")
	noEnv := func(string) string { return "" }

	if got := Apply(logger, limited, noEnv, 0.9); got != 900000000 {
		t.Errorf("Apply = %d, want 900000000", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 900000000 {
		t.Errorf("the runtime's limit is %d, want 900000000", got)
	}
	debug.SetMemoryLimit(123 << 20)
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "123MiB"
		}
		return ""
	}
	if got := Apply(logger, limited, env, 0.9); got != 0 {
		t.Errorf("with GOMEMLIMIT set: Apply = %d, want 0", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 123<<20 {
		t.Errorf("with GOMEMLIMIT set the runtime's limit became %d", got)
	}
	if got := Apply(logger, files("proc/self/cgroup", "0::/\n"), noEnv, 0.9); got != 0 {
		t.Errorf("without a cgroup limit: Apply = %d, want 0", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 123<<20 {
		t.Errorf("without a cgroup limit the runtime's limit became %d", got)
	}
}
