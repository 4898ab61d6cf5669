package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// shellVar matches a shell variable the workflow expands: $NAME or
// ${NAME...}.
var shellVar = regexp.MustCompile(`\$(\{[^}]*\}|[A-Z_]+)`)

// TestReleaseWorkflow: the forge's release workflow runs on a version tag
// and runs make publish, which make -n expands with the variables it
// gives (a tag's name and an owner standing in for the forge's). So the
// workflow cannot name a target or variable the Makefile lost.
func TestReleaseWorkflow(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		// On is the workflow's on: key, which YAML 1.1 reads as true.
		On struct {
			Push struct {
				Tags []string `json:"tags"`
			} `json:"push"`
		} `json:"true"`
		Jobs map[string]struct {
			Steps []struct {
				Run  string            `json:"run"`
				With map[string]string `json:"with"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	if len(wf.On.Push.Tags) == 0 || !strings.HasPrefix(wf.On.Push.Tags[0], "v") {
		t.Errorf("the workflow runs on tags %q, want version tags vX.Y.Z", wf.On.Push.Tags)
	}
	var makes []string
	for _, job := range wf.Jobs {
		for _, s := range job.Steps {
			if f := s.With["go-version-file"]; f != "" {
				if _, err := os.Stat(filepath.Join(root, f)); err != nil {
					t.Errorf("setup-go reads %s: %v", f, err)
				}
			}
			for _, line := range strings.Split(s.Run, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "make ") {
					makes = append(makes, strings.TrimSpace(line))
				}
			}
		}
	}
	if len(makes) != 1 || !strings.HasPrefix(makes[0], "make publish ") {
		t.Fatalf("the workflow runs %q, want one make publish", makes)
	}
	line := shellVar.ReplaceAllStringFunc(makes[0], func(v string) string {
		switch {
		case strings.Contains(v, "GITHUB_REF_NAME"):
			return "v0.1.0"
		case strings.Contains(v, "GITHUB_REPOSITORY_OWNER"):
			return "gpushare"
		}
		t.Errorf("the make line expands %s, which this test does not know", v)
		return v
	})
	cmd := exec.Command("make", append([]string{"-n"}, Fields(line)[1:]...)...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out.String())
	}
	for _, want := range []string{"--registry=ghcr.io/gpushare", "--version=v0.1.0", "--platforms=linux/amd64,linux/arm64", "hack/release publish"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("make -n %s does not pass %s:\n%s", line, want, out.String())
		}
	}
}

// TestMakeReleaseDefaultsToTheHost: make release without PLATFORMS builds
// the build host's platform only (no cross compiler needed), for the
// registry make publish pushes to by default.
func TestMakeReleaseDefaultsToTheHost(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command("make", "-n", "release", "VERSION=v0.1.0")
	cmd.Dir = repoRoot(t)
	// The test's own environment must not choose for make.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PLATFORMS=") && !strings.HasPrefix(e, "REGISTRY=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("make -n release: %v\n%s", err, out.String())
	}
	for _, want := range []string{"--platforms=linux/" + runtime.GOARCH + " ", "--registry=ghcr.io/gpushare "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("make -n release does not pass %q:\n%s", want, out.String())
		}
	}
}
