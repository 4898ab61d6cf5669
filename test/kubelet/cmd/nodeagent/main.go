// Command gpushare-nodeagent stands in for the kubelet of one simulated GPU
// node in `make demo` and the end-to-end tests: it registers the node, hosts
// kubelet's own device manager for the real gpushare device plugin, and
// admits the node's pods through it (see package nodeagent). It is a test
// double: nothing runs in the pods. SIGHUP restarts the device manager
// (kubelet.sock is re-created, as by a kubelet restart); SIGTERM stops.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/pkg/signals"
	"github.com/gpushare/gpushare/test/kubelet/nodeagent"
)

func main() {
	fs := flag.NewFlagSet("gpushare-nodeagent", flag.ExitOnError)
	cfg := nodeagent.Config{}
	fs.StringVar(&cfg.NodeName, "node-name", "", "node to register and serve")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the identity acting as the node")
	fs.StringVar(&cfg.KubeletDir, "kubelet-dir", "", "the node's kubelet directory: device-plugins/ and pod-resources/ are created in it (give the device plugin the same --kubelet-dir)")
	fs.StringVar(&cfg.Address, "address", "", "the node's InternalIP, e.g. 10.0.0.11")
	cpu := fs.String("cpu", "32", "CPU capacity")
	memory := fs.String("memory", "128Gi", "memory capacity")
	pods := fs.String("pods", "500", "pod capacity")
	fs.DurationVar(&cfg.HeartbeatPeriod, "heartbeat-period", nodeagent.DefaultHeartbeatPeriod, "how often the Lease and Ready condition are renewed")
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s --node-name NAME --kubeconfig PATH --kubelet-dir DIR [flags]\n\nA test double of the kubelet for one simulated GPU node. Flags:\n", fs.Name())
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])

	capacity := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *memory, corev1.ResourcePods: *pods} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpushare-nodeagent: --%s %q: %v\n", name, v, err)
			os.Exit(2)
		}
		capacity[name] = q
	}
	cfg.Capacity = capacity
	client, err := kubeclient.New(*kubeconfig, 200, 400, "gpushare-nodeagent")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-nodeagent:", err)
		os.Exit(1)
	}
	cfg.Client = client
	os.Exit(run(cfg))
}

// run serves until SIGTERM or an error and returns the exit status.
func run(cfg nodeagent.Config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Restart = signals.Hangups(ctx)
	ctx = klog.NewContext(ctx, klog.Background())
	defer klog.Flush()
	if err := nodeagent.Run(ctx, cfg); err != nil {
		klog.Background().Error(err, "Node agent failed")
		return 1
	}
	return 0
}
