package preemption

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/test/util"
)

// TestNodeFilterTolerates: the pod's tolerations as kube-scheduler matches
// them against a node's taints.
func TestNodeFilterTolerates(t *testing.T) {
	taint := corev1.Taint{Key: "dedicated", Value: "infer", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name string
		tol  corev1.Toleration
		want bool
	}{
		{"equal key, value and effect", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infer", Effect: corev1.TaintEffectNoSchedule}, true},
		{"no operator means Equal", corev1.Toleration{Key: "dedicated", Value: "infer"}, true},
		{"another value", corev1.Toleration{Key: "dedicated", Value: "train"}, false},
		{"Exists, any value", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}, true},
		{"empty key and Exists: every taint", corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{"another effect", corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{"another key", corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists}, false},
		{"Gt, an alpha operator, matches nothing", corev1.Toleration{Key: "dedicated", Operator: "Gt", Value: "1"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newNodeFilter(util.MakePod("p").Obj())
			f.tolerations = []corev1.Toleration{tc.tol}
			if got := f.tolerates(taint); got != tc.want {
				t.Errorf("tolerates = %v, want %v", got, tc.want)
			}
		})
	}
}
