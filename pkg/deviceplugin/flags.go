package deviceplugin

import (
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
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
		"the last three keep working when the NVIDIA container toolkit ignores NVIDIA_VISIBLE_DEVICES of unprivileged containers (see docs/reference/device-plugin.md, \"Hardened nodes\")",
		StrategyEnvvar, StrategyVolumeMounts, StrategyCDIAnnotations, StrategyCDICRI))
	fs.BoolVar(&cfg.HealthCheck, "health-check", true, "watch NVML XID events and report cards with critical XIDs unhealthy until they recover")
	fs.DurationVar(&cfg.RecoveryWindow, "recovery-window", gpu.DefaultRecoveryWindow, "an unhealthy card comes back after this long without a critical XID, if NVML still answers for it")
	fs.StringVar(&cfg.KubeletDir, "kubelet-dir", DefaultKubeletDir, "kubelet's root directory, holding device-plugins/ and pod-resources/")
	fs.StringVar(&cfg.FakeGPUs, "fake-gpus", "", `pretend the node has these cards instead of asking NVML: comma-separated COUNTxMODEL:MEMORY[:mig], memory in GiB or MiB, ":mig" for cards with MIG on, e.g. "2xTesla-T4:16GiB,1xA100-SXM4:80GiB"`)
	fs.StringVar(&cfg.FakeDriver, "fake-driver", "", `with --fake-gpus: what the fake node's driver supports, VERSION[,mps][,cgroup-v1], e.g. "615.00" (driver mode: R615+ on cgroup v2) or "550.54.15,mps" (MPS-capable cards); `+
		`empty: no driver, so no card enforces memory limits. A fake card spec may end in ":mig" (MIG on, no enforcement on that card)`)
	fs.StringVar(&cfg.Isolation, "isolation", DefaultIsolation, "how each container's share of GPU memory is enforced: auto (each card the strongest mode it supports: driver, else mps, else none), "+
		"driver (the driver limits memory per container cgroup: driver R615+, cgroup v2, MIG off; needs a CDI-enabled runtime and the NVIDIA container toolkit's nvidia-cdi-hook), "+
		"mps (an MPS control daemon per card limits each client process: Volta+, MIG off, nvidia-cuda-mps-control) or none (advisory environment only). "+
		"An explicit mode that some card cannot enforce stops the plugin with an error naming what is missing; the mode of each card is logged at startup and published in the node's "+gpushare.AnnotationInventory+" annotation")
	fs.StringVar(&cfg.CDIDir, "cdi-dir", isolation.DefaultCDIDir, "driver mode: directory the plugin writes its CDI spec "+isolation.CDISpecFile+" to (the container runtime's CDI spec directory)")
	fs.StringVar(&cfg.RuntimeCDI, "runtime-cdi", string(isolation.RuntimeCDIAuto), "driver mode: whether the node's container runtime applies CDI devices, which carry each container's limit: auto (by the Node's container runtime version: containerd 2.x and CRI-O 1.23+ do; containerd 1.6 and 1.7, whose enable_cdi is off by default, do not), true (e.g. containerd 1.7 with enable_cdi = true) or false; without it driver mode is not offered")
	fs.StringVar(&cfg.CDIHook, "cdi-hook", isolation.DefaultCDIHook, "driver mode: absolute path of the NVIDIA container toolkit's nvidia-cdi-hook on the host, run by the runtime as apply-cuda-memory-limits")
	fs.StringVar(&cfg.MPSControl, "mps-control", isolation.DefaultMPSControl, "mps mode: the MPS control binary, a path or a name looked up in PATH")
	fs.StringVar(&cfg.MPSRoot, "mps-root", isolation.DefaultMPSRoot, "mps mode: host directory holding each card's MPS pipe and log directories (<root>/<UUID>/pipe, log), mounted into its containers; at most 38 bytes (MPS's socket paths)")
	fs.StringVar(&cfg.MPSDaemons, "mps-daemons", MPSDaemonsPlugin, "mps mode: where the MPS control daemons run: "+MPSDaemonsPlugin+" (in this process, so they and their clients' CUDA work stop with it) or "+
		MPSDaemonsExternal+" (the command \"gpushare-device-plugin mps-daemons\", in its own container, serves --mps-root: daemons outlive plugin restarts)")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", isolation.DefaultCgroupRoot, "where the node's cgroup hierarchy is mounted (driver mode needs cgroup v2)")
	fs.StringVar(&cfg.FakeControl, "fake-control", "", `test-only, with --fake-gpus: a file polled for commands, one per line, "xid INDEX CODE" (inject an XID on card INDEX) or "probe INDEX fail|ok"; it is removed once applied`)
	fs.DurationVar(&cfg.VerifyPeriod, "verify-period", DefaultVerifyPeriod, "how often kubelet's PodResources is compared with the pods' allocation annotations")
	fs.IntVar(&cfg.IdleTaintMinCards, "idle-taint-min-cards", gpushare.DefaultIdleTaintMinCards, "while none of its pods asks GPU memory, a node of at least this many cards carries the taint "+
		gpushare.TaintIdleGPUs+" (PreferNoSchedule), so that pods asking no GPU memory prefer other nodes and whole idle nodes stay for multi-card pods; removed when the plugin stops; 0: no taint")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve Prometheus /metrics and /healthz over plain HTTP on this address (e.g. :39996); empty: off")
	qps := fs.Float64("kube-api-qps", 50, "API client queries per second")
	fs.IntVar(&cfg.Burst, "kube-api-burst", 100, "API client burst")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nRegisters %s with kubelet (one device per unit of GPU memory), publishes the node's\ncards in the annotation %s and gives each container the card(s) named by its pod's\n%s annotation. SIGHUP re-registers; SIGTERM stops.\n`%s %s --help` describes the command that runs mps mode's daemons apart (--mps-daemons=%s). Flags:\n",
			fs.Name(), gpushare.ResourceGPUMem, gpushare.AnnotationInventory, gpushare.AnnotationAllocation, fs.Name(), MPSDaemonsCommand, MPSDaemonsExternal)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	cfg.QPS = float32(*qps)
	return cfg, showVersion, nil
}
