package driver

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestParseFlagsAndValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, c *Config)
	}{{
		name: "defaults",
		args: []string{"--node-name=n1"},
		check: func(t *testing.T, c *Config) {
			got := []string{c.Unit, string(c.Order), c.Isolation, c.PluginDataDir(), c.RegistryDir(), c.CDIDir, c.MPSDaemons}
			want := []string{gpushare.UnitGiB, string(devices.OrderIndex), "auto", "/var/lib/kubelet/plugins/gpu.gpushare.io", "/var/lib/kubelet/plugins_registry", "/var/run/cdi", "plugin"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "MiB, smallest first",
		args: []string{"--node-name=n1", "--memory-unit=MiB", "--device-order=smallest-first", "--kubelet-dir=/k"},
		check: func(t *testing.T, c *Config) {
			if c.Unit != gpushare.UnitMiB || c.Order != devices.OrderSmallestFirst || c.PluginDataDir() != "/k/plugins/gpu.gpushare.io" {
				t.Errorf("config = %+v", c)
			}
		},
	}, {
		name:    "every mistake named",
		args:    []string{"--memory-unit=KiB", "--device-order=random", "--isolation=strict", "--fake-control=/x"},
		wantErr: "--node-name (or NODE_NAME) is required",
	}, {
		name:    "bad order",
		args:    []string{"--node-name=n1", "--device-order=random"},
		wantErr: `--device-order "random": want one of index, smallest-first, largest-first`,
	}, {
		name:    "relative paths",
		args:    []string{"--node-name=n1", "--cdi-dir=cdi", "--kubelet-dir=kubelet"},
		wantErr: "--cdi-dir \"cdi\" must be absolute\n--kubelet-dir \"kubelet\" must be absolute",
	}, {
		name: "MPS daemons in their own container",
		args: []string{"--node-name=n1", "--mps-daemons=external"},
		check: func(t *testing.T, c *Config) {
			if c.MPSDaemons != "external" {
				t.Errorf("MPSDaemons = %q, want external", c.MPSDaemons)
			}
		},
	}, {
		name:    "MPS daemons nowhere known",
		args:    []string{"--node-name=n1", "--mps-daemons=sidecar"},
		wantErr: `--mps-daemons "sidecar": want plugin or external`,
	}, {
		name:    "MPS root too long for MPS's sockets",
		args:    []string{"--node-name=n1", "--mps-root=/var/lib/gpushare/mps-daemons/pipes-xxx"},
		wantErr: "is too long: a card's MPS pipe directory under it would be 85 bytes",
	}, {
		name:    "fake driver without fake GPUs",
		args:    []string{"--node-name=n1", "--fake-driver=615.00"},
		wantErr: "--fake-driver needs --fake-gpus",
	}, {
		name:    "fake control without fake GPUs",
		args:    []string{"--node-name=n1", "--fake-control=/x"},
		wantErr: "--fake-control needs --fake-gpus",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			cfg, _, err := ParseFlags(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate: err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, &cfg)
		})
	}
}
