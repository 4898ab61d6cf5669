package gpushare

import (
	"strconv"
	"strings"
)

// Node labels of our own that the device plugin always publishes
// (docs/reference/node-labels.md). Each value is a label value: at most 63
// characters of [A-Za-z0-9._-].
const (
	// LabelProduct: the model of the node's first card by index, with '-'
	// for spaces and other characters a label value may not hold, e.g.
	// "Tesla-T4".
	LabelProduct = "gpushare.io/gpu.product"
	// LabelMemory: the first card's memory, MiB, e.g. "15360".
	LabelMemory = "gpushare.io/gpu.memory"
	// LabelCount: the node's healthy cards, e.g. "4"; "0" while all have
	// failed.
	LabelCount = "gpushare.io/gpu.count"
	// LabelDriver: the NVIDIA driver's version, e.g. "550.54.15"; absent
	// when the node states none.
	LabelDriver = "gpushare.io/driver-version"
	// LabelCUDA: the newest CUDA the driver supports, MAJOR.MINOR, e.g.
	// "12.4"; absent when unknown.
	LabelCUDA = "gpushare.io/cuda-version"
	// LabelIsolation: how the node's cards enforce each container's share,
	// the device plugin's --isolation. It is driver, mps or none when every
	// card does the same, mixed otherwise.
	LabelIsolation = "gpushare.io/gpu.isolation"
)

// OwnLabels lists the labels above.
var OwnLabels = []string{LabelProduct, LabelMemory, LabelCount, LabelDriver, LabelCUDA, LabelIsolation}

// The labels of NVIDIA GPU Feature Discovery (GFD), with GFD's meaning,
// that the device plugin also publishes where no other component manages
// them (AnnotationNVIDIALabels). Unlike GFD's, NVIDIALabelCount counts
// healthy cards.
const (
	NVIDIALabelProduct      = "nvidia.com/gpu.product"
	NVIDIALabelMemory       = "nvidia.com/gpu.memory"
	NVIDIALabelCount        = "nvidia.com/gpu.count"
	NVIDIALabelDriverFull   = "nvidia.com/cuda.driver-version.full"
	NVIDIALabelDriverMajor  = "nvidia.com/cuda.driver-version.major"
	NVIDIALabelDriverMinor  = "nvidia.com/cuda.driver-version.minor"
	NVIDIALabelDriverRev    = "nvidia.com/cuda.driver-version.revision"
	NVIDIALabelRuntimeFull  = "nvidia.com/cuda.runtime-version.full"
	NVIDIALabelRuntimeMajor = "nvidia.com/cuda.runtime-version.major"
	NVIDIALabelRuntimeMinor = "nvidia.com/cuda.runtime-version.minor"
)

// SelectionLabels returns the labels, ours and GFD's, that pods select
// cards by with a nodeSelector: the model of the node's first card and its
// healthy cards. firstModel "" gives no product label. The device plugin
// publishes them among the others. The simulator gives them to its nodes, so
// that a replayed nodeSelector picks the nodes a real one would.
func SelectionLabels(firstModel string, healthy int) (own, nvidia map[string]string) {
	own, nvidia = map[string]string{}, map[string]string{}
	if firstModel != "" {
		own[LabelProduct] = LabelValue(firstModel)
		nvidia[NVIDIALabelProduct] = own[LabelProduct]
	}
	own[LabelCount] = strconv.Itoa(healthy)
	nvidia[NVIDIALabelCount] = own[LabelCount]
	return own, nvidia
}

// NVIDIALabels lists the GFD labels above.
var NVIDIALabels = []string{NVIDIALabelProduct, NVIDIALabelMemory, NVIDIALabelCount,
	NVIDIALabelDriverFull, NVIDIALabelDriverMajor, NVIDIALabelDriverMinor, NVIDIALabelDriverRev,
	NVIDIALabelRuntimeFull, NVIDIALabelRuntimeMajor, NVIDIALabelRuntimeMinor}

// AnnotationNVIDIALabels (node) records, as a JSON object of label to
// value, the GFD-form labels the device plugin wrote last. A GFD-form
// label whose value differs from the record, or that the record lacks,
// belongs to another component, and the plugin then leaves every GFD-form
// label alone.
const AnnotationNVIDIALabels = "gpushare.io/nvidia-labels"

// GFDTimestampLabel is set by NVIDIA GPU Feature Discovery unless it runs
// with --no-timestamp. Where it is, GFD manages the nvidia.com/ labels.
const GFDTimestampLabel = "nvidia.com/gfd.timestamp"

// NFDFeatureLabelsAnnotation is where node-feature-discovery lists the
// labels it manages, GFD's among them when GFD publishes through it.
const NFDFeatureLabelsAnnotation = "nfd.node.kubernetes.io/feature-labels"

// LabelValue makes s a valid label value: every character but
// [A-Za-z0-9._-] becomes '-', cut to 63 characters, trimmed to start and end
// with a letter or digit, "" when none is left. "NVIDIA A100-SXM4-80GB"
// becomes "NVIDIA-A100-SXM4-80GB".
func LabelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !alnum(rune(c)) && c != '.' && c != '_' && c != '-' {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.TrimFunc(string(b), func(r rune) bool { return !alnum(r) })
}

// alnum reports whether r is an ASCII letter or digit.
func alnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// SelectorModels returns the card models that a nodeSelector on a product
// label (LabelProduct or NVIDIALabelProduct) restricts a pod to, as model
// patterns; nil when it names none. A label value stands for the models it
// was made from (LabelValue): each '-' may have been any character, and a
// value of 63 characters may have been cut.
func SelectorModels(sel map[string]string) *CardConstraints {
	v := sel[LabelProduct]
	if v == "" {
		v = sel[NVIDIALabelProduct]
	}
	if v == "" {
		return nil
	}
	p := strings.ReplaceAll(v, "-", "?")
	if len(v) == 63 {
		p += "*"
	}
	return &CardConstraints{Models: []string{p}}
}

// ModelRestriction returns the models a pod is restricted to: by its
// annotations (cc) when they name models, else by its nodeSelector (see
// SelectorModels); nil when neither does.
func ModelRestriction(cc *CardConstraints, sel map[string]string) *CardConstraints {
	if cc != nil && cc.ReadsModel() {
		return cc
	}
	return SelectorModels(sel)
}
