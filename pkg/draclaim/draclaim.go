package draclaim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

const (
	// ClaimName is the pod's resourceClaims entry the GPU container names.
	ClaimName = "gpushare-gpu-mem"
	// TemplatePrefix starts the name of every template Convert makes. The
	// size follows, in Kubernetes quantity form, lower case:
	// gpushare-gpu-mem-8gi, gpushare-gpu-mem-512mi.
	TemplatePrefix = ClaimName + "-"
	// RequestName is the template's one device request.
	RequestName = "gpu"
	// DeviceClassName is the DeviceClass of the gpushare DRA driver's cards.
	// It is the dra module's devices.DeviceClassName, and a test there checks
	// they agree.
	DeviceClassName = "gpu-mem.gpushare.io"
	// MemoryCapacity is the consumable capacity of a card the template
	// asks, in bytes.
	MemoryCapacity resourcev1.QualifiedName = "memory"
	// AnnotationConverted records on a converted pod what it asked:
	// "aliyun.com/gpu-mem=8 GiB".
	AnnotationConverted = "gpushare.io/dra-converted"
	// LabelManagedBy marks the templates Convert makes.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value.
	ManagedBy = "gpushare-webhook"
)

// ErrUnsupported wraps every reason Convert refuses a pod.
var ErrUnsupported = errors.New("cannot convert to a DRA claim")

// PatchOp is one JSON patch (RFC 6902) operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Conversion is what the webhook does for one pod: make sure Template
// exists in the pod's namespace, then patch the pod with Patch.
type Conversion struct {
	Template *resourcev1.ResourceClaimTemplate
	Patch    []PatchOp
	// Bytes is the memory the claim asks.
	Bytes int64
	// Units is that memory in the pod's aliyun.com/gpu-mem units, the marker's
	// quantity with nodeChoice.
	Units int64
}

// unitBytes is the size of one aliyun.com/gpu-mem unit.
func unitBytes(unit string) (int64, error) {
	switch unit {
	case gpushare.UnitGiB:
		return 1 << 30, nil
	case gpushare.UnitMiB:
		return 1 << 20, nil
	}
	return 0, fmt.Errorf("memory unit %q: want %s or %s", unit, gpushare.UnitGiB, gpushare.UnitMiB)
}

// ValidUnit reports whether unit is one Convert accepts.
func ValidUnit(unit string) error {
	_, err := unitBytes(unit)
	return err
}

// Convert returns the conversion of pod, whose aliyun.com/gpu-mem counts
// units of unit: GiB or MiB, the --memory-unit the DRA nodes' device
// plugins would have had. It returns gpushare.ErrNoGPUMem for a pod that
// asks none, an error wrapping ErrUnsupported for a shape it cannot keep,
// and PodDemand's error for a malformed request.
//
// With nodeChoice the container also gets the marker resource
// gpushare.io/dra-claim (gpushare.ResourceDRAClaim) in its limits and
// requests. It routes the pod through the extender's node choice in a
// kube-scheduler configured for it (the extender's --dra-node-choice). Its
// quantity is the memory in units of unit. So a ResourceQuota on
// requests.gpushare.io/dra-claim counts converted pods' GPU memory as one
// on requests.aliyun.com/gpu-mem counts the device plugin's. For example, a
// pod asking aliyun.com/gpu-mem: 8 gets gpushare.io/dra-claim: 8.
func Convert(pod *corev1.Pod, unit string, nodeChoice bool) (*Conversion, error) {
	size, err := unitBytes(unit)
	if err != nil {
		return nil, err
	}
	demand, err := gpushare.PodDemand(pod)
	if err != nil {
		return nil, err
	}
	if len(demand) > 1 {
		names := make([]string, len(demand))
		for i, c := range demand {
			names[i] = strconv.Quote(c.Name)
		}
		return nil, fmt.Errorf("%w: containers %s all ask %s; on a DRA node only one container of a pod may (each container naming the claim would be allowed the whole of it): ask a ResourceClaim per container instead (docs/dra.md)",
			ErrUnsupported, strings.Join(names, ", "), gpushare.ResourceGPUMem)
	}
	c := demand[0]
	if c.Cards > 1 {
		return nil, fmt.Errorf("%w: container %q asks %s on %d cards (%s); a DRA claim of gpushare's driver is one card",
			ErrUnsupported, c.Name, gpushare.ResourceGPUMem, c.Cards, gpushare.ResourceGPUCount)
	}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name == ClaimName {
			return nil, fmt.Errorf("%w: the pod already has a resource claim named %q", ErrUnsupported, ClaimName)
		}
	}
	if c.Units > (1<<62)/size {
		return nil, fmt.Errorf("%w: container %q asks %d %s, more than a quantity holds", ErrUnsupported, c.Name, c.Units, unit)
	}
	bytes := c.Units * size
	q := resource.NewQuantity(bytes, resource.BinarySI)
	tmpl := Template(q)

	field, list, index := containerOf(pod, c.Name)
	if index < 0 {
		return nil, fmt.Errorf("container %q of the demand is not in the pod", c.Name)
	}
	ctr := &list[index]
	base := fmt.Sprintf("/spec/%s/%d/resources", field, index)
	// gpu-mem goes, and gpu-count (here 1, or absent) with it. A pod still
	// asking gpu-count would be the device-plugin extender's to bind, which
	// refuses a pod without gpu-mem.
	var patch []PatchOp
	for _, name := range []corev1.ResourceName{gpushare.ResourceGPUMem, gpushare.ResourceGPUCount} {
		if _, ok := ctr.Resources.Limits[name]; ok {
			patch = append(patch, PatchOp{Op: "remove", Path: base + "/limits/" + escape(string(name))})
		}
		if _, ok := ctr.Resources.Requests[name]; ok {
			patch = append(patch, PatchOp{Op: "remove", Path: base + "/requests/" + escape(string(name))})
		}
	}
	if nodeChoice {
		// The marker carries the memory, so that a ResourceQuota on
		// requests.gpushare.io/dra-claim counts it. Requests equal limits,
		// as for every extended resource.
		marker, units := escape(string(gpushare.ResourceDRAClaim)), *resource.NewQuantity(c.Units, resource.DecimalSI)
		for _, l := range []struct {
			field string
			list  corev1.ResourceList
		}{{"limits", ctr.Resources.Limits}, {"requests", ctr.Resources.Requests}} {
			if len(l.list) == 0 {
				// A remove leaves an emptied map in place.
				patch = append(patch, PatchOp{Op: "add", Path: base + "/" + l.field, Value: corev1.ResourceList{gpushare.ResourceDRAClaim: units}})
			} else {
				patch = append(patch, PatchOp{Op: "add", Path: base + "/" + l.field + "/" + marker, Value: units})
			}
		}
	}
	claimRef := corev1.ResourceClaim{Name: ClaimName}
	if len(ctr.Resources.Claims) == 0 {
		patch = append(patch, PatchOp{Op: "add", Path: base + "/claims", Value: []corev1.ResourceClaim{claimRef}})
	} else {
		patch = append(patch, PatchOp{Op: "add", Path: base + "/claims/-", Value: claimRef})
	}
	podClaim := corev1.PodResourceClaim{Name: ClaimName, ResourceClaimTemplateName: &tmpl.Name}
	if len(pod.Spec.ResourceClaims) == 0 {
		patch = append(patch, PatchOp{Op: "add", Path: "/spec/resourceClaims", Value: []corev1.PodResourceClaim{podClaim}})
	} else {
		patch = append(patch, PatchOp{Op: "add", Path: "/spec/resourceClaims/-", Value: podClaim})
	}
	note := fmt.Sprintf("%s=%d %s", gpushare.ResourceGPUMem, c.Units, unit)
	if len(pod.Annotations) == 0 {
		patch = append(patch, PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationConverted: note}})
	} else {
		patch = append(patch, PatchOp{Op: "add", Path: "/metadata/annotations/" + escape(AnnotationConverted), Value: note})
	}
	return &Conversion{Template: tmpl, Patch: patch, Bytes: bytes, Units: c.Units}, nil
}

// Template is the ResourceClaimTemplate asking memory of one card, named
// TemplatePrefix and the size.
func Template(memory *resource.Quantity) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   TemplatePrefix + strings.ToLower(memory.String()),
			Labels: map[string]string{LabelManagedBy: ManagedBy},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{
				Name: RequestName,
				Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: DeviceClassName,
					AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
					Count:           1,
					Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
						MemoryCapacity: *memory,
					}},
				},
			}},
		}}},
	}
}

// containerOf finds the container named name: its spec field, that list
// and its index, or index -1. Names are unique across a pod's init and app
// containers.
func containerOf(pod *corev1.Pod, name string) (field string, list []corev1.Container, index int) {
	for _, l := range []struct {
		field string
		list  []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i := range l.list {
			if l.list[i].Name == name {
				return l.field, l.list, i
			}
		}
	}
	return "", nil, -1
}

// escape escapes a JSON pointer token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
