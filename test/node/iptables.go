package node

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

// iptablesTables are the tables kubelet and kube-proxy write, in each of
// iptables and ip6tables.
var (
	iptablesBins   = []string{"iptables", "ip6tables"}
	iptablesTables = []string{"filter", "nat", "mangle"}
)

// kubePrefix begins the names of the chains kubelet and kube-proxy make.
const kubePrefix = "KUBE-"

// kubeChains returns every chain named KUBE-* of the tables, each as
// "BIN/TABLE/CHAIN", sorted. A binary or table that cannot be listed is
// skipped (no ip6tables, no such table).
func kubeChains(ctx context.Context) []string {
	var out []string
	for _, bin := range iptablesBins {
		for _, table := range iptablesTables {
			rules, err := exec.CommandContext(ctx, bin, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(rules), "\n") {
				if name, ok := strings.CutPrefix(line, "-N "); ok && strings.HasPrefix(name, kubePrefix) {
					out = append(out, bin+"/"+table+"/"+name)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// removeKubeChains removes the KUBE-* chains that are not in keep (those
// the machine had before the node ran), with every rule that jumps to
// them: kube-proxy --cleanup removes its own, and this what is left,
// kubelet's (KUBE-FIREWALL, which drops packets to 127.0.0.0/8 from other
// addresses, and its canaries).
func removeKubeChains(ctx context.Context, keep []string) error {
	var errs []error
	for _, c := range kubeChains(ctx) {
		if slices.Contains(keep, c) {
			continue
		}
		parts := strings.SplitN(c, "/", 3)
		bin, table, chain := parts[0], parts[1], parts[2]
		rules, err := exec.CommandContext(ctx, bin, "-w", "-t", table, "-S").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s -S: %w", bin, table, err))
			continue
		}
		for _, line := range strings.Split(string(rules), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "-A" || !slices.Contains(f, "-j") || f[slices.Index(f, "-j")+1] != chain {
				continue
			}
			args := append([]string{"-w", "-t", table, "-D"}, f[1:]...)
			if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out))))
			}
		}
		for _, op := range []string{"-F", "-X"} {
			if out, err := exec.CommandContext(ctx, bin, "-w", "-t", table, op, chain).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s -t %s %s %s: %w: %s", bin, table, op, chain, err, strings.TrimSpace(string(out))))
			}
		}
	}
	return errors.Join(errs...)
}
