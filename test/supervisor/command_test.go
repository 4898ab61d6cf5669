package supervisor

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCmd  string
		wantExit int
		wantErr  bool
		wantDir  string
	}{
		{name: "no command", args: nil, wantExit: 2},
		{name: "help", args: []string{"help"}},
		{name: "-h", args: []string{"-h", "-dir", "x"}},
		{name: "unknown", args: []string{"start"}, wantExit: 1, wantErr: true},
		{name: "flag first", args: []string{"-dir", "x", "up"}, wantExit: 1, wantErr: true},
		{name: "up", args: []string{"up"}, wantCmd: "up"},
		{name: "down with flags", args: []string{"down", "-dir", "/tmp/d"}, wantCmd: "down", wantDir: "/tmp/d"},
		{name: "serve", args: []string{ServeCommand}, wantCmd: ServeCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("demo", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			dir := fs.String("dir", "", "state directory")
			cmd, exit, err := ParseCommand(fs, "usage\n", tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			got := []any{cmd, exit, *dir}
			want := []any{tc.wantCmd, tc.wantExit, tc.wantDir}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("command, exit status, -dir (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStateDir(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ root, dir, want string }{
		{"/repo", "", "/repo/_output/demo"},
		{"/repo", "/var/tmp/x", "/var/tmp/x"},
		{"/repo", "rel", filepath.Join(wd, "rel")},
	} {
		got, err := StateDir(tc.root, tc.dir, "demo")
		if err != nil || got != tc.want {
			t.Errorf("StateDir(%q, %q) = %q, %v; want %q", tc.root, tc.dir, got, err, tc.want)
		}
	}
}
