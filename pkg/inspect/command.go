package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/version"
)

// Env is what the command takes from its process.
type Env struct {
	// Args without the program name.
	Args    []string
	Streams genericiooptions.IOStreams
	// TTY is true when Streams.Out is a terminal: cards get utilisation bars.
	TTY bool
	// NewClient builds the API client from the kubeconfig flags; nil for a
	// clientset from getter.ToRESTConfig().
	NewClient func(getter genericclioptions.RESTClientGetter) (kubernetes.Interface, error)
}

const long = `Show how the GPU memory (aliyun.com/gpu-mem) of every card is allocated.

The numbers are computed from the nodes and pods in the API with the scheduler
extender's own bookkeeping, so they match what the extender sees, and they are
available while it is down. --from-extender URL asks a running extender instead.

The summary has one row per node and one GPU<i>(Allocated/Total) column per card
index, then the node's and the cluster's totals. -o wide adds each card's model
and where the card list comes from (the device plugin's inventory, the node's
capacity, or the DRA driver's ResourceSlices, whose amounts are the allocated
ResourceClaims, each under the pod that reserved it). -d prints, per node, each pod's units on each card. Unhealthy cards
and cards the operator cordoned (gpushare.io/cordoned-gpus) are marked; pods
that ask for GPU memory without an allocation annotation (not scheduled through
the extender) and pods not yet scheduled are listed apart, with the reason and,
for pods that choose their cards (gpushare.io/gpu-models, gpu-uuids and their
-excluded forms), which cards they ask. When standard output is a terminal each card gets a bar
([#####-----] 8/16).

Amounts are in the node's unit: GiB, or MiB where the device plugin says so.`

const examples = `  # Every GPU-sharing node, one row per node
  kubectl inspect gpushare

  # One node, each pod's share of each card
  kubectl inspect gpushare -d gpu-node-1

  # Nodes with a label, with card models and health
  kubectl inspect gpushare -l gpu=t4 -o wide

  # Only the pods of one namespace in the detail (amounts stay whole)
  kubectl inspect gpushare -d -n team-a

  # Machine-readable
  kubectl inspect gpushare -o json

  # Ask the extender rather than the API
  kubectl inspect gpushare --from-extender http://localhost:39999`

// NewCommand returns the cobra command "kubectl inspect gpushare".
func NewCommand(env Env) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true).WithWarningPrinter(env.Streams)
	flags.CacheDir = nil // only for discovery, which the plugin does not use
	var (
		selector, output, fromExtender string
		details, allNamespaces         bool
	)
	cmd := &cobra.Command{
		Use:     "kubectl-inspect-gpushare [NODE]",
		Short:   "Show the GPU memory allocated on every card of every GPU-sharing node",
		Long:    long,
		Example: examples,
		Args:    cobra.MaximumNArgs(1),
		Version: version.Version,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl inspect gpushare",
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := Config{
				Query:  Query{Selector: selector},
				View:   View{Output: output, Details: details, Bars: env.TTY},
				Out:    env.Streams.Out,
				ErrOut: env.Streams.ErrOut,
			}
			if len(args) == 1 {
				cfg.Query.Node = args[0]
			}
			if cmd.Flags().Changed("namespace") && !allNamespaces {
				cfg.Namespace = *flags.Namespace
			}
			if fromExtender != "" {
				cfg.Source = ExtenderSource{URL: fromExtender}
			} else {
				newClient := env.NewClient
				if newClient == nil {
					newClient = NewClientset
				}
				client, err := newClient(flags)
				if err != nil {
					return explainKubeconfig(err, *flags.KubeConfig)
				}
				cfg.Source = APISource{API: ClientAPI{Client: client}}
			}
			return Run(cmd.Context(), cfg)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError{err}
	})
	cmd.SetIn(env.Streams.In)
	cmd.SetOut(env.Streams.Out)
	cmd.SetErr(env.Streams.ErrOut)

	f := cmd.Flags()
	f.SortFlags = false
	f.BoolVarP(&details, "details", "d", false, "Print each node's pods with their units on each card.")
	f.StringVarP(&output, "output", "o", "", "Output format: wide (adds card models and the card source), json or yaml (the full report, details included).")
	f.StringVarP(&selector, "selector", "l", "", "Node label selector, e.g. -l gpu=t4 or -l 'pool in (a,b)'.")
	f.BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the pods of every namespace (the default; overrides --namespace).")
	f.StringVar(&fromExtender, "from-extender", "", "Read the extender's GET /gpushare-scheduler/inspect at this URL (e.g. http://localhost:39999) instead of the API.")
	flags.AddFlags(f)
	if ns := f.Lookup("namespace"); ns != nil {
		ns.Usage = "List only this namespace's pods (details, notes, pending pods); the amounts still count every pod."
	}
	addKlogFlags(f)
	return cmd
}

// addKlogFlags adds klog's -v to f.
func addKlogFlags(f *pflag.FlagSet) {
	gofs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gofs)
	if v := gofs.Lookup("v"); v != nil {
		p := pflag.PFlagFromGoFlag(v)
		p.Usage = "Log verbosity on stderr: 2 for what was read, 4 for ignored annotations."
		f.AddFlag(p)
	}
}

// NewClientset is Env.NewClient's default.
func NewClientset(getter genericclioptions.RESTClientGetter) (kubernetes.Interface, error) {
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	if noConfig(getter, cfg) {
		return nil, clientcmd.ErrEmptyConfig
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the API client: %w", err)
	}
	return client, nil
}

// noConfig reports whether cfg is only client-go's fallback
// (http://localhost:8080) because no kubeconfig, no --server and no
// in-cluster configuration exist; kubectl would then fail with "connection
// refused", which says nothing about the cause.
func noConfig(getter genericclioptions.RESTClientGetter, cfg *rest.Config) bool {
	if cfg.Host != clientcmd.ClusterDefaults.Server {
		return false
	}
	if f, ok := getter.(*genericclioptions.ConfigFlags); ok && f.APIServer != nil && *f.APIServer != "" {
		return false
	}
	raw, err := getter.ToRawKubeConfigLoader().RawConfig()
	return err == nil && len(raw.Clusters) == 0
}

// pointAtCluster is the fix for every kubeconfig problem.
const pointAtCluster = "point at a cluster with --kubeconfig PATH or $KUBECONFIG (and --context NAME), or read a running extender with --from-extender URL"

// explainKubeconfig turns errors from loading the kubeconfig into what to do.
// explicit is the --kubeconfig value.
func explainKubeconfig(err error, explicit string) error {
	switch {
	case explicit != "" && errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("kubeconfig %q: %w; %s", explicit, fs.ErrNotExist, pointAtCluster)
	case clientcmd.IsEmptyConfig(err):
		where := "~/.kube/config does not exist"
		if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
			where = fmt.Sprintf("$KUBECONFIG (%s) names no existing file", env)
		}
		return fmt.Errorf("no cluster to talk to: no kubeconfig (%s) and not running in a pod; %s", where, pointAtCluster)
	}
	return fmt.Errorf("loading the kubeconfig: %w; %s", err, pointAtCluster)
}

// usageError is a mistake on the command line; it points at --help.
type usageError struct{ err error }

func (e usageError) Error() string {
	return e.err.Error() + "\nSee 'kubectl inspect gpushare --help' for usage."
}

func (e usageError) Unwrap() error { return e.err }

// Main runs the command and returns the exit status: 0, or 1 after
// printing "error: ..." on stderr.
func Main(ctx context.Context, env Env) int {
	cmd := NewCommand(env)
	// Never nil: cobra would read os.Args.
	cmd.SetArgs(append([]string{}, env.Args...))
	if err := cmd.ExecuteContext(ctx); err != nil {
		msg := err.Error()
		if !strings.HasSuffix(msg, "\n") {
			msg += "\n"
		}
		fmt.Fprint(env.Streams.ErrOut, "error: "+msg)
		return 1
	}
	return 0
}
