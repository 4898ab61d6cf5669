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

// TestSelectorModels: a product label's value selects the models it could
// have been made from (LabelValue), and annotations that name models win.
func TestSelectorModels(t *testing.T) {
	long := strings.Repeat("a", 70)
	for _, tc := range []struct {
		name  string
		sel   map[string]string
		cc    *CardConstraints
		match []string // models the restriction must allow
		miss  []string // models it must not
		none  bool     // no restriction
	}{
		{name: "no selector", none: true},
		{name: "another label", sel: map[string]string{"zone": "a"}, none: true},
		{name: "NVIDIA's label", sel: map[string]string{NVIDIALabelProduct: LabelValue("Tesla T4")},
			match: []string{"Tesla T4", "Tesla-T4"}, miss: []string{"T4", "Tesla T40"}},
		{name: "ours first", sel: map[string]string{LabelProduct: "A10", NVIDIALabelProduct: "T4"},
			match: []string{"A10"}, miss: []string{"T4"}},
		{name: "a cut value", sel: map[string]string{LabelProduct: LabelValue(long)}, match: []string{long}},
		{name: "annotations win", sel: map[string]string{LabelProduct: "A10"}, cc: &CardConstraints{Models: []string{"H100*"}},
			match: []string{"H100 80GB HBM3"}, miss: []string{"A10"}},
		{name: "annotations without models leave the label", sel: map[string]string{LabelProduct: "A10"}, cc: &CardConstraints{UUIDs: []string{"GPU-1"}},
			match: []string{"A10"}, miss: []string{"H100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ModelRestriction(tc.cc, tc.sel)
			if tc.none {
				if r != nil {
					t.Fatalf("ModelRestriction = %+v, want nil", r)
				}
				return
			}
			if r == nil || !r.ReadsModel() {
				t.Fatalf("ModelRestriction = %+v, want one that names models", r)
			}
			for _, m := range tc.match {
				if ok, _ := r.AllowsModel(m); !ok {
					t.Errorf("%+v does not allow %q", r, m)
				}
			}
			for _, m := range tc.miss {
				if ok, _ := r.AllowsModel(m); ok {
					t.Errorf("%+v allows %q", r, m)
				}
			}
		})
	}
}
