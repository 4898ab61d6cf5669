package deviceplugin

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/isolation"
)

// Where mps mode's daemons run (--mps-daemons).
const (
	// MPSDaemonsPlugin runs them in the device plugin's process.
	MPSDaemonsPlugin = isolation.MPSDaemonsPlugin
	// MPSDaemonsExternal leaves them to the mps-daemons command, in its
	// own container.
	MPSDaemonsExternal = isolation.MPSDaemonsExternal
	// MPSDaemonsCommand is the first argument that makes
	// gpushare-device-plugin run mps mode's daemons (RunMPSDaemons).
	MPSDaemonsCommand = "mps-daemons"
)

// ParseMPSDaemonsFlags reads the command line of `gpushare-device-plugin
// mps-daemons` (without the program name and the command) into a config
// for RunMPSDaemons; usage and errors go to out.
func ParseMPSDaemonsFlags(args []string, out io.Writer) (isolation.MPSDaemonsConfig, error) {
	fs := flag.NewFlagSet("gpushare-device-plugin "+MPSDaemonsCommand, flag.ContinueOnError)
	fs.SetOutput(out)
	var cfg isolation.MPSDaemonsConfig
	fs.StringVar(&cfg.Control, "mps-control", isolation.DefaultMPSControl, "the MPS control binary, a path or a name looked up in PATH")
	fs.StringVar(&cfg.Root, "mps-root", isolation.DefaultMPSRoot, "host directory holding each card's desired state (written by the device plugin), status, and MPS pipe and log directories; at most 38 bytes (MPS's socket paths)")
	fs.DurationVar(&cfg.Poll, "poll", isolation.DefaultMPSPoll, "how often the cards' desired states are read")
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nRuns one MPS control daemon per card that the device plugin (--mps-daemons=%s) asked one for under\n--mps-root, with the card's default pinned memory limit, and restarts those that crash. Started again,\nit brings back the daemon of every such card at once. SIGTERM quits the daemons. Flags:\n",
			fs.Name(), MPSDaemonsExternal)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if !filepath.IsAbs(cfg.Root) {
		return cfg, fmt.Errorf("--mps-root %q must be absolute", cfg.Root)
	}
	if err := isolation.CheckMPSRoot(cfg.Root); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// RunMPSDaemons runs mps mode's daemons, isolation.MPSDaemons, over
// cfg.Root until ctx ends, then quits them. A control binary that cannot be
// found, or a /dev/shm that is not <root>/shm, is logged, not fatal. The
// plugin does not choose mps on such a node, and a daemon asked for anyway
// fails where the plugin reports it.
func RunMPSDaemons(ctx context.Context, cfg isolation.MPSDaemonsConfig) error {
	logger := klog.FromContext(ctx)
	if p, err := exec.LookPath(cfg.Control); err != nil {
		logger.Error(err, "MPS control binary not found; cards the plugin asks a daemon for get none", "mpsControl", cfg.Control)
	} else {
		cfg.Control = p
	}
	if err := isolation.CheckMPSShm(isolation.DevShm, cfg.Root); err != nil {
		logger.Error(err, "MPS servers would not share memory with their clients")
	}
	logger.Info("Serving MPS control daemons", "root", cfg.Root, "mpsControl", cfg.Control, "poll", cfg.Poll)
	return isolation.NewMPSDaemons(ctx, cfg).Run(ctx)
}
