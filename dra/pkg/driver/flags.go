package driver

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/pkg/prepare"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// ParseFlags reads the driver's command line (without the program name)
// into a Config; usage and errors go to out. --node-name defaults to
// $NODE_NAME.
func ParseFlags(args []string, out io.Writer) (cfg Config, showVersion bool, err error) {
	fs := flag.NewFlagSet("gpushare-dra-driver", flag.ContinueOnError)
	fs.SetOutput(out)
	orders := make([]string, len(devices.Orders))
	for i, o := range devices.Orders {
		orders[i] = string(o)
	}
	fs.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node, and of its device pool (default: $NODE_NAME)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "path of a kubeconfig; empty: in-cluster configuration")
	fs.StringVar(&cfg.Unit, "memory-unit", gpushare.UnitGiB, fmt.Sprintf("unit of each card's memory capacity, %s or %s: capacity is rounded down to it, and claims ask whole units (the request policy's step)", gpushare.UnitGiB, gpushare.UnitMiB))
	order := fs.String("device-order", string(devices.DefaultOrder), "order of the cards in the node's ResourceSlice, which kube-scheduler fills first-fit: "+strings.Join(orders, ", ")+
		" (smallest-first keeps the larger cards free for larger claims on a node of mixed cards; on a node of equal cards all three are index order)")
	fs.BoolVar(&cfg.HealthCheck, "health-check", true, "watch NVML XID events and taint the devices of cards with critical XIDs ("+devices.TaintUnhealthy+", NoSchedule) until they recover")
	fs.DurationVar(&cfg.RecoveryWindow, "recovery-window", gpu.DefaultRecoveryWindow, "an unhealthy card comes back after this long without a critical XID, if NVML still answers for it")
	fs.StringVar(&cfg.KubeletDir, "kubelet-dir", DefaultKubeletDir, "kubelet's root directory, holding plugins/"+devices.DriverName+" (the driver's socket and checkpoint) and plugins_registry/")
	fs.StringVar(&cfg.FakeGPUs, "fake-gpus", "", `pretend the node has these cards instead of asking NVML: comma-separated COUNTxMODEL:MEMORY[:mig], e.g. "2xTesla-T4:16GiB,1xA100-SXM4:80GiB"`)
	fs.StringVar(&cfg.FakeDriver, "fake-driver", "", `with --fake-gpus: what the fake node's driver supports, VERSION[,mps][,cgroup-v1], e.g. "615.00"; empty: no driver, so no card enforces memory limits`)
	fs.StringVar(&cfg.FakeControl, "fake-control", "", `test-only, with --fake-gpus: a file polled for commands, one per line, "xid INDEX CODE" or "probe INDEX fail|ok"; it is removed once applied`)
	fs.StringVar(&cfg.Isolation, "isolation", string(isolation.RequestAuto), "how each container's share of GPU memory is enforced, as the device plugin's --isolation: auto, driver, mps or none")
	fs.StringVar(&cfg.CDIDir, "cdi-dir", isolation.DefaultCDIDir, "directory of the claims' CDI specs ("+prepare.ClaimSpecPrefix+"<claim UID>.yaml) and of driver mode's "+isolation.CDISpecFile+" (the container runtime's CDI spec directory)")
	fs.StringVar(&cfg.CDIHook, "cdi-hook", isolation.DefaultCDIHook, "driver mode: absolute path of the NVIDIA container toolkit's nvidia-cdi-hook on the host")
	fs.StringVar(&cfg.MPSControl, "mps-control", isolation.DefaultMPSControl, "mps mode: the MPS control binary, a path or a name looked up in PATH")
	fs.StringVar(&cfg.MPSRoot, "mps-root", isolation.DefaultMPSRoot, "mps mode: host directory holding each card's MPS pipe and log directories; at most 38 bytes (MPS's socket paths)")
	fs.StringVar(&cfg.MPSDaemons, "mps-daemons", isolation.MPSDaemonsPlugin, "mps mode: where the MPS control daemons run: "+isolation.MPSDaemonsPlugin+" (in this process, so they and their clients' CUDA work stop with it) or "+
		isolation.MPSDaemonsExternal+" (the command `gpushare-device-plugin mps-daemons`, in its own container, serves --mps-root: daemons outlive driver restarts)")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", isolation.DefaultCgroupRoot, "where the node's cgroup hierarchy is mounted (driver mode needs cgroup v2)")
	qps := fs.Float64("kube-api-qps", 20, "API client queries per second")
	fs.IntVar(&cfg.Burst, "kube-api-burst", 40, "API client burst")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nPublishes the node's GPUs as DRA devices of driver %s with consumable memory capacity\n(DeviceClass %s; Kubernetes 1.36 or newer) and prepares the claims allocated on them:\nCDI devices with the device plugin's environment and memory isolation. SIGTERM stops. Flags:\n",
			fs.Name(), devices.DriverName, devices.DeviceClassName)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	cfg.QPS = float32(*qps)
	cfg.Order = devices.Order(*order)
	return cfg, showVersion, nil
}
