package extender

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// PodAPI is the part of the Kubernetes API the binder uses.
type PodAPI interface {
	// GetPod reads a pod from the API server, not a cache.
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// Bind creates the pod's Binding to node, provided the pod still has UID
	// uid and no node. It sets spec.nodeName and merges annotations into the
	// pod in one update.
	Bind(ctx context.Context, namespace, name string, uid types.UID, node string, annotations map[string]string) error
}

// PodCache reads pods from an informer cache, which may be stale or miss
// new pods.
type PodCache interface {
	Pod(namespace, name string) (*kubeinfo.PodInfo, bool)
}

// maxConflictRetries bounds the re-read-and-bind attempts of one bind.
const maxConflictRetries = 5

// BindTimeout bounds one bind: reading the pod, its Bindings and re-reads.
// It is the bind's own deadline, not kube-scheduler's request's. The
// scheduler gives up waiting at its extender httpTimeout. A bind cut off
// there could be left between the API server's commit and the cache.
const BindTimeout = 30 * time.Second

// readBackTimeout bounds each read of the pod after an ambiguous answer.
// readBackAttempts is how many are made before the outcome is given up as
// unknown.
const (
	readBackTimeout  = 5 * time.Second
	readBackAttempts = 3
)

// outcome is what a bind attempt left in the API.
type outcome int

const (
	// notBound: no Binding of ours exists, so the cards are released. It was
	// refused, or the pod is gone or bound elsewhere.
	notBound outcome = iota
	// bound: the pod is bound to the node.
	bound
	// unknown: a Binding may have been made, and the pod could not be read
	// back. The cards stay held until the informer shows the pod or the
	// assumption expires.
	unknown
)

// Fencer bounds each Binding write to this replica's term as leader
// (leader.Gate.Fence). It refuses the write when the replica does not
// lead. Otherwise it returns a context that ends before another replica
// can take over. done is called when the write has returned.
type Fencer interface {
	Fence(ctx context.Context) (fenced context.Context, done func(), err error)
}

// Assumer is what a bind asks of the allocation cache: choose and hold
// cards, then confirm or release them.
type Assumer interface {
	// Assume chooses pod's cards on node and holds them.
	Assume(ctx context.Context, pod *kubeinfo.PodInfo, node string) (*gpushare.Allocation, error)
	// FinishBinding marks the held cards as bound.
	FinishBinding(uid types.UID)
	// Forget releases the cards a failed bind held.
	Forget(uid types.UID)
	// CardTotal returns the memory of card idx of node, in its units.
	CardTotal(node string, idx int) (int64, bool)
}

var _ Assumer = (*cache.Cache)(nil)

// BinderConfig builds a Binder.
type BinderConfig struct {
	// Cache chooses and holds the cards.
	Cache Assumer
	// API reads pods and creates their Bindings.
	API PodAPI
	// Pods reads pods from the informer before asking the API.
	Pods PodCache
	// Clock stamps the assume time; nil for the real clock.
	Clock clock.PassiveClock
	// Fence, when set, fences every Binding write; several replicas set it.
	Fence Fencer
}

// Validate reports what is missing.
func (c *BinderConfig) Validate() error {
	if c.Cache == nil || c.API == nil || c.Pods == nil {
		return errors.New("binder: the cache, the API and the pod reader are all needed")
	}
	return nil
}

// Binder chooses cards, records them on the pod and binds it.
type Binder struct {
	cache Assumer
	api   PodAPI
	pods  PodCache
	clock clock.PassiveClock
	// fence, when set, fences every Binding write.
	fence Fencer
}

// NewBinder returns the binder of cfg.
func NewBinder(cfg BinderConfig) (*Binder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Binder{cache: cfg.Cache, api: cfg.API, pods: cfg.Pods, clock: cfg.Clock, fence: cfg.Fence}, nil
}

// Bind places the pod on node's cards, writes the annotations and creates
// the Binding. It is idempotent for a pod already bound to node. It runs
// under its own deadline (BindTimeout), whatever ctx's. It logs with ctx's
// logger, which the caller has given the pod and node keys, as the bind
// handler does.
func (b *Binder) Bind(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	logger := klog.FromContext(ctx)
	if namespace == "" || name == "" || node == "" {
		return fmt.Errorf("bind request needs PodNamespace, PodName and Node; got %q, %q, %q", namespace, name, node)
	}
	// The search for cards ends with the request: once kube-scheduler
	// has given up, nothing is held. The writes after it do not end
	// with it (see BindTimeout).
	reqCtx := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), BindTimeout)
	defer cancel()
	pod, err := b.pod(ctx, namespace, name, uid)
	if err != nil {
		return err
	}
	if pod.NodeName != "" {
		if pod.NodeName == node {
			// A retry after an outcome left unknown: the Binding was made.
			// Our assumption, if any, is bound now; otherwise this is a no-op.
			b.cache.FinishBinding(pod.UID)
			logger.V(2).Info("Pod already bound to this node; nothing to do")
			return nil
		}
		return fmt.Errorf("pod %s/%s is already bound to node %s, not %s: %w", namespace, name, pod.NodeName, node, cache.ErrBoundElsewhere)
	}
	if pod.Demand == nil {
		// Say why: no gpu-mem at all, or an invalid request.
		full, err := b.api.GetPod(ctx, namespace, name)
		if err == nil {
			_, err = gpushare.PodDemand(full)
		}
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	alloc, err := b.cache.Assume(reqCtx, pod, node)
	if err != nil {
		return fmt.Errorf("placing pod %s/%s on node %s: %w", namespace, name, node, err)
	}
	logger.V(4).Info("Chose cards", "allocation", alloc)

	out, err := b.bind(ctx, pod, node, alloc)
	switch out {
	case bound:
		b.cache.FinishBinding(pod.UID)
		logger.V(2).Info("Bound pod", "units", alloc.Total(), "unit", alloc.Unit)
	case notBound:
		b.cache.Forget(pod.UID)
	case unknown:
		// Keep the assumption. Releasing the cards of a Binding that may
		// exist would let another pod take them.
		err = withResult(BindUnknown, err)
	}
	return err
}

// resultError tags a bind's error with its result, BindConflict or
// BindUnknown, without changing its message.
type resultError struct {
	result string
	err    error
}

func (e *resultError) Error() string { return e.err.Error() }
func (e *resultError) Unwrap() error { return e.err }

func withResult(result string, err error) error { return &resultError{result: result, err: err} }

// BindResultOf returns the result of the error Binder.Bind returned:
// BindBound, BindConflict, BindError or BindUnknown.
func BindResultOf(err error) string {
	var re *resultError
	switch {
	case err == nil:
		return BindBound
	case errors.As(err, &re):
		return re.result
	case errors.Is(err, cache.ErrBoundElsewhere), errors.Is(err, cache.ErrBindInFlight), errors.Is(err, cache.ErrPodGone):
		return BindConflict
	}
	return BindError
}

// pod returns the pod from the informer cache. It reads the API when the
// cache misses the pod, or holds an older pod of the same name.
func (b *Binder) pod(ctx context.Context, namespace, name string, uid types.UID) (*kubeinfo.PodInfo, error) {
	if p, ok := b.pods.Pod(namespace, name); ok && (uid == "" || p.UID == uid) {
		return p, nil
	}
	p, err := b.api.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	if uid != "" && p.UID != uid {
		return nil, withResult(BindConflict, fmt.Errorf("pod %s/%s has UID %s, the scheduler asked to bind %s (deleted and re-created?)", namespace, name, p.UID, uid))
	}
	return kubeinfo.NewPodInfo(p), nil
}

// annotations returns what bind writes on the pod.
func (b *Binder) annotations(alloc *gpushare.Allocation) (map[string]string, error) {
	enc, err := alloc.Encode()
	if err != nil {
		return nil, err
	}
	// The Aliyun keys describe the first app container's first card.
	first, ok := alloc.FirstAppDevice()
	if !ok {
		return nil, fmt.Errorf("allocation on node %s names no card", alloc.Node)
	}
	idx := first.Index
	devTotal, _ := b.cache.CardTotal(alloc.Node, idx)
	return map[string]string{
		gpushare.AnnotationAllocation: enc,
		gpushare.AnnotationIndex:      strconv.Itoa(idx),
		gpushare.AnnotationPodMem:     strconv.FormatInt(alloc.Total(), 10),
		gpushare.AnnotationDevMem:     strconv.FormatInt(devTotal, 10),
		gpushare.AnnotationAssigned:   "false",
		gpushare.AnnotationAssumeTime: strconv.FormatInt(b.clock.Now().UnixNano(), 10),
	}, nil
}

// bind creates the Binding that carries the allocation annotations. So
// the API server sets the node and the annotations in one update. No
// reader ever sees a pod annotated but unbound, and a bind costs one
// write.
//
// The answers it handles:
//   - A 4xx answer refuses the Binding.
//   - A conflict makes it re-read the pod. Already on node (a retry after
//     a timeout that hid success) is success. On another node, or
//     re-created, is an error. Otherwise it tries again.
//   - A server error (5xx) was answered, so the request is over. The pod
//     is read back the same way, and shows the Binding if it was made.
//   - No answer at all, or a timeout, leaves the request possibly still
//     running in the API server, so the Binding may yet be made. Only a
//     read back that shows the pod bound, gone, or bound elsewhere settles
//     it.
//
// The outcome is unknown when the pod cannot be read. It is also unknown
// when every try ends with the pod still unbound while such a request may
// be running.
func (b *Binder) bind(ctx context.Context, pod *kubeinfo.PodInfo, node string, alloc *gpushare.Allocation) (outcome, error) {
	ann, err := b.annotations(alloc)
	if err != nil {
		return notBound, err
	}
	inFlight := false // an earlier Binding request may still be running
	for attempt := 0; ; attempt++ {
		err = b.write(ctx, pod, node, ann)
		var notLeader *notLeaderError
		switch {
		case errors.As(err, &notLeader) && inFlight:
			return unknown, fmt.Errorf("binding pod %s/%s to node %s: %w; an earlier Binding request may yet be applied; its cards stay held until the API shows the pod or the assumption expires", pod.Namespace, pod.Name, node, err)
		case errors.As(err, &notLeader):
			return notBound, fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
		}
		if err == nil {
			return bound, nil
		}
		bindErr := fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
		mayExist := inFlight // a Binding of ours may exist now
		switch {
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		case unanswered(err):
			inFlight, mayExist = true, true
		case serverError(err):
			mayExist = true
		case !inFlight && apierrors.IsNotFound(err):
			return notBound, withResult(BindConflict, bindErr) // the pod is gone
		case !inFlight:
			return notBound, bindErr // refused, and nothing earlier is running
		}
		fresh, gerr := b.readBack(ctx, pod.Namespace, pod.Name)
		switch {
		case apierrors.IsNotFound(gerr):
			return notBound, withResult(BindConflict, fmt.Errorf("%w; pod %s/%s was deleted", bindErr, pod.Namespace, pod.Name))
		case gerr != nil && mayExist:
			return unknown, fmt.Errorf("%w; reading the pod back: %w; its cards stay held until the API shows the pod or the assumption expires", bindErr, gerr)
		case gerr != nil:
			return notBound, fmt.Errorf("re-reading pod %s/%s after a binding conflict: %w", pod.Namespace, pod.Name, gerr)
		case fresh.UID != pod.UID:
			return notBound, withResult(BindConflict, fmt.Errorf("pod %s/%s was re-created while binding", pod.Namespace, pod.Name))
		case fresh.Spec.NodeName == node:
			return bound, nil
		case fresh.Spec.NodeName != "":
			return notBound, fmt.Errorf("pod %s/%s was bound to node %s meanwhile: %w", pod.Namespace, pod.Name, fresh.Spec.NodeName, cache.ErrBoundElsewhere)
		case attempt == maxConflictRetries && inFlight:
			return unknown, fmt.Errorf("%w; the pod still shows no node, but an earlier Binding request may yet be applied; its cards stay held until the API shows the pod or the assumption expires", bindErr)
		case attempt == maxConflictRetries && apierrors.IsConflict(err):
			return notBound, withResult(BindConflict, bindErr)
		case attempt == maxConflictRetries:
			return notBound, bindErr
		}
	}
}

// notLeaderError is a Binding write the fence refused; none was sent.
type notLeaderError struct{ err error }

func (e *notLeaderError) Error() string { return e.err.Error() }
func (e *notLeaderError) Unwrap() error { return e.err }

// write sends one Binding. When b.fence is set, the write is fenced to
// this replica's term.
func (b *Binder) write(ctx context.Context, pod *kubeinfo.PodInfo, node string, ann map[string]string) error {
	if b.fence == nil {
		return b.api.Bind(ctx, pod.Namespace, pod.Name, pod.UID, node, ann)
	}
	fenced, done, err := b.fence.Fence(ctx)
	if err != nil {
		return &notLeaderError{err: err}
	}
	defer done()
	return b.api.Bind(fenced, pod.Namespace, pod.Name, pod.UID, node, ann)
}

// unanswered reports whether err leaves the request possibly still running
// in the API server. That is no answer at all (a connection lost, a client
// deadline), or a timeout answer sent while the request may go on: 408,
// 504, or a Timeout or ServerTimeout reason.
func unanswered(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	s := st.Status()
	return s.Code == 0 || s.Code == http.StatusRequestTimeout || s.Code == http.StatusGatewayTimeout ||
		s.Reason == metav1.StatusReasonTimeout || s.Reason == metav1.StatusReasonServerTimeout
}

// serverError reports whether err is a 5xx answer.
func serverError(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Code >= http.StatusInternalServerError
}

// readBack reads the pod from the API, trying readBackAttempts times. Each
// try is bounded by readBackTimeout, even if ctx's deadline has passed.
func (b *Binder) readBack(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var err error
	for range readBackAttempts {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
		var p *corev1.Pod
		p, err = b.api.GetPod(rctx, namespace, name)
		cancel()
		if err == nil || apierrors.IsNotFound(err) {
			return p, err
		}
	}
	return nil, err
}

// ClientPodAPI implements PodAPI with a clientset.
type ClientPodAPI struct {
	Client kubernetes.Interface
}

var _ PodAPI = ClientPodAPI{}

func (a ClientPodAPI) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return a.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (a ClientPodAPI) Bind(ctx context.Context, namespace, name string, uid types.UID, node string, annotations map[string]string) error {
	return a.Client.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
}
