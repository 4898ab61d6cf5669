package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeRunner has the programs in installed; `docker info` fails unless
// daemon is true. It records what it runs.
type fakeRunner struct {
	installed map[string]bool
	daemon    bool
	ran       []string // Command.String() of each run
}

var _ Runner = (*fakeRunner)(nil)

func (f *fakeRunner) LookPath(file string) (string, error) {
	if f.installed[file] {
		return "/usr/bin/" + file, nil
	}
	return "", exec.ErrNotFound
}

func (f *fakeRunner) Run(_ context.Context, c Command, _, stderr io.Writer) error {
	f.ran = append(f.ran, c.String())
	if c.Name == "docker" && len(c.Args) > 0 && c.Args[0] == "info" && !f.daemon {
		_, _ = io.WriteString(stderr, "Client:\n Version: 28.0.0\n\nCannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n")
		return errors.New("exit status 1")
	}
	return nil
}

// TestChoose: auto takes docker only with a daemon, then podman, then
// buildah, else the Go-native builder, and says why in one line; a builder
// asked for by name must be usable.
func TestChoose(t *testing.T) {
	tests := []struct {
		name      string
		installed []string
		daemon    bool
		want      Builder
		wantErr   string
		wantNote  []string // substrings of the note
		ask       Builder
	}{
		{
			name:      "this machine: a docker CLI without a daemon",
			installed: []string{"docker"},
			ask:       Auto,
			want:      GoNative,
			wantNote:  []string{"Go-native", "docker: no daemon answers docker info (Cannot connect to the Docker daemon", "podman: not installed", "buildah: not installed"},
		},
		{name: "docker with a daemon", installed: []string{"docker", "podman"}, daemon: true, ask: Auto, want: Docker, wantNote: []string{"with docker"}},
		{name: "podman when docker has no daemon", installed: []string{"docker", "podman", "buildah"}, ask: Auto, want: Podman, wantNote: []string{"with podman"}},
		{name: "buildah alone", installed: []string{"buildah"}, ask: Auto, want: Buildah, wantNote: []string{"with buildah"}},
		{name: "nothing", ask: Auto, want: GoNative, wantNote: []string{"docker: not installed"}},
		{name: "go asked for, docker usable", installed: []string{"docker"}, daemon: true, ask: GoNative, want: GoNative, wantNote: []string{"as asked"}},
		{name: "docker asked for without a daemon", installed: []string{"docker"}, ask: Docker, wantErr: "no daemon answers docker info"},
		{name: "podman asked for, absent", ask: Podman, wantErr: "podman: not installed"},
		{name: "an unknown builder", ask: "kaniko", wantErr: `"kaniko"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRunner{installed: map[string]bool{}, daemon: tt.daemon}
			for _, p := range tt.installed {
				f.installed[p] = true
			}
			got, note, err := Choose(context.Background(), f, tt.ask)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Choose: error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Choose = %s, want %s (note %q)", got, tt.want, note)
			}
			if strings.Contains(note, "\n") {
				t.Errorf("note %q spans lines", note)
			}
			for _, s := range tt.wantNote {
				if !strings.Contains(note, s) {
					t.Errorf("note %q does not say %q", note, s)
				}
			}
		})
	}
}

// TestRunWithADockerfileBuilder: with podman, Run builds each Dockerfile
// from the repository root with the version and revision as build args
// and tags PREFIX+NAME:VERSION; it compiles nothing itself.
func TestRunWithADockerfileBuilder(t *testing.T) {
	f := &fakeRunner{installed: map[string]bool{"podman": true}}
	var out bytes.Buffer
	err := Run(context.Background(), Config{
		Builder: Auto, Version: "v1.2.0", Revision: "abc", Prefix: "ghcr.io/acme/", Dir: "/src",
		Runner: f, Stdout: &out, Stderr: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"podman build -f build/extender.Dockerfile --build-arg VERSION=v1.2.0 --build-arg REVISION=abc -t ghcr.io/acme/gpushare-scheduler-extender:v1.2.0 .",
		"podman build -f build/kubectl-inspect-gpushare.Dockerfile --build-arg VERSION=v1.2.0 --build-arg REVISION=abc -t ghcr.io/acme/kubectl-inspect-gpushare:v1.2.0 .",
		"podman build -f build/deviceplugin.Dockerfile --build-arg VERSION=v1.2.0 --build-arg REVISION=abc -t ghcr.io/acme/gpushare-device-plugin:v1.2.0 .",
		"podman build -f build/gpushare-dra-driver.Dockerfile --build-arg VERSION=v1.2.0 --build-arg REVISION=abc -t ghcr.io/acme/gpushare-dra-driver:v1.2.0 .",
	}
	if diff := cmp.Diff(want, f.ran); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); !strings.Contains(first, "with podman") {
		t.Errorf("first line %q does not name the builder", first)
	}
}

// TestRunRefusesABadTag: a version that cannot be a tag stops Run before
// anything is built.
func TestRunRefusesABadTag(t *testing.T) {
	f := &fakeRunner{installed: map[string]bool{"podman": true}}
	err := Run(context.Background(), Config{Builder: Auto, Version: "v1.2.0+build.1", Runner: f, Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "not a valid image tag") {
		t.Errorf("Run: %v, want a refusal of the tag", err)
	}
	if len(f.ran) != 0 {
		t.Errorf("ran %v before refusing", f.ran)
	}
}

// TestRunSelectsImages: --images builds only those, and an unknown name is
// an error listing the known ones.
func TestRunSelectsImages(t *testing.T) {
	f := &fakeRunner{installed: map[string]bool{"buildah": true}}
	err := Run(context.Background(), Config{Builder: Buildah, Version: "v1", Images: []string{"gpushare-device-plugin"}, Runner: f, Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.ran) != 1 || !strings.Contains(f.ran[0], "build/deviceplugin.Dockerfile") {
		t.Errorf("ran %v, want only the device plugin's build", f.ran)
	}
	err = Run(context.Background(), Config{Builder: Buildah, Version: "v1", Images: []string{"extender"}, Runner: f, Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "gpushare-scheduler-extender") {
		t.Errorf("Run with an unknown image: %v, want the known names", err)
	}
}
