package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/pkg/prepare"
	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// podTimeout bounds the wait for each example pod to be placed or refused,
// and for the node to prepare the claims of those placed.
const podTimeout = 90 * time.Second

// examplesDir holds the demo's examples, relative to the repository root.
var examplesDir = filepath.Join("manifests", "examples", "dra")

// status applies the examples (again: existing ones are kept), one pod at
// a time so the one that waits is always the last, waits for each, and
// prints inspect, the claims' table and the KUBECONFIG line.
func status(ctx context.Context, o options) error {
	b, err := os.ReadFile(o.path(readyFile))
	if err != nil {
		return fmt.Errorf("no DRA demo running in %s (make dra-demo starts one): %w", o.dir, err)
	}
	kubeconfig := strings.TrimSpace(string(b))
	client, err := kubeclient.New(kubeconfig, 50, 100, "gpushare-dra-demo")
	if err != nil {
		return err
	}
	fmt.Printf("\n== Applying %s/ (templates first, then each pod once the one before it is placed or refused)\n", examplesDir)
	pods, err := apply(ctx, client, filepath.Join(o.root, examplesDir))
	if err != nil {
		return err
	}
	if err := waitPrepared(ctx, client, o, pods); err != nil {
		return err
	}

	for _, args := range [][]string{{}, {"-d"}} {
		fmt.Printf("\n== kubectl inspect gpushare %s   (bin/kubectl-inspect-gpushare)\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, o.inspectBinary(), append([]string{"--kubeconfig", kubeconfig}, args...)...) //nolint:gosec // the plugin this demo built, with its own arguments
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("running %s: %w", o.inspectBinary(), err)
		}
	}
	if err := table(ctx, client, o, pods); err != nil {
		return err
	}
	fmt.Printf(`
== The cluster keeps running. Play with it (kubectl %s or newer):
KUBECONFIG=%s
  export KUBECONFIG=%[2]s
  kubectl get resourceslices,resourceclaims,pods -o wide
  kubectl delete pod dra-b-8gi                   # then dra-d-8gi-waits gets its 8 GiB
  PATH=$PWD/bin:$PATH kubectl inspect gpushare -d
  bin/gpushare-dra-demo status                   # this report again
  make dra-demo-down                             # stop every process the demo started
Logs: %s
`, "v1.35", kubeconfig, filepath.Join(o.dir, clusterDir, "logs"))
	return nil
}

// apply creates every object of the examples directory's files: the
// others first, then the pods one at a time, each once the one before it
// is placed or refused. It returns the pods, in order.
func apply(ctx context.Context, client kubernetes.Interface, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no %s/*.yaml", dir)
	}
	var pods []*corev1.Pod
	for _, f := range files {
		objs, err := framework.DecodeManifest(f)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			switch o := obj.(type) {
			case *corev1.Pod:
				o.Namespace = metav1.NamespaceDefault
				pods = append(pods, o)
			case *resourceapi.ResourceClaimTemplate:
				_, err = client.ResourceV1().ResourceClaimTemplates(metav1.NamespaceDefault).Create(ctx, o, metav1.CreateOptions{})
			default:
				return nil, fmt.Errorf("%s: the demo applies ResourceClaimTemplates and Pods, not %T", f, obj)
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("creating %T from %s: %w", obj, f, err)
			}
		}
	}
	var names []string
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
			got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			return err == nil && (got.Spec.NodeName != "" || util.SchedulingFailed(got)), nil
		})
		if err != nil {
			return nil, fmt.Errorf("pod %s was neither placed nor refused within %s: %w", p.Name, podTimeout, err)
		}
		fmt.Printf("  %s\n", p.Name)
		names = append(names, p.Name)
	}
	return names, nil
}

// waitPrepared waits until the node has prepared the claim of every pod
// placed.
func waitPrepared(ctx context.Context, client kubernetes.Interface, o options, names []string) error {
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		prepared, err := readPrepared(o.path(preparedFile))
		if err != nil {
			return false, err
		}
		done := map[string]bool{}
		for _, c := range prepared {
			done[c.Namespace+"/"+c.Name] = true
		}
		missing = nil
		for _, name := range names {
			p, err := client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Spec.NodeName == "" {
				continue
			}
			if !done[p.Namespace+"/"+podClaim(p)] {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the node did not prepare the claims of %s within %s (see %s): %w", strings.Join(missing, ", "), podTimeout, o.path(supervisorLog), err)
	}
	return nil
}

// table prints, per example pod, its claim's card, share and memory, and
// what the driver's CDI spec puts in the container, or why the pod waits.
func table(ctx context.Context, client kubernetes.Interface, o options, names []string) error {
	fmt.Println("\n== Each pod's claim: the card kube-scheduler allocated (first fit in the driver's slice order), and the container's environment from the driver's CDI spec")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tNODE\tCLAIM\tCARD\tMEMORY\tSHARE\tCONTAINER ENVIRONMENT (CDI)")
	var errs []error
	for _, name := range names {
		p, err := client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName == "" {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\twaits: %s\n", name, scheduledMessage(p))
			continue
		}
		claim, err := client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, podClaim(p), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("pod %s's claim: %w", name, err)
		}
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
			errs = append(errs, fmt.Errorf("claim %s of pod %s: allocation %+v, want one result", claim.Name, name, claim.Status.Allocation))
			continue
		}
		r := claim.Status.Allocation.Devices.Results[0]
		q := r.ConsumedCapacity[devices.CapacityMemory]
		share := "-"
		if r.ShareID != nil {
			share = string(*r.ShareID)[:8]
		}
		env, err := cdiEnv(filepath.Join(o.cdiDir(), prepare.ClaimSpecPrefix+string(claim.UID)+".yaml"))
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", name, err))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, p.Spec.NodeName, claim.Name, r.Device, q.String(), share, env)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// cdiEnv is the gpushare environment a claim's CDI spec gives its
// container, "NAME=value" joined by spaces.
func cdiEnv(path string) (string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // a CDI spec in the demo's own directory
	if err != nil {
		return "", fmt.Errorf("the claim's CDI spec: %w", err)
	}
	var spec cdispec.Spec
	if err := yaml.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("parsing %s: %w", path, err)
	}
	var env []string
	for _, d := range spec.Devices {
		for _, kv := range d.ContainerEdits.Env {
			if strings.HasPrefix(kv, "GPUSHARE_") || strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES=") {
				env = append(env, kv)
			}
		}
	}
	slices.Sort(env)
	return strings.Join(env, " "), nil
}

// scheduledMessage is why kube-scheduler left p pending.
func scheduledMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return "not scheduled yet"
}
