package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/pkg/version"
	"github.com/gpushare/gpushare/test/kubelet/cluster"
	"github.com/gpushare/gpushare/test/supervisor"
)

// settleTimeout bounds the wait for the example pods to run or be refused.
const settleTimeout = 90 * time.Second

// status applies the examples (again: existing ones are kept), waits for
// them, and prints inspect, the agreement table and the KUBECONFIG line. It
// fails when a container's environment disagrees with its annotation.
func status(ctx context.Context, o options) error {
	b, err := os.ReadFile(o.path(readyFile))
	if err != nil {
		return fmt.Errorf("no demo running in %s (make demo starts one): %w", o.dir, err)
	}
	kubeconfig := strings.TrimSpace(string(b))
	client, err := kubeclient.New(kubeconfig, 50, 100, "gpushare-demo")
	if err != nil {
		return err
	}
	examples, err := filepath.Glob(filepath.Join(o.root, "manifests", "examples", "*.yaml"))
	if err != nil || len(examples) == 0 {
		return fmt.Errorf("no manifests/examples/*.yaml in %s", o.root)
	}
	fmt.Println("\n== Applying manifests/examples/")
	var names []string
	for _, f := range examples {
		pods, err := cluster.ApplyPods(ctx, client, f)
		if err != nil {
			return err
		}
		fmt.Printf("  %-28s %d pods\n", filepath.Base(f), len(pods))
		names = append(names, pods...)
	}
	pods, err := settle(ctx, client, names)
	if err != nil {
		return err
	}

	inspect := filepath.Join(o.root, "bin", "kubectl-inspect-gpushare")
	for _, args := range [][]string{{}, {"-d"}} {
		fmt.Printf("\n== kubectl inspect gpushare %s   (bin/kubectl-inspect-gpushare)\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, inspect, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("running %s: %w", inspect, err)
		}
	}

	disagree := table(pods)
	unschedulable(ctx, client, pods)

	fmt.Printf(`
== The cluster keeps running. Play with it:
export KUBECONFIG=%s
  kubectl get nodes,pods -o wide                 # %s
  PATH=$PWD/bin:$PATH kubectl inspect gpushare -d
  bin/gpushare-demo status                       # this report again
  make demo-down                                 # stop every process the demo started
Logs: %s
`, kubeconfig, kubectlSkew(client), filepath.Join(o.dir, clusterDir, "logs"))
	if disagree > 0 {
		fmt.Fprintf(os.Stderr, "demo: %d containers got other cards than their annotation names\n", disagree)
		return supervisor.ExitCode(1)
	}
	return nil
}

// kubectlSkew says which kubectl versions work with the cluster: those
// within one minor version of kube-apiserver (Kubernetes' skew policy).
func kubectlSkew(client kubernetes.Interface) string {
	const unknown = "kubectl within one minor version of kube-apiserver"
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return unknown
	}
	minor, err := version.KubernetesMinor(v.GitVersion)
	if err != nil {
		return unknown
	}
	return fmt.Sprintf("kubectl v1.%d to v1.%d (kube-apiserver %s)", minor-1, minor+1, v.GitVersion)
}

// settle waits until every named pod runs with its environment recorded,
// was refused by kubelet, or is unschedulable, and returns them sorted.
func settle(ctx context.Context, client kubernetes.Interface, names []string) ([]corev1.Pod, error) {
	deadline := time.Now().Add(settleTimeout)
	for {
		var pods []corev1.Pod
		waiting := 0
		for _, nn := range names {
			ns, name, _ := strings.Cut(nn, "/")
			p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("reading pod %s: %w", nn, err)
			}
			_, refused := cluster.Unschedulable(p)
			if !cluster.Admitted(p) && !refused && p.Status.Phase != corev1.PodFailed {
				waiting++
			}
			pods = append(pods, *p)
		}
		if waiting == 0 {
			sort.Slice(pods, func(i, j int) bool {
				if pods[i].Namespace != pods[j].Namespace {
					return pods[i].Namespace < pods[j].Namespace
				}
				return pods[i].Name < pods[j].Name
			})
			return pods, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d example pods neither run nor are refused after %s; see the logs", waiting, len(names), settleTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// table prints, per GPU container, the annotation's card next to the
// container's environment, and returns how many disagree.
func table(pods []corev1.Pod) int {
	fmt.Println("\n== Per container: the card the extender chose (annotation gpushare.io/allocation) vs what kubelet's device manager gave it (environment)")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tCONTAINER\tNODE\tGiB\tANNOTATION CARD\tANNOTATION UUID\tENV ALIYUN_COM_GPU_MEM_IDX\tENV NVIDIA_VISIBLE_DEVICES\tAGREE")
	containers, disagree := 0, 0
	var problems []string
	for i := range pods {
		p := &pods[i]
		if !cluster.Admitted(p) {
			continue
		}
		rows, err := cluster.Rows(p)
		if err != nil {
			problems = append(problems, err.Error())
			disagree++
			continue
		}
		for _, r := range rows {
			containers++
			agree := "yes"
			if !r.Agrees() {
				agree = "NO"
				disagree++
				problems = append(problems, fmt.Sprintf("%s/%s %s: %s", r.Namespace, r.Pod, r.Container, r.Problem))
			}
			name := r.Container
			if r.Init {
				name += " (init)"
			}
			var cards []string
			for _, c := range r.Cards {
				cards = append(cards, strconv.Itoa(c))
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Pod, name, r.Node, r.Units,
				strings.Join(cards, ","), short(strings.Join(r.UUIDs, ",")), r.EnvIndex, short(r.Visible), agree)
		}
	}
	_ = w.Flush()
	fmt.Println("(UUIDs shortened for the table; AGREE compares them in full, and kubelet's device IDs per card with the annotation's units)")
	for _, p := range problems {
		fmt.Println("  " + p)
	}
	if disagree == 0 {
		fmt.Printf("%d GPU containers: every one got exactly the card(s) its annotation names\n", containers)
	}
	return disagree
}

// short abbreviates each UUID of a comma-separated list to GPU-xxxxxxxx….
func short(list string) string {
	parts := strings.Split(list, ",")
	for i, u := range parts {
		if len(u) > 13 {
			parts[i] = u[:12] + "…"
		}
	}
	return strings.Join(parts, ",")
}

// unschedulable prints the scheduler's event for each pod it could not place.
func unschedulable(ctx context.Context, client kubernetes.Interface, pods []corev1.Pod) {
	first := true
	for i := range pods {
		p := &pods[i]
		cond, ok := cluster.Unschedulable(p)
		if !ok {
			if p.Status.Phase == corev1.PodFailed {
				fmt.Printf("\npod %s/%s was refused by kubelet: %s\n", p.Namespace, p.Name, p.Status.Message)
			}
			continue
		}
		if first {
			fmt.Println("\n== Pods no node can take, with the scheduler's event (the extender's reasons)")
			first = false
		}
		msg, err := lastEvent(ctx, client, p, "FailedScheduling")
		if err != nil {
			msg = cond + " (from the pod's condition; " + err.Error() + ")"
		}
		fmt.Printf("%s/%s: %s\n", p.Namespace, p.Name, msg)
	}
}

func lastEvent(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, reason string) (string, error) {
	evs, err := client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name + ",reason=" + reason})
	if err != nil {
		return "", fmt.Errorf("listing events: %w", err)
	}
	var last *corev1.Event
	for i := range evs.Items {
		e := &evs.Items[i]
		if last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	if last == nil {
		return "", errors.New("no event yet")
	}
	return last.Message, nil
}

func eventTime(e *corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.LastTimestamp.Time
}
