package gpushare

import (
	"strings"
	"testing"
)

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"},
		{"Tesla T4", "Tesla-T4"},
		{"550.54.15", "550.54.15"},
		{" (GPU) ", "GPU"},
		{"-._", ""},
		{"", ""},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
		{strings.Repeat("a", 62) + "é", strings.Repeat("a", 62)},
	} {
		if got := LabelValue(tc.in); got != tc.want {
			t.Errorf("LabelValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
