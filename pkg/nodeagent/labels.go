package nodeagent

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
)

// nodeLabels returns the labels that describe cards and drv: ours,
// gpushare.OwnLabels, and the same facts in GPU Feature Discovery's form,
// gpushare.NVIDIALabels. unhealthy holds the UUIDs of the failed cards. A
// nil drv means the node states no driver. A label whose fact is unknown is
// absent.
func nodeLabels(cards []handoff.Card, unhealthy map[string]bool, drv *gpu.Driver) (own, nvidia map[string]string) {
	healthy := 0
	mode := gpushare.Isolation("")
	for i, c := range cards {
		if !unhealthy[c.UUID] {
			healthy++
		}
		m := c.Isolation
		if m == "" {
			m = gpushare.IsolationNone
		}
		switch {
		case i == 0:
			mode = m
		case m != mode:
			mode = "mixed"
		}
	}
	first := ""
	if len(cards) > 0 {
		first = cards[0].Model
	}
	own, nvidia = gpushare.SelectionLabels(first, healthy)
	if len(cards) > 0 {
		own[gpushare.LabelMemory] = strconv.FormatInt(cards[0].MemoryMiB, 10)
		own[gpushare.LabelIsolation] = string(mode)
		nvidia[gpushare.NVIDIALabelMemory] = own[gpushare.LabelMemory]
	}
	if drv != nil && drv.Version != "" {
		own[gpushare.LabelDriver] = gpushare.LabelValue(drv.Version)
		nvidia[gpushare.NVIDIALabelDriverFull] = own[gpushare.LabelDriver]
		parts := strings.SplitN(drv.Version, ".", 3)
		for i, key := range []string{gpushare.NVIDIALabelDriverMajor, gpushare.NVIDIALabelDriverMinor, gpushare.NVIDIALabelDriverRev} {
			if i < len(parts) && gpushare.LabelValue(parts[i]) != "" {
				nvidia[key] = gpushare.LabelValue(parts[i])
			}
		}
	}
	if drv != nil && drv.CUDAVersion > 0 {
		major, minor := strconv.Itoa(drv.CUDAVersion/1000), strconv.Itoa(drv.CUDAVersion%1000/10)
		own[gpushare.LabelCUDA] = major + "." + minor
		nvidia[gpushare.NVIDIALabelRuntimeFull] = own[gpushare.LabelCUDA]
		nvidia[gpushare.NVIDIALabelRuntimeMajor] = major
		nvidia[gpushare.NVIDIALabelRuntimeMinor] = minor
	}
	return own, nvidia
}

// labelPatch returns the label and annotation changes that make node carry
// own, and nvidia unless nvidiaManagedElsewhere. A nil value removes. Both
// are empty when node already carries them. The GFD-form labels the plugin
// wrote are recorded in gpushare.AnnotationNVIDIALabels. When another
// component takes them over, the record goes and the labels are left to it.
func labelPatch(node *corev1.Node, own, nvidia map[string]string) (labels, annotations map[string]*string) {
	labels, annotations = map[string]*string{}, map[string]*string{}
	set := func(k, v string) {
		if cur, ok := node.Labels[k]; !ok || cur != v {
			labels[k] = &v
		}
	}
	for _, k := range gpushare.OwnLabels {
		if v, ok := own[k]; ok {
			set(k, v)
		} else if _, ok := node.Labels[k]; ok {
			labels[k] = nil
		}
	}
	recorded, recordOK := recordedNVIDIALabels(node)
	if nvidiaManagedElsewhere(node, recorded, recordOK) {
		if _, ok := node.Annotations[gpushare.AnnotationNVIDIALabels]; ok {
			annotations[gpushare.AnnotationNVIDIALabels] = nil
		}
		return labels, annotations
	}
	for _, k := range gpushare.NVIDIALabels {
		if v, ok := nvidia[k]; ok {
			set(k, v)
		} else if _, ok := node.Labels[k]; ok {
			labels[k] = nil // ours (the record says so), no longer true
		}
	}
	if !maps.Equal(recorded, nvidia) || !recordOK {
		b, _ := json.Marshal(nvidia) // map[string]string: cannot fail
		s := string(b)
		annotations[gpushare.AnnotationNVIDIALabels] = &s
	}
	return labels, annotations
}

// recordedNVIDIALabels returns the GFD-form labels the plugin recorded
// writing on node; ok is false without a valid record.
func recordedNVIDIALabels(node *corev1.Node) (map[string]string, bool) {
	s, ok := node.Annotations[gpushare.AnnotationNVIDIALabels]
	if !ok {
		return map[string]string{}, false
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		return map[string]string{}, false
	}
	return m, true
}

// nvidiaManagedElsewhere reports whether another component manages the
// GFD-form labels on node. Three signs say so: GPU Feature Discovery's
// timestamp label; node-feature-discovery listing an nvidia.com/ label
// among its own; a GFD-form label the plugin did not write as it is, absent
// from its record or with another value.
func nvidiaManagedElsewhere(node *corev1.Node, recorded map[string]string, recordOK bool) bool {
	if _, ok := node.Labels[gpushare.GFDTimestampLabel]; ok {
		return true
	}
	if slices.ContainsFunc(strings.Split(node.Annotations[gpushare.NFDFeatureLabelsAnnotation], ","), func(k string) bool {
		return strings.HasPrefix(strings.TrimSpace(k), "nvidia.com/")
	}) {
		return true
	}
	for _, k := range gpushare.NVIDIALabels {
		cur, ok := node.Labels[k]
		if !ok {
			continue
		}
		if v, mine := recorded[k]; !recordOK || !mine || v != cur {
			return true
		}
	}
	return false
}
