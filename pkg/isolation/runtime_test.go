package isolation

import (
	"errors"
	"strings"
	"testing"
)

func TestRuntimeAppliesCDI(t *testing.T) {
	tests := []struct {
		version string
		want    string // "" when it applies them, else part of the error
	}{
		{"containerd://2.0.0", ""},
		{"containerd://2.1.4", ""},
		{"containerd://1.7.27", "only with enable_cdi = true"},
		{"containerd://1.6.20~ds1", "ignores CDI devices"},
		{"containerd://1.5.9", "ignores CDI devices"},
		{"cri-o://1.30.2", ""},
		{"cri-o://1.22.0", "not known to apply them"},
		{"docker://24.0.7", "not known to apply them"},
		{"none://nodeagent", "unknown"},
		{"", "unknown"},
		{"containerd://v2", "unknown"},
	}
	for _, tc := range tests {
		err := RuntimeAppliesCDI(tc.version)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("RuntimeAppliesCDI(%q) = %v, want nil", tc.version, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrRuntimeNoCDI)):
			t.Errorf("RuntimeAppliesCDI(%q) = %v, want ErrRuntimeNoCDI containing %q", tc.version, err, tc.want)
		}
	}
}

func TestParseRuntimeCDI(t *testing.T) {
	for _, s := range []string{"auto", "true", "false"} {
		if _, err := ParseRuntimeCDI(s); err != nil {
			t.Errorf("ParseRuntimeCDI(%q) = %v", s, err)
		}
	}
	if _, err := ParseRuntimeCDI("yes"); err == nil {
		t.Error("ParseRuntimeCDI(yes) = nil, want an error")
	}
}
