package nodeagent

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// fakeTaintAPI is one node whose resourceVersion moves on with every
// write; conflicts makes the next writes fail as if another writer came
// first.
type fakeTaintAPI struct {
	node      corev1.Node
	conflicts int
	writes    int
}

func (f *fakeTaintAPI) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	n := f.node.DeepCopy()
	n.Name = name
	return n, nil
}

func (f *fakeTaintAPI) SetNodeTaints(_ context.Context, _, rv string, taints []corev1.Taint) error {
	if f.conflicts > 0 {
		f.conflicts--
		f.bump()
		return errors.New("the resourceVersion test failed")
	}
	if rv != f.node.ResourceVersion {
		return errors.New("stale resourceVersion " + rv)
	}
	f.node.Spec.Taints = taints
	f.writes++
	f.bump()
	return nil
}

func (f *fakeTaintAPI) bump() { f.node.ResourceVersion += "1" }

var _ NodeTaintAPI = (*fakeTaintAPI)(nil)

func TestIdleTaint(t *testing.T) {
	other := corev1.Taint{Key: "ops.example.com/drain", Effect: corev1.TaintEffectNoSchedule}
	idle := corev1.Taint{Key: gpushare.TaintIdleGPUs, Effect: corev1.TaintEffectPreferNoSchedule}
	finished := util.MakePod("done").GPUMem(4).Node("n").Obj()
	finished.Status.Phase = corev1.PodSucceeded
	deleting := util.MakePod("going").GPUMem(4).Node("n").Obj()
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name            string
		cards, minCards int
		pods            []*corev1.Pod
		before          []corev1.Taint
		conflicts       int
		want            []corev1.Taint
		wantChanged     bool
	}{
		{name: "idle node of 4 cards: tainted beside another taint", cards: 4, minCards: 4,
			pods:   []*corev1.Pod{util.MakePod("web").Requests("1", "1Gi").Node("n").Obj(), finished},
			before: []corev1.Taint{other}, want: []corev1.Taint{other, idle}, wantChanged: true},
		{name: "a GPU pod: untainted", cards: 8, minCards: 4, pods: []*corev1.Pod{util.MakePod("train").GPUMem(8).Node("n").Obj()},
			before: []corev1.Taint{idle, other}, want: []corev1.Taint{other}, wantChanged: true},
		{name: "a GPU pod being deleted still holds its cards", cards: 8, minCards: 4, pods: []*corev1.Pod{deleting},
			before: []corev1.Taint{idle}, want: []corev1.Taint{}, wantChanged: true},
		{name: "already right: no write", cards: 8, minCards: 4, before: []corev1.Taint{idle}, want: []corev1.Taint{idle}},
		{name: "2 cards: never tainted", cards: 2, minCards: 4},
		{name: "0 turns it off and removes a leftover", cards: 8, minCards: 0, before: []corev1.Taint{idle}, want: []corev1.Taint{}, wantChanged: true},
		{name: "another writer came first twice", cards: 4, minCards: 4, conflicts: 2, before: []corev1.Taint{other},
			want: []corev1.Taint{other, idle}, wantChanged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeTaintAPI{node: corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}, Spec: corev1.NodeSpec{Taints: tc.before}}, conflicts: tc.conflicts}
			it := &IdleTaint{API: api, Node: "n", Cards: tc.cards, MinCards: tc.minCards, Pods: func() []*corev1.Pod { return tc.pods }}
			changed, err := it.Sync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.wantChanged || api.writes != map[bool]int{true: 1, false: 0}[tc.wantChanged] {
				t.Errorf("changed %v with %d writes, want %v", changed, api.writes, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.want, api.node.Spec.Taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIdleTaintRemove: a stopping plugin takes its taint off and keeps the
// others; it gives up after idleTaintTries conflicting writes, saying so.
func TestIdleTaintRemove(t *testing.T) {
	other := corev1.Taint{Key: "ops.example.com/drain", Effect: corev1.TaintEffectNoSchedule}
	api := &fakeTaintAPI{node: corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: gpushare.TaintIdleGPUs, Effect: corev1.TaintEffectPreferNoSchedule}, other}}}}
	it := &IdleTaint{API: api, Node: "n", Cards: 8, MinCards: 4, Pods: func() []*corev1.Pod { return nil }}
	if err := it.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]corev1.Taint{other}, api.node.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	api.conflicts = idleTaintTries
	if _, err := it.Sync(context.Background()); err == nil {
		t.Errorf("Sync with every write in conflict succeeded")
	}
}
