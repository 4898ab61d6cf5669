package framework

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// PercentageSetting is a kube-scheduler percentageOfNodesToScore to run a
// scheduler configuration with.
type PercentageSetting struct {
	// Name: "shipped", "unset" or the number.
	Name string
	// Value is the number to set; nil with Name "unset" removes the key,
	// with "shipped" leaves the configuration as it is.
	Value *int32
}

// Apply returns a scheduler configuration file: src with the setting's
// percentageOfNodesToScore, or src itself for "shipped".
func (s PercentageSetting) Apply(t testing.TB, src string) string {
	t.Helper()
	if s.Name == "shipped" {
		return src
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("parsing %s: %v", src, err)
	}
	if s.Value == nil {
		delete(cfg, "percentageOfNodesToScore")
	} else {
		cfg["percentageOfNodesToScore"] = *s.Value
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "percentage-"+s.Name+"-"+filepath.Base(src))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
