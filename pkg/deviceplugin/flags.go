package deviceplugin

import (
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// ParseFlags reads the device plugin's command line (without the program
// name) into a Config; usage and errors go to out. --node-name defaults to
// $NODE_NAME. The command and the tests that check the Helm chart's
// arguments share it.
func ParseFlags(args []string, out io.Writer) (cfg Config, showVersion bool, err error) {
	fs := flag.NewFlagSet("gpushare-device-plugin", flag.ContinueOnError)
	fs.SetOutput(out)
	cfg = Config{}
	fs.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default: $NODE_NAME)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "path of a kubeconfig; empty: in-cluster configuration")
	fs.StringVar(&cfg.Unit, "memory-unit", gpushare.UnitGiB, fmt.Sprintf("unit of %s: %s or %s (MiB only where the ListAndWatch message fits kubelet's 4 MiB limit; the plugin refuses to start otherwise, "+
		"and refuses a unit other than the one the node was published in while kubelet lists containers holding its devices)",
		gpushare.ResourceGPUMem, gpushare.UnitGiB, gpushare.UnitMiB))
	fs.StringVar(&cfg.DeviceListStrategy, "device-list-strategy", StrategyEnvvar, fmt.Sprintf("how containers get their cards: %s (NVIDIA_VISIBLE_DEVICES=<UUID>), "+
		"%s (/dev/null mounted at /var/run/nvidia-container-devices/<UUID>), %s (CDI annotation nvidia.com/gpu=<UUID>) or %s (CDI device nvidia.com/gpu=<UUID> in the CRI request); "+
		"the last three keep working when the NVIDIA container toolkit ignores NVIDIA_VISIBLE_DEVICES of unprivileged containers (see the README)",
		StrategyEnvvar, StrategyVolumeMounts, StrategyCDIAnnotations, StrategyCDICRI))
	fs.BoolVar(&cfg.HealthCheck, "health-check", true, "watch NVML XID events and report cards with critical XIDs unhealthy until they recover")
	fs.DurationVar(&cfg.RecoveryWindow, "recovery-window", gpu.DefaultRecoveryWindow, "an unhealthy card comes back after this long without a critical XID, if NVML still answers for it")
	fs.StringVar(&cfg.KubeletDir, "kubelet-dir", DefaultKubeletDir, "kubelet's root directory, holding device-plugins/ and pod-resources/")
	fs.StringVar(&cfg.FakeGPUs, "fake-gpus", "", `pretend the node has these cards instead of asking NVML: comma-separated COUNTxMODEL:MEMORY, memory in GiB or MiB, e.g. "2xTesla-T4:16GiB,1xA100-SXM4:80GiB"`)
	fs.StringVar(&cfg.FakeControl, "fake-control", "", `test-only, with --fake-gpus: a file polled for commands, one per line, "xid INDEX CODE" (inject an XID on card INDEX) or "probe INDEX fail|ok"; it is removed once applied`)
	fs.DurationVar(&cfg.VerifyPeriod, "verify-period", DefaultVerifyPeriod, "how often kubelet's PodResources is compared with the pods' allocation annotations")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve Prometheus /metrics and /healthz over plain HTTP on this address (e.g. :39996); empty: off")
	qps := fs.Float64("kube-api-qps", 50, "API client queries per second")
	fs.IntVar(&cfg.Burst, "kube-api-burst", 100, "API client burst")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nRegisters %s with kubelet (one device per unit of GPU memory), publishes the node's\ncards in the annotation %s and gives each container the card(s) named by its pod's\n%s annotation. SIGHUP re-registers; SIGTERM stops. Flags:\n",
			fs.Name(), gpushare.ResourceGPUMem, gpushare.AnnotationInventory, gpushare.AnnotationAllocation)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	cfg.QPS = float32(*qps)
	return cfg, showVersion, nil
}
