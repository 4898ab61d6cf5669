// Command controlplane builds, and can run, the local Kubernetes control
// plane that the integration tests use (see test/integration/framework).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpushare/gpushare/test/integration/framework"
)

const usage = `usage: go run ./test/cmd/controlplane <command> [flags]

Commands:
  build [-version V] [-kcm]
          build etcd %[2]s, kube-apiserver and kube-scheduler V (default
          %[1]s; or %[3]s), and with -kcm kube-controller-manager, into the
          cache if missing, and print V's cache directory
  build-kubectl
          build kubectl %[1]s (the docs tests run it) into the cache if
          missing, and print its path
  build-node [-version V] [-containerd]
          build a real node's kubelet, kube-proxy and kube-controller-manager
          V (default %[1]s) into the cache if missing, and print the cache
          directory; with -containerd, build-containerd's binaries too,
          beside them
  build-containerd
          build containerd %[4]s, its runc shim and ctr (the real node's
          runtime for kubelet 1.36 and later) into the cache if missing, and
          print the cache directory
  up      start etcd, kube-apiserver and kube-scheduler on 127.0.0.1, print
          the admin kubeconfig path, and run in the foreground until
          interrupted (Ctrl-C), then stop them; the directory is kept
          (the version: $` + framework.VersionEnv + `, default %[1]s)

Flags of up:
`

func main() {
	upFlags := flag.NewFlagSet("up", flag.ExitOnError)
	extender := upFlags.String("extender-url", "", "urlPrefix for every extender in the scheduler config, e.g. http://127.0.0.1:8080/gpushare-scheduler; empty drops the extenders")
	schedConfig := upFlags.String("scheduler-config", "", "KubeSchedulerConfiguration file (default <repo>/config/kube-scheduler-config.yaml)")
	noScheduler := upFlags.Bool("no-scheduler", false, "start only etcd and kube-apiserver")
	dir := upFlags.String("dir", "", "directory for PKI, kubeconfigs, etcd data and logs (default: a new temporary directory)")
	printUsage := func() {
		fmt.Fprintf(os.Stderr, usage, framework.KubernetesVersion, framework.EtcdVersion, framework.KubernetesVersionOldest, framework.ContainerdVersion)
		upFlags.PrintDefaults()
	}
	upFlags.Usage = printUsage

	if len(os.Args) < 2 {
		printUsage()
		os.Exit(2)
	}
	os.Exit(run(printUsage, upFlags, extender, schedConfig, noScheduler, dir))
}

// buildFlags parses the flags of a build command: -version, and the bool
// flag named extra ("kcm" for build, "containerd" for build-node) unless
// extra is empty.
func buildFlags(name string, args []string, extra string) (version string, withExtra bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	v := fs.String("version", framework.KubernetesVersion, "the Kubernetes version: "+framework.KubernetesVersion+" or "+framework.KubernetesVersionOldest)
	var x *bool
	switch extra {
	case "kcm":
		x = fs.Bool("kcm", false, "build kube-controller-manager too")
	case "containerd":
		x = fs.Bool("containerd", false, "build containerd "+framework.ContainerdVersion+", its runc shim and ctr too")
	}
	if err := fs.Parse(args); err != nil {
		return "", false, err
	}
	if fs.NArg() > 0 {
		return "", false, fmt.Errorf("%s: unexpected arguments %q", name, fs.Args())
	}
	if err := framework.CheckVersion(*v); err != nil {
		return "", false, fmt.Errorf("%s -version: %w", name, err)
	}
	return *v, x != nil && *x, nil
}

// run carries out the command in os.Args[1] and returns the exit code.
func run(printUsage func(), upFlags *flag.FlagSet, extender, schedConfig *string, noScheduler *bool, dir *string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	switch cmd := os.Args[1]; cmd {
	case "build":
		version, kcm, err := buildFlags(cmd, os.Args[2:], "kcm")
		if err != nil {
			return usageError(err)
		}
		bins, err := framework.EnsureVersionBinaries(ctx, version, kcm)
		if err != nil {
			return fail(err)
		}
		fmt.Println(bins.Dir)
	case "build-kubectl":
		kubectl, err := framework.EnsureKubectl(ctx)
		if err != nil {
			return fail(err)
		}
		fmt.Println(kubectl)
	case "build-node":
		version, withContainerd, err := buildFlags(cmd, os.Args[2:], "containerd")
		if err != nil {
			return usageError(err)
		}
		var bins framework.NodeBinaries
		if withContainerd {
			bins, _, err = framework.EnsureNodeAndContainerd(ctx, version)
		} else {
			bins, err = framework.EnsureNodeBinariesFor(ctx, version)
		}
		if err != nil {
			return fail(err)
		}
		fmt.Println(bins.Dir)
	case "build-containerd":
		bins, err := framework.EnsureContainerdBinaries(ctx)
		if err != nil {
			return fail(err)
		}
		fmt.Println(bins.Dir)
	case "up":
		_ = upFlags.Parse(os.Args[2:])
		cp, err := framework.Start(ctx, framework.Options{
			ExtenderURL:     *extender,
			Scheduler:       !*noScheduler,
			SchedulerConfig: *schedConfig,
			Dir:             *dir,
		})
		if err != nil {
			return fail(err)
		}
		fmt.Printf("kube-apiserver %s\nexport KUBECONFIG=%s\nlogs in %s\nCtrl-C to stop\n", cp.APIServerURL(), cp.AdminKubeconfig(), cp.LogsDir())
		<-ctx.Done()
		cp.Stop()
	case "-h", "-help", "--help", "help":
		printUsage()
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", cmd)
		printUsage()
		return 2
	}
	return 0
}

// usageError reports a command line error: exit code 2.
func usageError(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(os.Stderr, "controlplane:", err)
	return 2
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "controlplane:", err)
	return 1
}
