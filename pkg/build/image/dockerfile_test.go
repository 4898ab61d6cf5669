package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
	line int // where it starts
}

// dockerfile is a parsed Dockerfile: the ARGs before the first FROM and
// the stages.
type dockerfile struct {
	globalArgs map[string]string // name -> default
	stages     []stage
}

// stage is one FROM and what follows it.
type stage struct {
	from, name   string // the base as written; the AS name
	instructions []instruction
}

// parseDockerfile reads the instructions of the Dockerfile at p; it knows
// comments, blank lines and backslash continuations, which is all ours use.
func parseDockerfile(p string) (dockerfile, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return dockerfile{}, err
	}
	df := dockerfile{globalArgs: map[string]string{}}
	var cur *instruction
	var all []instruction
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == nil && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		cont := strings.HasSuffix(trimmed, "\\")
		trimmed = strings.TrimSpace(strings.TrimSuffix(trimmed, "\\"))
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: i + 1}
		} else {
			cur.args += " " + trimmed
		}
		if !cont {
			all = append(all, *cur)
			cur = nil
		}
	}
	if cur != nil {
		return dockerfile{}, fmt.Errorf("%s:%d: a continuation runs past the end", p, cur.line)
	}
	for _, in := range all {
		switch {
		case in.cmd == "FROM":
			fields := strings.Fields(in.args)
			st := stage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			df.stages = append(df.stages, st)
		case len(df.stages) == 0 && in.cmd == "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			df.globalArgs[name] = def
		case len(df.stages) == 0:
			return dockerfile{}, fmt.Errorf("%s:%d: %s before FROM", p, in.line, in.cmd)
		default:
			st := &df.stages[len(df.stages)-1]
			st.instructions = append(st.instructions, in)
		}
	}
	return df, nil
}

// all returns the stage's instructions of command cmd.
func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instructions {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the stage's last instruction of command cmd (the one that
// counts for USER, ENTRYPOINT, WORKDIR).
func (s stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

var argRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// expand replaces ${NAME} and $NAME with vars' values.
func expand(s string, vars map[string]string) string {
	return argRef.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.Trim(m, "${}")
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}

// shellWords splits s into words as sh would for our simple lines:
// whitespace separates, double quotes group (and are removed).
func shellWords(s string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, c := range s {
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unbalanced quotes in %q", s)
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// keyValues parses LABEL's and ENV's KEY=VALUE words.
func keyValues(s string) (map[string]string, error) {
	words, err := shellWords(s)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not KEY=VALUE", w)
		}
		out[k] = v
	}
	return out, nil
}

// TestDockerfilesAgree parses build/<dir>.Dockerfile of every recipe and
// checks that it builds what the Go-native builder builds: the same go
// build command and environment (so the same binary), copied to the same
// path, run by the same user, entrypoint and working directory, with the
// same environment and labels; a distroless base with glibc exactly for
// the cgo binary, pinned by tag, from the builder's Debian release.
func TestDockerfilesAgree(t *testing.T) {
	const version, revision = "v9.9.9", "feedface"
	for _, r := range Recipes() {
		t.Run(r.Name, func(t *testing.T) {
			df, err := parseDockerfile(filepath.Join(repoRoot, r.Dockerfile()))
			if err != nil {
				t.Fatal(err)
			}
			if len(df.stages) != 2 || df.stages[0].name != "build" {
				t.Fatalf("want two stages, the first named build; got %+v", df.stages)
			}
			build, final := df.stages[0], df.stages[1]

			goImage, base := expand(build.from, df.globalArgs), expand(final.from, df.globalArgs)
			wantBase := "gcr.io/distroless/static-debian12:"
			if r.CGO {
				wantBase = "gcr.io/distroless/base-debian12:"
			}
			if !strings.HasPrefix(base, wantBase) || len(base) == len(wantBase) {
				t.Errorf("runtime base %q, want %s<tag>", base, wantBase)
			}
			if !strings.HasPrefix(goImage, "golang:") || !strings.HasSuffix(goImage, "-bookworm") {
				t.Errorf("builder image %q, want golang:<version>-bookworm (Debian 12, as the base)", goImage)
			}

			runs := build.all("RUN")
			i := slices.IndexFunc(runs, func(in instruction) bool { return strings.Contains(in.args, "go build") })
			if i < 0 {
				t.Fatal("no RUN go build in the build stage")
			}
			words, err := shellWords(expand(runs[i].args, map[string]string{"VERSION": version}))
			if err != nil {
				t.Fatal(err)
			}
			goAt := slices.Index(words, "go")
			if goAt < 0 {
				t.Fatalf("RUN %s: no go command", runs[i].args)
			}
			if diff := cmp.Diff(r.GoEnv(), words[:goAt]); diff != "" {
				t.Errorf("go build environment (-recipe +Dockerfile):\n%s", diff)
			}
			if diff := cmp.Diff(r.GoArgs(version, "/out/"+r.Name), words[goAt+1:]); diff != "" {
				t.Errorf("go build arguments (-recipe +Dockerfile):\n%s", diff)
			}

			// go build runs in the recipe's module, as GoBuild runs it.
			if wd, _ := build.last("WORKDIR"); wd.args != path.Join("/src", r.Module) {
				t.Errorf("the build stage's WORKDIR %q, want %q (the module of %s)", wd.args, path.Join("/src", r.Module), r.Package)
			}

			copies := final.all("COPY")
			if len(copies) != 1 || copies[0].args != "--from=build /out/"+r.Name+" "+r.Binary() {
				t.Errorf("COPY instructions %+v, want one: --from=build /out/%s %s", copies, r.Name, r.Binary())
			}
			cfg := r.RuntimeConfig(version, revision)
			if user, _ := final.last("USER"); user.args != cfg.User {
				t.Errorf("USER %q, want %q", user.args, cfg.User)
			}
			if wd, _ := final.last("WORKDIR"); wd.args != cfg.WorkingDir {
				t.Errorf("WORKDIR %q, want %q", wd.args, cfg.WorkingDir)
			}
			entrypoint, _ := final.last("ENTRYPOINT")
			var gotEntrypoint []string
			if err := json.Unmarshal([]byte(entrypoint.args), &gotEntrypoint); err != nil {
				t.Errorf("ENTRYPOINT %q is not the exec (JSON) form, which needs no shell: %v", entrypoint.args, err)
			}
			if diff := cmp.Diff(cfg.Entrypoint, gotEntrypoint); diff != "" {
				t.Errorf("ENTRYPOINT (-recipe +Dockerfile):\n%s", diff)
			}

			env := map[string]string{}
			for _, in := range final.all("ENV") {
				kv, err := keyValues(in.args)
				if err != nil {
					t.Fatalf("ENV %s: %v", in.args, err)
				}
				for k, v := range kv {
					env[k] = v
				}
			}
			wantEnv := map[string]string{}
			for _, kv := range cfg.Env {
				k, v, _ := strings.Cut(kv, "=")
				wantEnv[k] = v
			}
			if diff := cmp.Diff(wantEnv, env); diff != "" {
				t.Errorf("ENV (-recipe +Dockerfile):\n%s", diff)
			}

			labels := map[string]string{}
			for _, in := range final.all("LABEL") {
				kv, err := keyValues(expand(in.args, map[string]string{"VERSION": version, "REVISION": revision}))
				if err != nil {
					t.Fatalf("LABEL %s: %v", in.args, err)
				}
				for k, v := range kv {
					labels[k] = v
				}
			}
			if diff := cmp.Diff(cfg.Labels, labels); diff != "" {
				t.Errorf("LABEL (-recipe +Dockerfile):\n%s", diff)
			}
			for _, arg := range []string{"VERSION", "REVISION"} {
				if !slices.ContainsFunc(final.all("ARG"), func(in instruction) bool { return strings.HasPrefix(in.args, arg+"=") || in.args == arg }) {
					t.Errorf("the final stage does not declare ARG %s, so its labels would be empty", arg)
				}
			}
		})
	}
}

// TestDockerignore: the build context leaves out the binaries and build
// outputs (hundreds of MiB) and the history.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for _, want := range []string{".git", "bin", "_output"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}
