package realnode

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/node/probe"
)

// The environment the device plugin gives a GPU container
// (deviceplugin.EnvVisibleDevices, EnvIsolation and
// isolation.EnvMemoryLimit). Named here, not imported: those packages link
// go-nvml, whose symbols resolve only when libnvidia-ml is loaded, and a
// binary with Helm's action package (kustomize imports plugin) binds every
// symbol at start, so it would not start. The real node checks the names:
// a container without them fails CheckPlacement.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvIsolation      = "GPUSHARE_ISOLATION"
	EnvMemoryLimit    = "NVIDIA_GPU_MEMORY_LIMIT"
)

// PartOf is the label selector docs/install.md and NOTES.txt give for the
// release's pods.
const PartOf = "app.kubernetes.io/part-of=gpushare"

// ProbeContainer is the GPU test pods' one container.
const ProbeContainer = "probe"

// GPUPod is a pod of the probe image (never pulled: imported) asking gib
// GiB of one card, with no scheduler named (the webhook or the cluster's
// scheduler picks it). Its container stops at once on SIGTERM.
func GPUPod(namespace, name, image string, gib int64) *corev1.Pod {
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": "gpushare-realnode-test"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            ProbeContainer,
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					gpushare.ResourceGPUMem: *resource.NewQuantity(gib, resource.DecimalSI),
				}},
			}},
		},
	}
}

// Placement is where a GPU pod's container runs, by its annotation and by
// what the container itself reported.
type Placement struct {
	Pod string
	// Card and UUID are the annotation's (gpushare.io/allocation).
	Card int
	UUID string
	// Units is the annotation's share of the card (GiB).
	Units int64
	// Report is the container's own report.
	Report probe.Report
	// Run is the container's run (restartCount) that wrote Report.
	Run int
}

// WaitReport waits until the pod runs and the run minRun or a later one
// of its probe container (0: any) has written its whole report, and
// returns the pod, the report and the run.
func (c *Cluster) WaitReport(ctx context.Context, namespace, name string, minRun int, timeout time.Duration) (*corev1.Pod, probe.Report, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "not created"
	for {
		pod, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = describePod(pod)
			if pod.Status.Phase == corev1.PodRunning {
				text, run, err := c.Node.ContainerLog(namespace, name, string(pod.UID), ProbeContainer)
				switch {
				case err != nil:
					last = fmt.Sprintf("running, log: %v", err)
				case run < minRun:
					last = fmt.Sprintf("running, its container's run %d not started yet (at %d)", minRun, run)
				default:
					r, perr := probe.Parse(text)
					if perr == nil {
						return pod, r, run, nil
					}
					last = fmt.Sprintf("running, report: %v", perr)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, probe.Report{}, 0, fmt.Errorf("waiting for pod %s/%s to run and report: %w (last: %s)", namespace, name, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// describePod is the pod's phase, its scheduler's verdict and its
// containers' waiting reasons, in one line.
func describePod(pod *corev1.Pod) string {
	parts := []string{string(pod.Status.Phase)}
	if pod.Spec.NodeName == "" {
		parts = append(parts, "unscheduled")
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, s := range pod.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("container %s waiting: %s %s", s.Name, w.Reason, w.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// CheckPlacement compares the pod's annotation with the container's
// report: the one card the annotation names must be the one card the
// container sees (NVIDIA_VISIBLE_DEVICES its UUID, ALIYUN_COM_GPU_MEM_IDX
// its index), and the container must be told its isolation mode.
func CheckPlacement(pod *corev1.Pod, r probe.Report, run int) (Placement, error) {
	ref := pod.Namespace + "/" + pod.Name
	a, err := gpushare.ParseAllocation(pod.Annotations[gpushare.AnnotationAllocation])
	if err != nil {
		return Placement{}, fmt.Errorf("pod %s: %w", ref, err)
	}
	if len(a.Containers) != 1 || len(a.Containers[0].Devices) != 1 {
		return Placement{}, fmt.Errorf("pod %s: the allocation names %d containers, want one container on one card: %s", ref, len(a.Containers), pod.Annotations[gpushare.AnnotationAllocation])
	}
	d := a.Containers[0].Devices[0]
	p := Placement{Pod: ref, Card: d.Index, UUID: d.UUID, Units: d.Units, Report: r, Run: run}
	var errs []error
	want := map[string]string{
		EnvVisibleDevices:        d.UUID,
		gpushare.AnnotationIndex: strconv.Itoa(d.Index),
	}
	for key, v := range want {
		if got, ok := r.Getenv(key); !ok || got != v {
			errs = append(errs, fmt.Errorf("pod %s: the container sees %s=%q, the annotation says %q", ref, key, got, v))
		}
	}
	if _, ok := r.Getenv(EnvIsolation); !ok {
		errs = append(errs, fmt.Errorf("pod %s: the container has no %s", ref, EnvIsolation))
	}
	if pod.Annotations[gpushare.AnnotationAssigned] != "true" {
		errs = append(errs, fmt.Errorf("pod %s: %s is %q, not true", ref, gpushare.AnnotationAssigned, pod.Annotations[gpushare.AnnotationAssigned]))
	}
	return p, errors.Join(errs...)
}

// Overcommitted returns, for each card that the placements fill beyond
// size GiB, a line naming it, its sum and its pods.
func Overcommitted(ps []Placement, size int64) []string {
	sum := map[int]int64{}
	pods := map[int][]string{}
	for _, p := range ps {
		sum[p.Card] += p.Units
		pods[p.Card] = append(pods[p.Card], p.Pod)
	}
	var out []string
	for card, s := range sum {
		if s > size {
			out = append(out, fmt.Sprintf("card %d holds %d GiB > %d GiB: %s", card, s, size, strings.Join(pods[card], ", ")))
		}
	}
	sort.Strings(out)
	return out
}

// ReleasePods lists the pods docs/install.md's check lists
// (kubectl -n kube-system get pods -l app.kubernetes.io/part-of=gpushare).
func (c *Cluster) ReleasePods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: PartOf})
	if err != nil {
		return nil, fmt.Errorf("listing the release's pods (%s): %w", PartOf, err)
	}
	return l.Items, nil
}

// Ready reports whether the pod's Ready condition is true.
func Ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
