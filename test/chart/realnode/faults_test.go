package realnode

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

var faults = flag.Bool("realnode.faults", false, "run TestFaults (make node-test sets it): several minutes more")

// recoverTimeout bounds the node's recovery from one fault.
const recoverTimeout = 4 * time.Minute

// TestFaults runs GPU pods on the real node (second-scheduler topology)
// through one fault after another: kubelet killed and started again;
// containerd killed and started again (its shims and containers keep
// running); the device plugin's pod deleted (its DaemonSet makes another);
// every container on the node killed, pause containers included (kubelet
// starts them again in new sandboxes). After each: the device plugin
// registered with kubelet again where the fault calls for it (by its own
// log), every pod of the release Running and Ready again, the node's
// 32 GiB allocatable, every GPU container on the card it was on before, as
// it reports from inside (after the last fault, from its new run), no card
// over-committed, and a new GPU pod placed and seen on its card.
func TestFaults(t *testing.T) {
	if !*faults {
		t.Skip("real-node faults: run with -realnode.faults (make node-test)")
	}
	c := cluster(t)
	ctx := context.Background()
	install(ctx, t, c, SecondScheduler, nil)
	const ns = "realnode-faults"
	placed := runGPUPods(ctx, t, c, ns, []int64{4, 8})
	if t.Failed() {
		t.FailNow()
	}
	card := map[string]string{} // "ns/pod" -> UUID its container saw first
	runs := map[string]int{}    // "ns/pod" -> the run that reported
	for _, p := range placed {
		card[p.Pod], runs[p.Pod] = p.UUID, p.Run
	}
	steps := []struct {
		name string
		// restarts: the fault restarts every container, so each GPU pod
		// reports again from a new run.
		restarts bool
		// reregisters: the device plugin must register with kubelet
		// again (a new kubelet, or a new plugin process).
		reregisters bool
		do          func(context.Context) error
	}{
		{name: "kubelet killed", reregisters: true, do: func(ctx context.Context) error { return c.Node.RestartKubelet(ctx, true) }},
		{name: "containerd killed", do: func(ctx context.Context) error { return c.Node.RestartContainerd(ctx, true) }},
		{name: "device plugin pod deleted", reregisters: true, do: c.deleteDevicePluginPod},
		{name: "every container killed", restarts: true, reregisters: true, do: func(ctx context.Context) error {
			n, err := c.Node.KillContainers(ctx)
			t.Logf("killed %d containers", n)
			return err
		}},
	}
	for i, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			before, err := c.pluginRegistrations(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.do(ctx); err != nil {
				t.Fatal(err)
			}
			if s.reregisters {
				if err := c.waitRegisteredSince(ctx, before); err != nil {
					t.Fatal(err)
				}
			}
			checkReleasePods(ctx, t, c, SecondScheduler)
			if err := c.waitAllocatable(ctx, 2*cardGiB); err != nil {
				t.Fatal(err)
			}
			var now []Placement
			for ref, uuid := range card {
				pns, name, _ := strings.Cut(ref, "/")
				minRun := runs[ref]
				if s.restarts {
					minRun++
				}
				pod, rep, run, err := c.WaitReport(ctx, pns, name, minRun, recoverTimeout)
				if err != nil {
					t.Fatal(err)
				}
				p, err := CheckPlacement(pod, rep, run)
				if err != nil {
					t.Error(err)
					continue
				}
				if p.UUID != uuid {
					t.Errorf("pod %s: its container (run %d) is on %s; it was on %s before the fault", ref, run, p.UUID, uuid)
				}
				runs[ref] = run
				now = append(now, p)
			}
			name := fmt.Sprintf("after-%d", i)
			if _, err := createPod(ctx, c, GPUPod(ns, name, c.Images.Probe, 2)); err != nil {
				t.Fatalf("creating pod %s/%s: %v", ns, name, err)
			}
			pod, rep, run, err := c.WaitReport(ctx, ns, name, 0, recoverTimeout)
			if err != nil {
				t.Fatal(err)
			}
			p, err := CheckPlacement(pod, rep, run)
			if err != nil {
				t.Fatal(err)
			}
			card[p.Pod], runs[p.Pod] = p.UUID, p.Run
			now = append(now, p)
			for _, o := range Overcommitted(now, cardGiB) {
				t.Error(o)
			}
		})
		if !ok {
			break
		}
	}
}

// deleteDevicePluginPod deletes the device plugin's pod on the node and
// waits until its DaemonSet has made another that is Ready.
func (c *Cluster) deleteDevicePluginPod(ctx context.Context) error {
	return c.deleteDaemonPod(ctx, "gpushare-device-plugin")
}

// deleteDaemonPod deletes the one pod on the node of the release's
// DaemonSet app (its app.kubernetes.io/name) and waits until the
// DaemonSet has made another that is Ready.
func (c *Cluster) deleteDaemonPod(ctx context.Context, app string) error {
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app}
	l, err := c.Client.CoreV1().Pods(Namespace).List(ctx, sel)
	if err != nil || len(l.Items) != 1 {
		return fmt.Errorf("finding the pod of %s: %d pods, %w", app, len(l.Items), err)
	}
	old := l.Items[0]
	if err := c.Client.CoreV1().Pods(Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting pod %s: %w", old.Name, err)
	}
	deadline := time.Now().Add(recoverTimeout)
	for time.Now().Before(deadline) {
		l, err := c.Client.CoreV1().Pods(Namespace).List(ctx, sel)
		if err == nil {
			for i := range l.Items {
				if p := &l.Items[i]; p.UID != old.UID && Ready(p) {
					return nil
				}
			}
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("the DaemonSet of %s made no Ready pod within %s of deleting %s", app, recoverTimeout, old.Name)
}

// registrations is how often the device plugin has logged its
// registration with kubelet ("Registered with kubelet"), in the latest run
// of its container in its current pod.
type registrations struct {
	pod   string // the plugin pod's UID
	run   int
	count int
}

// pluginRegistrations reads the device plugin's log on the node.
func (c *Cluster) pluginRegistrations(ctx context.Context) (registrations, error) {
	l, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gpushare-device-plugin"})
	if err != nil {
		return registrations{}, fmt.Errorf("finding the device plugin's pod: %w", err)
	}
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		text, run, err := c.Node.ContainerLog(p.Namespace, p.Name, string(p.UID), "device-plugin")
		if err != nil {
			return registrations{}, err
		}
		return registrations{pod: string(p.UID), run: run, count: strings.Count(text, "Registered with kubelet")}, nil
	}
	return registrations{}, fmt.Errorf("no device plugin pod")
}

// waitRegisteredSince waits until the device plugin has registered with
// kubelet again since before was read: a later registration in the same
// run, or one in a new run or a new pod.
func (c *Cluster) waitRegisteredSince(ctx context.Context, before registrations) error {
	deadline := time.Now().Add(recoverTimeout)
	var now registrations
	var err error
	for time.Now().Before(deadline) {
		now, err = c.pluginRegistrations(ctx)
		if err == nil && now.count > 0 && (now.pod != before.pod || now.run != before.run || now.count > before.count) {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	msg := fmt.Sprintf("the device plugin has not registered with kubelet again within %s of the fault (before %+v, now %+v)", recoverTimeout, before, now)
	if err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return errors.New(msg)
}

// waitAllocatable waits until the node offers gib GiB of aliyun.com/gpu-mem
// (the plugin has registered with kubelet and its cards are healthy).
func (c *Cluster) waitAllocatable(ctx context.Context, gib int64) error {
	deadline := time.Now().Add(recoverTimeout)
	got := "none"
	for time.Now().Before(deadline) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			if q, ok := n.Status.Allocatable[gpushare.ResourceGPUMem]; ok {
				got = q.String()
				if q.Value() == gib {
					return nil
				}
			}
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("node %s offers %s of %s, not %d, %s after the fault", NodeName, got, gpushare.ResourceGPUMem, gib, recoverTimeout)
}
