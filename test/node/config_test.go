package node

import (
	"encoding/json"
	"flag"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/test/util"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestConfigFiles pins the configuration files the node writes, for a
// data directory /data; each must also parse as its format.
func TestConfigFiles(t *testing.T) {
	l := layout{data: "/data"}
	tests := []struct {
		name, golden, got string
		parse             func(string) error
	}{
		{name: "containerd", golden: "containerd.toml", got: l.containerdConfigTOML("gpushare.test/pause:realnode")},
		{name: "containerd 2", golden: "containerd2.toml", got: l.containerd2ConfigTOML("gpushare.test/pause:realnode", "/cache/containerd-shim-runc-v2-v2.4.2")},
		{name: "cni", golden: "cni.conflist", got: l.cniConflist(), parse: func(s string) error { return json.Unmarshal([]byte(s), new(map[string]any)) }},
		{name: "kubelet", golden: "kubelet.yaml", got: l.kubeletConfigYAML("192.0.2.2"), parse: func(s string) error { return yaml.Unmarshal([]byte(s), new(map[string]any)) }},
		{name: "kube-proxy", golden: "kube-proxy.yaml", got: l.proxyConfigYAML("/cp/kubeconfig-admin", "gpushare-node"), parse: func(s string) error { return yaml.Unmarshal([]byte(s), new(map[string]any)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.parse != nil {
				if err := tc.parse(tc.got); err != nil {
					t.Fatalf("%s does not parse: %v\n%s", tc.golden, err, tc.got)
				}
			}
			util.Golden(t, tc.golden, tc.got, *update)
		})
	}
}

func TestNodeLabels(t *testing.T) {
	if got, want := nodeLabels(map[string]string{"gpushare": "true", "a": "b"}), "a=b,gpushare=true"; got != want {
		t.Errorf("nodeLabels = %q, want %q", got, want)
	}
}
