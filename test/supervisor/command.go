package supervisor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// Commands are a demo program's commands: Up starts the supervisor (or
// finds it), Status reports again, Down stops it, and Serve is the
// supervisor itself (ServeCommand). Main runs one with a context that
// SIGINT and SIGTERM cancel.
type Commands struct {
	Up, Status, Down, Serve func(ctx context.Context) error
}

// commandNames are the names of the Commands, as a demo's command line
// gives them.
var commandNames = []string{"up", "status", "down", ServeCommand}

// Main runs a demo program and returns its exit status: it reads the
// command line (args: os.Args[1:]) with ParseCommand, calls setup (which
// completes and checks the program's options; nil: nothing to do), then
// runs the command. name starts the program's error messages ("demo: ...",
// exit status 1, see Fail); a command that returns an ExitCode ends with
// that status and no message.
func Main(name string, fs *flag.FlagSet, usage string, args []string, setup func() error, cmds Commands) int {
	cmd, exit, err := ParseCommand(fs, usage, args)
	if err != nil {
		return Fail(name, err)
	}
	if cmd == "" {
		return exit
	}
	if setup != nil {
		if err := setup(); err != nil {
			return Fail(name, err)
		}
	}
	run := map[string]func(context.Context) error{"up": cmds.Up, "status": cmds.Status, "down": cmds.Down, ServeCommand: cmds.Serve}[cmd]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		var silent ExitCode
		if errors.As(err, &silent) {
			return int(silent)
		}
		return Fail(name, err)
	}
	return 0
}

// ExitCode ends a demo program with a status and no further message.
type ExitCode int

func (e ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Fail prints err as one message of the program name ("name: err") and
// returns the exit status 1.
func Fail(name string, err error) int {
	fmt.Fprintln(os.Stderr, name+":", err)
	return 1
}

// ParseCommand reads a demo program's command line (args: os.Args[1:]),
// its command, one of up, status, down and ServeCommand, then fs's flags.
// A missing command prints usage and returns exit status 2; help (-h,
// -help, --help) prints usage to stdout and returns 0; in both cases cmd
// is "". An unknown command prints usage and returns an error.
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
	case !slices.Contains(commandNames, cmd):
		fs.Usage()
		return "", 1, fmt.Errorf("unknown command %q", cmd)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return "", 2, err
	}
	return cmd, 0, nil
}
