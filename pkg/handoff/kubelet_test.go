package handoff

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// fakePodResources is kubelet's PodResources service: it answers resp,
// or, when resp is nil, never answers (until the caller gives up).
type fakePodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	resp *podresourcesv1.ListPodResourcesResponse
}

func (f *fakePodResources) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	if f.resp == nil {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return f.resp, nil
}

// servePodResources serves srv on a socket in a temporary directory and
// returns the socket's path.
func servePodResources(t *testing.T, srv podresourcesv1.PodResourcesListerServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return sock
}

func TestPodResourcesList(t *testing.T) {
	gpuMem := string(gpushare.ResourceGPUMem)
	tests := []struct {
		name     string
		resp     *podresourcesv1.ListPodResourcesResponse
		want     []KubeletPod
		wantCode codes.Code
	}{
		{
			name: "gpu-mem IDs by container",
			resp: &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
				Namespace: "default", Name: "p",
				Containers: []*podresourcesv1.ContainerResources{
					{Name: "c0", Devices: []*podresourcesv1.ContainerDevices{
						{ResourceName: gpuMem, DeviceIds: []string{"GPU-0::1", "GPU-0::0"}},
						{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-1"}},
					}},
					{Name: "c1"},
				},
			}}},
			want: []KubeletPod{{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": {"GPU-0::1", "GPU-0::0"}, "c1": nil}}},
		},
		{
			name:     "kubelet never answers",
			wantCode: codes.DeadlineExceeded,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A short deadline only where kubelet never answers: under
			// -race on a loaded machine an answer can take longer.
			timeout := 10 * time.Second
			if tc.wantCode == codes.DeadlineExceeded {
				timeout = 100 * time.Millisecond
			}
			p := &PodResources{Socket: servePodResources(t, &fakePodResources{resp: tc.resp}), timeout: timeout}
			got, err := p.List(context.Background()) // no deadline of the caller's
			if status.Code(err) != tc.wantCode {
				t.Fatalf("List error = %v, want code %v", err, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("List mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVerifyGivesUpOnASilentKubelet: the verifier, which passes no
// deadline, does not hang on a PodResources socket that never answers.
func TestVerifyGivesUpOnASilentKubelet(t *testing.T) {
	p := &PodResources{Socket: servePodResources(t, &fakePodResources{}), timeout: 100 * time.Millisecond}
	h := New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Kubelet: p})
	if _, err := h.Verify(context.Background()); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Verify error = %v, want one with code %v", err, codes.DeadlineExceeded)
	}
}
