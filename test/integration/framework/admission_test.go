package framework

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRefusedBy(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	denied := errors.New("ValidatingAdmissionPolicy 'p' with binding 'p' denied request: no")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"refused by the policy", apierrors.NewForbidden(pods, "x", denied), true},
		{"refused by the policy as invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", nil), false},
		{"refused by another policy", apierrors.NewForbidden(pods, "x", errors.New("ValidatingAdmissionPolicy 'q' with binding 'q' denied request: no")), false},
		{"refused by RBAC", apierrors.NewForbidden(pods, "x", errors.New(`User "u" cannot patch resource "pods"`)), false},
		{"not refused", nil, false},
		{"another error naming the policy", denied, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RefusedBy(tt.err, "p"); got != tt.want {
				t.Errorf("RefusedBy(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
