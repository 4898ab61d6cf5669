package deviceplugin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		return Config{NodeName: "n1", Unit: gpushare.UnitGiB, DeviceListStrategy: StrategyEnvvar, QPS: 5, Burst: 10}
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "no node", mutate: func(c *Config) { c.NodeName = "" }, wantErr: "--node-name (or NODE_NAME) is required"},
		{name: "bad unit", mutate: func(c *Config) { c.Unit = "GB" }, wantErr: `--memory-unit "GB": want GiB or MiB`},
		{name: "bad strategy", mutate: func(c *Config) { c.DeviceListStrategy = "volume" }, wantErr: `--device-list-strategy "volume": want one of envvar, volume-mounts, cdi-annotations, cdi-cri`},
		{name: "relative kubelet dir", mutate: func(c *Config) { c.KubeletDir = "var/lib/kubelet" }, wantErr: "must be absolute"},
		{name: "no QPS", mutate: func(c *Config) { c.QPS = 0 }, wantErr: "must be positive"},
		{name: "fake control without fake GPUs", mutate: func(c *Config) { c.FakeControl = "/tmp/control" }, wantErr: "--fake-control needs --fake-gpus"},
		{name: "external MPS daemons", mutate: func(c *Config) { c.MPSDaemons = MPSDaemonsExternal }},
		{name: "unknown MPS daemons", mutate: func(c *Config) { c.MPSDaemons = "sidecar" }, wantErr: `--mps-daemons "sidecar": want plugin or external`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.KubeletDir != DefaultKubeletDir || c.VerifyPeriod != DefaultVerifyPeriod || c.RecoveryWindow != gpu.DefaultRecoveryWindow ||
					c.PodResourcesSocket() != "/var/lib/kubelet/pod-resources/kubelet.sock" {
					t.Errorf("defaults not filled in: %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestRunRefusesAUnitThatBreaksKubelet: the plugin refuses to start rather
// than advertise a list kubelet cannot receive.
func TestRunRefusesAUnitThatBreaksKubelet(t *testing.T) {
	devs, err := gpu.ParseFakeGPUs("8xA100-SXM4:80GiB", "n1")
	if err != nil {
		t.Fatal(err)
	}
	err = runPlugin(context.Background(), Config{NodeName: "n1", Unit: gpushare.UnitMiB, DeviceListStrategy: StrategyEnvvar,
		KubeletDir: t.TempDir(), Client: fake.NewClientset(), GPUs: gpu.NewFake(devs)})
	if err == nil || !strings.Contains(err.Error(), "use --memory-unit GiB") {
		t.Fatalf("Run error = %v, want a refusal naming GiB", err)
	}
}

// TestRunIsolationAtStartup: an explicit mode the fake node cannot enforce
// stops the plugin naming what is missing; auto takes what it supports and
// publishes it in the inventory.
func TestRunIsolationAtStartup(t *testing.T) {
	tests := []struct {
		name       string
		fakeGPUs   string
		fakeDriver string
		isolation  string
		// runtime is the Node's containerRuntimeVersion; runtimeCDI
		// --runtime-cdi.
		runtime, runtimeCDI string
		wantErr             string
		wantModes           []gpushare.Isolation
	}{
		{name: "silent fake node, driver", fakeGPUs: "1xTesla-T4:16GiB", isolation: "driver",
			wantErr: "isolation driver: driver version unknown (fake node states no driver (--fake-driver): no NVIDIA driver); the container runtime does not apply CDI devices: container runtime \"\" unknown"},
		{name: "R550 on cgroup v1, driver", fakeGPUs: "1xTesla-T4:16GiB", fakeDriver: "550.54.15,cgroup-v1", isolation: "driver",
			wantErr: "isolation driver: driver 550.54.15 < 615.00 required; cgroup v1 (v2 required)"},
		{name: "silent fake node, auto", fakeGPUs: "2xTesla-T4:16GiB", isolation: "auto",
			wantModes: []gpushare.Isolation{gpushare.IsolationNone, gpushare.IsolationNone}},
		{name: "R615 fake node with a MIG card, auto", fakeGPUs: "1xTesla-T4:16GiB,1xA100:40GiB:mig", fakeDriver: "615.00", isolation: "auto",
			runtime: "containerd://2.1.4", wantModes: []gpushare.Isolation{gpushare.IsolationDriver, gpushare.IsolationNone}},
		// containerd 1.6 ignores the CDI devices that carry the limits: no
		// driver mode, whatever the driver (the real node found it).
		{name: "R615 on containerd 1.6, auto", fakeGPUs: "2xTesla-T4:16GiB", fakeDriver: "615.00", isolation: "auto",
			runtime: "containerd://1.6.20~ds1", wantModes: []gpushare.Isolation{gpushare.IsolationNone, gpushare.IsolationNone}},
		{name: "R615 on containerd 1.6, driver", fakeGPUs: "2xTesla-T4:16GiB", fakeDriver: "615.00", isolation: "driver",
			runtime: "containerd://1.6.20~ds1", wantErr: "containerd://1.6.20~ds1 ignores CDI devices"},
		{name: "R615 on containerd 1.7, driver", fakeGPUs: "2xTesla-T4:16GiB", fakeDriver: "615.00", isolation: "driver",
			runtime: "containerd://1.7.27", wantErr: "containerd://1.7.27 applies CDI devices only with enable_cdi = true"},
		{name: "R615 on containerd 1.7 said to apply CDI, driver", fakeGPUs: "2xTesla-T4:16GiB", fakeDriver: "615.00", isolation: "driver",
			runtime: "containerd://1.7.27", runtimeCDI: "true", wantModes: []gpushare.Isolation{gpushare.IsolationDriver, gpushare.IsolationDriver}},
		{name: "R615 on containerd 2, said not to apply CDI, auto", fakeGPUs: "1xTesla-T4:16GiB", fakeDriver: "615.00", isolation: "auto",
			runtime: "containerd://2.1.4", runtimeCDI: "false", wantModes: []gpushare.Isolation{gpushare.IsolationNone}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			n1 := util.MakeNode("n1").Obj()
			n1.Status.NodeInfo.ContainerRuntimeVersion = tc.runtime
			client := fake.NewClientset(n1)
			ready := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- runPlugin(ctx, Config{NodeName: "n1", Unit: gpushare.UnitGiB, DeviceListStrategy: StrategyCDICRI, KubeletDir: t.TempDir(),
					Client: client, FakeGPUs: tc.fakeGPUs, FakeDriver: tc.fakeDriver, Isolation: tc.isolation, RuntimeCDI: tc.runtimeCDI, CDIDir: t.TempDir(),
					OnReady: func(*handoff.Handoff) { close(ready) }})
			}()
			if tc.wantErr != "" {
				err := <-done
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("Run: %v", err)
			}
			var got []gpushare.Isolation
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if s, ok := n.Annotations[gpushare.AnnotationInventory]; ok {
					inv, err := gpushare.ParseInventory(s)
					if err != nil {
						t.Fatal(err)
					}
					got = nil
					for _, d := range inv.Devices {
						got = append(got, d.Isolation)
					}
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if diff := cmp.Diff(tc.wantModes, got); diff != "" {
				t.Errorf("inventory modes (-want +got):\n%s", diff)
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run after cancel: %v", err)
			}
		})
	}
}
