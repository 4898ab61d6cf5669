package gpushare

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestParseCardConstraints(t *testing.T) {
	long := strings.Repeat("x", MaxCardListBytes+1)
	many := strings.TrimSuffix(strings.Repeat("A,", MaxCardListEntries+1), ",")
	tests := []struct {
		name        string
		annotations map[string]string
		want        *CardConstraints
		wantErr     string
	}{
		{
			name:        "no annotation",
			annotations: map[string]string{AnnotationPolicy: "binpack"},
		},
		{
			name:        "nil annotations",
			annotations: nil,
		},
		{
			name: "all four, spaces around entries dropped, spaces inside kept",
			annotations: map[string]string{
				AnnotationGPUModels:         "A100*, Tesla T4 ",
				AnnotationGPUModelsExcluded: "A100-PCIE*",
				AnnotationGPUUUIDs:          "GPU-a,GPU-b",
				AnnotationGPUUUIDsExcluded:  " GPU-c",
			},
			want: &CardConstraints{Models: []string{"A100*", "Tesla T4"}, ExcludedModels: []string{"A100-PCIE*"},
				UUIDs: []string{"GPU-a", "GPU-b"}, ExcludedUUIDs: []string{"GPU-c"}},
		},
		{
			name:        "isolation enforced alone",
			annotations: map[string]string{AnnotationIsolation: "enforced"},
			want:        &CardConstraints{Enforced: true},
		},
		{
			name:        "isolation with a model",
			annotations: map[string]string{AnnotationIsolation: "enforced", AnnotationGPUModels: "A100*"},
			want:        &CardConstraints{Models: []string{"A100*"}, Enforced: true},
		},
		{
			name:        "isolation with another value",
			annotations: map[string]string{AnnotationIsolation: "driver"},
			wantErr:     `invalid gpushare annotation gpushare.io/isolation is "driver"; the only value is "enforced" (or remove the annotation)`,
		},
		{
			name:        "exactly the entry limit",
			annotations: map[string]string{AnnotationGPUModels: strings.TrimSuffix(strings.Repeat("A,", MaxCardListEntries), ",")},
			want:        &CardConstraints{Models: strings.Split(strings.TrimSuffix(strings.Repeat("A,", MaxCardListEntries), ","), ",")},
		},
		{
			name:        "empty value",
			annotations: map[string]string{AnnotationGPUModels: " "},
			wantErr:     "invalid gpushare annotation gpushare.io/gpu-models is empty; name at least one model or remove the annotation",
		},
		{
			name:        "empty UUID list",
			annotations: map[string]string{AnnotationGPUUUIDsExcluded: ""},
			wantErr:     "invalid gpushare annotation gpushare.io/gpu-uuids-excluded is empty; name at least one UUID or remove the annotation",
		},
		{
			name:        "empty entry",
			annotations: map[string]string{AnnotationGPUModelsExcluded: "T4,,V100"},
			wantErr:     `invalid gpushare annotation gpushare.io/gpu-models-excluded: entry 2 of "T4,,V100" is empty; remove the extra comma`,
		},
		{
			name:        "trailing comma",
			annotations: map[string]string{AnnotationGPUModels: "A100*,"},
			wantErr:     `invalid gpushare annotation gpushare.io/gpu-models: entry 2 of "A100*," is empty; remove the extra comma`,
		},
		{
			name:        "too long",
			annotations: map[string]string{AnnotationGPUModels: long},
			wantErr:     "invalid gpushare annotation gpushare.io/gpu-models is 4097 bytes, limit 4096",
		},
		{
			name:        "too many entries",
			annotations: map[string]string{AnnotationGPUModels: many},
			wantErr:     "invalid gpushare annotation gpushare.io/gpu-models has 33 entries, limit 32",
		},
		{
			name:        "not UTF-8",
			annotations: map[string]string{AnnotationGPUModels: "A100,\xff"},
			wantErr:     "invalid gpushare annotation gpushare.io/gpu-models: entry 2 is not valid UTF-8",
		},
		{
			name:        "UUID pattern",
			annotations: map[string]string{AnnotationGPUUUIDs: "GPU-a*"},
			wantErr:     `invalid gpushare annotation gpushare.io/gpu-uuids: "GPU-a*" is not a UUID; UUIDs are matched exactly, without patterns or spaces`,
		},
		{
			name:        "UUID with a space",
			annotations: map[string]string{AnnotationGPUUUIDsExcluded: "GPU a"},
			wantErr:     `invalid gpushare annotation gpushare.io/gpu-uuids-excluded: "GPU a" is not a UUID; UUIDs are matched exactly, without patterns or spaces`,
		},
		{
			name:        "UUID required and excluded",
			annotations: map[string]string{AnnotationGPUUUIDs: "GPU-a,GPU-b", AnnotationGPUUUIDsExcluded: "GPU-b"},
			wantErr:     "invalid gpushare annotation: UUID GPU-b is in both gpushare.io/gpu-uuids and gpushare.io/gpu-uuids-excluded; keep it in one",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCardConstraints(tc.annotations)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) {
					t.Fatalf("error = %v, want ErrInvalid %q", err, tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("constraints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseCordonedGPUs(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    []string
		wantErr string
	}{
		{name: "empty: nothing cordoned", value: ""},
		{name: "two UUIDs", value: "GPU-a, GPU-b", want: []string{"GPU-a", "GPU-b"}},
		{name: "empty entry", value: "GPU-a,", wantErr: `invalid gpushare annotation gpushare.io/cordoned-gpus: entry 2 of "GPU-a," is empty; remove the extra comma`},
		{name: "a pattern", value: "GPU-?", wantErr: `invalid gpushare annotation gpushare.io/cordoned-gpus: "GPU-?" is not a UUID; UUIDs are matched exactly, without patterns or spaces`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCordonedGPUs(tc.value)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("no error, want %q", tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("UUIDs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatchModel(t *testing.T) {
	tests := []struct {
		pattern, model string
		want           bool
	}{
		{"A100*", "A100-SXM4-80GB", true},
		{"A100*", "NVIDIA A100-SXM4-80GB", false},
		{"*A100*", "NVIDIA A100-SXM4-80GB", true},
		{"a100*", "A100-SXM4-80GB", false}, // case-sensitive
		{"A10", "A10", true},
		{"A10", "A100", false}, // openb: a gpu_spec "A10" is not an A100
		{"Tesla-T4", "Tesla T4", true},
		{"Tesla T4", "Tesla-T4", true},
		{"Tesla T4", "Tesla  T4", false},
		{"Tesla?T4", "Tesla T4", true},
		{"T?", "T4", true},
		{"T?", "T", false},
		{"?", "é", true}, // one character, not one byte
		{"*", "", true},
		{"", "", true},
		{"", "T4", false},
		{"**T4", "Tesla T4", true},
		{"*-*-80GB", "A100-SXM4-80GB", true},
		{"*-*-80GB", "A100-80GB", false},
		{"H100*HBM3", "H100 80GB HBM3", true},
		{"V100M16", "V100M32", false},
	}
	for _, tc := range tests {
		if got := MatchModel(tc.pattern, tc.model); got != tc.want {
			t.Errorf("MatchModel(%q, %q) = %v, want %v", tc.pattern, tc.model, got, tc.want)
		}
	}
}

func TestCardConstraintsString(t *testing.T) {
	tests := []struct {
		cc   *CardConstraints
		want string
	}{
		{nil, ""},
		{&CardConstraints{Models: []string{"A100*"}}, "of model A100*"},
		{&CardConstraints{Models: []string{"A100*", "H100*"}, ExcludedModels: []string{"A100-PCIE*"}, UUIDs: []string{"GPU-a"}, ExcludedUUIDs: []string{"GPU-b", "GPU-c"}},
			"of model A100*|H100* and not of model A100-PCIE* and with UUID GPU-a and without UUID GPU-b|GPU-c"},
		{&CardConstraints{Enforced: true}, "enforcing memory limits"},
		{&CardConstraints{Models: []string{"A100*"}, Enforced: true}, "of model A100* and enforcing memory limits"},
	}
	for _, tc := range tests {
		if got := tc.cc.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func FuzzParseCardConstraints(f *testing.F) {
	f.Add("A100*, Tesla T4", "T4", "GPU-a", "GPU-b")
	f.Add("", ",", "GPU-*", "GPU-a")
	f.Add("*?*", "\xff", "", "")
	f.Fuzz(func(t *testing.T, models, excluded, uuids, excludedUUIDs string) {
		ann := map[string]string{}
		for k, v := range map[string]string{AnnotationGPUModels: models, AnnotationGPUModelsExcluded: excluded,
			AnnotationGPUUUIDs: uuids, AnnotationGPUUUIDsExcluded: excludedUUIDs} {
			if v != "" {
				ann[k] = v
			}
		}
		cc, err := ParseCardConstraints(ann)
		if err != nil || cc == nil {
			return
		}
		// Whatever parses matches without panicking, and within the bounds.
		for _, list := range [][]string{cc.Models, cc.ExcludedModels, cc.UUIDs, cc.ExcludedUUIDs} {
			if len(list) > MaxCardListEntries {
				t.Fatalf("%d entries parsed, limit %d", len(list), MaxCardListEntries)
			}
			for _, p := range list {
				if p == "" || strings.TrimSpace(p) != p {
					t.Fatalf("entry %q is empty or untrimmed", p)
				}
				MatchModel(p, models)
			}
		}
		cc.AllowsModel(excluded)
	})
}

// FuzzMatchModel checks MatchModel against a regular expression built from
// the pattern by its documented rules.
func FuzzMatchModel(f *testing.F) {
	f.Add("A100*", "A100-SXM4-80GB")
	f.Add("*A100*", "NVIDIA A100-SXM4-80GB")
	f.Add("Tesla-T4", "Tesla T4")
	f.Add("?esla*T?", "Tesla T4")
	f.Add("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaab")
	f.Add("é?", "éé")
	f.Fuzz(func(t *testing.T, pattern, model string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(model) {
			return
		}
		var re strings.Builder
		re.WriteString("^")
		for _, r := range pattern {
			switch r {
			case '*':
				re.WriteString("(?s:.*)")
			case '?':
				re.WriteString("(?s:.)")
			case ' ', '-':
				re.WriteString("[ -]")
			default:
				re.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		re.WriteString("$")
		want := regexp.MustCompile(re.String()).MatchString(model)
		if got := MatchModel(pattern, model); got != want {
			t.Fatalf("MatchModel(%q, %q) = %v, the documented rules say %v", pattern, model, got, want)
		}
	})
}
