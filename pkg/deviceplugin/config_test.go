package deviceplugin

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
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
	err = Run(context.Background(), Config{NodeName: "n1", Unit: gpushare.UnitMiB, DeviceListStrategy: StrategyEnvvar,
		KubeletDir: t.TempDir(), Client: fake.NewClientset(), GPUs: gpu.NewFake(devs)})
	if err == nil || !strings.Contains(err.Error(), "use --memory-unit GiB") {
		t.Fatalf("Run error = %v, want a refusal naming GiB", err)
	}
}
