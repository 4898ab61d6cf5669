// Command controlplane builds, and can run, the local Kubernetes control
// plane that the integration tests use (see test/integration/framework).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpushare/gpushare/test/integration/framework"
)

const usage = `usage: go run ./test/cmd/controlplane <command> [flags]

Commands:
  build   build etcd %[2]s, kube-apiserver and kube-scheduler %[1]s into
          the cache if missing, and print the cache directory
  build-kubectl
          build kubectl %[1]s (the docs tests run it) into the cache if
          missing, and print its path
  build-node
          build a real node's kubelet, kube-proxy and kube-controller-manager
          %[1]s into the cache if missing, and print the cache directory
          (make test's real node; the containerd-2 runs build containerd
          %[4]s themselves)
  build-dra
          build kube-apiserver, kube-scheduler and kube-controller-manager
          %[3]s for the DRA driver's tests into their cache if missing, and
          print that directory
  up      start etcd, kube-apiserver and kube-scheduler on 127.0.0.1, print
          the admin kubeconfig path, and run in the foreground until
          interrupted (Ctrl-C), then stop them; the directory is kept

Flags of up:
`

func main() {
	upFlags := flag.NewFlagSet("up", flag.ExitOnError)
	extender := upFlags.String("extender-url", "", "urlPrefix for every extender in the scheduler config, e.g. http://127.0.0.1:8080/gpushare-scheduler; empty drops the extenders")
	schedConfig := upFlags.String("scheduler-config", "", "KubeSchedulerConfiguration file (default <repo>/config/kube-scheduler-config.yaml)")
	noScheduler := upFlags.Bool("no-scheduler", false, "start only etcd and kube-apiserver")
	dir := upFlags.String("dir", "", "directory for PKI, kubeconfigs, etcd data and logs (default: a new temporary directory)")
	printUsage := func() {
		fmt.Fprintf(os.Stderr, usage, framework.KubernetesVersion, framework.EtcdVersion, framework.KubernetesVersionDRA, framework.ContainerdVersion)
		upFlags.PrintDefaults()
	}
	upFlags.Usage = printUsage

	if len(os.Args) < 2 {
		printUsage()
		os.Exit(2)
	}
	os.Exit(run(printUsage, upFlags, extender, schedConfig, noScheduler, dir))
}

// run carries out the command in os.Args[1] and returns the exit code.
func run(printUsage func(), upFlags *flag.FlagSet, extender, schedConfig *string, noScheduler *bool, dir *string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	switch os.Args[1] {
	case "build":
		bins, err := framework.EnsureBinaries(ctx)
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
		bins, err := framework.EnsureNodeBinaries(ctx)
		if err != nil {
			return fail(err)
		}
		fmt.Println(bins.Dir)
	case "build-dra":
		bins, err := framework.EnsureVersionBinaries(ctx, framework.KubernetesVersionDRA, true)
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
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		printUsage()
		return 2
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "controlplane:", err)
	return 1
}
