package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// RefusedBy reports whether err is kube-apiserver refusing a request
// because the ValidatingAdmissionPolicy named policy denied it.
func RefusedBy(err error, policy string) bool {
	return err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) &&
		strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// WaitPolicyEnforced calls probe, a request policy must refuse (a dry run,
// so that nothing changes if it is let through), every 100 ms until policy
// refuses it: kube-apiserver enforces a policy a moment after it and its
// binding are created, not at once. It fails after timeout with the last
// answer.
func WaitPolicyEnforced(ctx context.Context, policy string, timeout time.Duration, probe func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := probe(ctx)
		if ctx.Err() == nil { // not cut short by the timeout
			last = err
		}
		return RefusedBy(err, policy), nil
	})
	switch {
	case err == nil:
		return nil
	case last == nil:
		return fmt.Errorf("waiting for admission policy %s to refuse a probe: still allowed after %s", policy, timeout)
	default:
		return fmt.Errorf("waiting for admission policy %s to refuse a probe: not after %s; last answer: %w", policy, timeout, last)
	}
}
