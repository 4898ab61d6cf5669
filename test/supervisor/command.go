package supervisor

import (
	"flag"
	"fmt"
	"os"
	"slices"
)

// Commands are a demo program's commands: up starts the supervisor (or
// finds it), status reports again, down stops it, and ServeCommand is the
// supervisor itself.
var Commands = []string{"up", "status", "down", ServeCommand}

// ParseCommand reads a demo program's command line (args: os.Args[1:]),
// its command, one of Commands, then fs's flags. A missing command prints
// usage and returns exit status 2; help (-h, -help, --help) prints usage to
// stdout and returns 0; in both cases cmd is "". An unknown command prints
// usage and returns an error.
func ParseCommand(fs *flag.FlagSet, usage string, args []string) (cmd string, exit int, err error) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if len(args) == 0 {
		fs.Usage()
		return "", 2, nil
	}
	cmd = args[0]
	switch {
	case slices.Contains([]string{"help", "-h", "-help", "--help"}, cmd):
		// Before anything else: help works anywhere, not only inside the
		// repository.
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return "", 0, nil
	case !slices.Contains(Commands, cmd):
		fs.Usage()
		return "", 1, fmt.Errorf("unknown command %q", cmd)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return "", 2, err
	}
	return cmd, 0, nil
}
