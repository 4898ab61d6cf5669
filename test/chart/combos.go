package chart

import (
	"fmt"
	"strings"
)

// Combo is one supported combination of values.
type Combo struct {
	// Name is unique, e.g. "second-scheduler/webhook/helm-tls/admission".
	Name string
	// Values override the chart's defaults.
	Values map[string]any
	// Plain, when set, is the file under manifests/rendered that holds this
	// combination's rendering.
	Plain string
	// KubeVersion is the cluster version it is rendered for; "" is
	// KubeVersion (the package's).
	KubeVersion string
}

// VersionedPlain are the renderings kept under manifests/rendered for
// other Kubernetes versions than KubeVersion, in a directory per version:
// those of the topologies whose objects depend on it (the second
// scheduler's image and ClusterRole), for make test.
func VersionedPlain() []Combo {
	var out []Combo
	for _, c := range Combos() {
		if c.Name == "second-scheduler/webhook/helm-tls" {
			c.KubeVersion = "v1.37.2"
			c.Plain = "kubernetes-v1.37/" + c.Plain
			out = append(out, c)
		}
	}
	return out
}

// Combos are every supported combination: topology × webhook (second
// scheduler only) × certificates (Helm, cert-manager with the chart's CA,
// cert-manager with the operator's issuer; only where there is TLS) ×
// ServiceMonitor × admission policies, and each topology with the DRA
// driver beside the device plugin. The defaults of each dimension come
// first, so the first combination is the chart's defaults.
func Combos() []Combo {
	type tls struct {
		name string
		cm   map[string]any
	}
	tlsModes := []tls{
		{"helm-tls", map[string]any{"enabled": false}},
		{"cert-manager", map[string]any{"enabled": true}},
		{"cert-manager-issuer", map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}},
	}
	var out []Combo
	for _, topology := range []string{"second-scheduler", "extender"} {
		webhooks := []bool{true}
		if topology == "second-scheduler" {
			webhooks = append(webhooks, false)
		}
		for _, webhook := range webhooks {
			modes := tlsModes
			if !webhook {
				modes = tlsModes[:1] // no TLS at all: the extender is on loopback
			}
			for _, mode := range modes {
				for _, sm := range []bool{false, true} {
					for _, adm := range []bool{true, false} {
						parts := []string{topology}
						if topology == "second-scheduler" {
							parts = append(parts, map[bool]string{true: "webhook", false: "no-webhook"}[webhook])
						}
						if webhook {
							parts = append(parts, mode.name)
						}
						if sm {
							parts = append(parts, "service-monitor")
						}
						if !adm {
							parts = append(parts, "no-admission-policies")
						}
						out = append(out, Combo{
							Name: strings.Join(parts, "/"),
							Values: map[string]any{
								"topology":          topology,
								"scheduler":         map[string]any{"webhook": map[string]any{"enabled": webhook}},
								"tls":               map[string]any{"certManager": mode.cm},
								"serviceMonitor":    map[string]any{"enabled": sm},
								"admissionPolicies": map[string]any{"enabled": adm},
							},
						})
					}
				}
			}
		}
	}
	out = append(out, Combo{
		Name: "extender/helm-tls/dra-driver",
		Values: map[string]any{
			"topology":  "extender",
			"draDriver": map[string]any{"enabled": true},
		},
	}, Combo{
		// The webhook's conversion of pods bound for DRA nodes, its RBAC
		// and flags (test/integration runs this rendering).
		Name: "second-scheduler/webhook/helm-tls/dra-driver",
		Values: map[string]any{
			"topology":  "second-scheduler",
			"draDriver": map[string]any{"enabled": true},
		},
	})
	plain := map[string]string{
		"second-scheduler/webhook/helm-tls":            "second-scheduler.yaml",
		"second-scheduler/webhook/cert-manager":        "second-scheduler-cert-manager.yaml",
		"second-scheduler/no-webhook":                  "second-scheduler-no-webhook.yaml",
		"extender/helm-tls":                            "extender.yaml",
		"extender/cert-manager":                        "extender-cert-manager.yaml",
		"extender/helm-tls/dra-driver":                 "extender-dra-driver.yaml",
		"second-scheduler/webhook/helm-tls/dra-driver": "second-scheduler-dra-driver.yaml",
	}
	for i := range out {
		out[i].Plain = plain[out[i].Name]
	}
	return out
}

// PlainHeader is the comment that opens each file under manifests/rendered.
func PlainHeader(c Combo) string {
	if c.KubeVersion != "" {
		return fmt.Sprintf("# For Kubernetes %s (helm template --kube-version %[1]s).\n", c.KubeVersion) + PlainHeader(Combo{Name: c.Name})
	}
	return fmt.Sprintf("# Rendered from manifests/charts/gpushare (release %q, namespace %s) with\n"+
		"# the values of combination %q (test/chart Combos); do not edit: change the\n"+
		"# chart and run `cd test/chart && go test -run TestPlainManifests -update`.\n"+
		"# Generated certificate data reads %q: replace it, or use a\n"+
		"# cert-manager rendering (docs/install.md).\n", Release.Name, Release.Namespace, c.Name, Placeholder[:16]+"...")
}
