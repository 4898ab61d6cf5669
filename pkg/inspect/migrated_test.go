package inspect

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestMigratedNode prints a node just switched from Aliyun's gpushare to
// ours: testdata/migrated.json holds the node and pods exactly as
// test/kubelet's TestMigrateFromAliyun leaves them before the old pods end
// (that test checks, on every run, that it still does; -update there
// rewrites it). The pods Aliyun's extender placed carry only the
// ALIYUN_COM_GPU_MEM_* annotations and show on the card their index names,
// beside the pods our extender placed since; the pod placed by neither is
// listed apart; every card is full.
func TestMigratedNode(t *testing.T) {
	raw, err := os.ReadFile("testdata/migrated.json")
	if err != nil {
		t.Fatal(err)
	}
	decode := scheme.Codecs.UniversalDeserializer().Decode
	obj, _, err := decode(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, ok := obj.(*corev1.List)
	if !ok {
		t.Fatalf("testdata/migrated.json holds a %T, want a List", obj)
	}
	var objs []runtime.Object
	for _, item := range list.Items {
		o, _, err := decode(item.Raw, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	for _, tc := range []struct {
		args   []string
		golden string
	}{{nil, "migrated.txt"}, {[]string{"-d"}, "migrated-details.txt"}} {
		code, stdout, stderr := run(t, fakeEnv(objs...), tc.args...)
		if code != 0 || stderr != "" {
			t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
		}
		golden(t, tc.golden, stdout)
	}
}
