package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

func TestContainerResponse(t *testing.T) {
	tests := []struct {
		name     string
		unit     string
		strategy string
		a        handoff.Assignment
		want     *pluginapi.ContainerAllocateResponse
	}{
		{
			name: "one card, GiB, envvar", unit: gpushare.UnitGiB, strategy: StrategyEnvvar,
			a: handoff.Assignment{Shares: []gpushare.DeviceShare{{Index: 2, UUID: "GPU-2", Units: 8}}, PodUnits: 12},
			want: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": "GPU-2", "ALIYUN_COM_GPU_MEM_IDX": "2", "ALIYUN_COM_GPU_MEM_POD": "12",
				"ALIYUN_COM_GPU_MEM_CONTAINER": "8", "ALIYUN_COM_GPU_MEM_DEV": "80", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G",
			}},
		},
		{
			name: "two cards, MiB, CDI annotations", unit: gpushare.UnitMiB, strategy: StrategyCDIAnnotations,
			a: handoff.Assignment{Shares: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-0", Units: 4096}, {Index: 1, UUID: "GPU-1", Units: 4096}}, PodUnits: 8192},
			want: &pluginapi.ContainerAllocateResponse{
				Envs: map[string]string{
					"NVIDIA_VISIBLE_DEVICES": "void", "ALIYUN_COM_GPU_MEM_IDX": "0,1", "ALIYUN_COM_GPU_MEM_POD": "8192",
					"ALIYUN_COM_GPU_MEM_CONTAINER": "8192", "ALIYUN_COM_GPU_MEM_DEV": "16", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M,1=4096M",
				},
				Annotations: map[string]string{"cdi.k8s.io/gpushare_gpu-mem": "nvidia.com/gpu=GPU-0,nvidia.com/gpu=GPU-1"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewServer(testLogger(t), nil, testCards, tc.unit, tc.strategy, nil)
			got := s.containerResponse(&tc.a)
			if diff := cmp.Diff(tc.want.Envs, got.Envs); diff != "" {
				t.Errorf("env mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want.Annotations, got.Annotations); diff != "" {
				t.Errorf("annotations mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeStream is a ListAndWatch stream that hands what is sent to a channel.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *pluginapi.ListAndWatchResponse
}

func (f *fakeStream) Send(r *pluginapi.ListAndWatchResponse) error {
	f.sent <- r
	return nil
}
func (f *fakeStream) Context() context.Context { return f.ctx }

func TestListAndWatchResendsOnHealthChanges(t *testing.T) {
	s := NewServer(testLogger(t), nil, testCards[:2], gpushare.UnitGiB, StrategyEnvvar, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stream := &fakeStream{ctx: ctx, sent: make(chan *pluginapi.ListAndWatchResponse, 4)}
	done := make(chan error)
	go func() { done <- s.ListAndWatch(&pluginapi.Empty{}, stream) }()
	unhealthyCount := func() (total, unhealthy int) {
		select {
		case r := <-stream.sent:
			for _, d := range r.Devices {
				if d.Health == pluginapi.Unhealthy {
					unhealthy++
				}
			}
			return len(r.Devices), unhealthy
		case <-time.After(5 * time.Second):
			t.Fatal("no ListAndWatch response")
		}
		return 0, 0
	}
	type counts struct{ Total, Unhealthy int }
	var got []counts
	add := func() {
		total, bad := unhealthyCount()
		got = append(got, counts{total, bad})
	}
	add()
	s.SetHealth(map[string]bool{"GPU-1": true})
	add()
	s.SetHealth(nil) // recovery is re-sent too
	add()
	if diff := cmp.Diff([]counts{{32, 0}, {32, 16}, {32, 0}}, got); diff != "" {
		t.Errorf("responses mismatch (-want +got):\n%s", diff)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type fakeHandoffer struct{ err error }

func (f fakeHandoffer) Prefer(context.Context, []string, []string, int) ([]string, error) {
	return nil, f.err
}
func (f fakeHandoffer) Allocate(context.Context, []string) (*handoff.Assignment, error) {
	return nil, f.err
}
func (fakeHandoffer) Revoke(context.Context, *handoff.Assignment) {}

func TestServerErrorsNameTheCause(t *testing.T) {
	s := NewServer(testLogger(t), fakeHandoffer{err: errors.New("no waiting pod matches: because")}, testCards, gpushare.UnitGiB, StrategyEnvvar, nil)
	_, err := s.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-0::0"}}}})
	if err == nil || err.Error() != "rpc error: code = FailedPrecondition desc = no waiting pod matches: because" {
		t.Errorf("Allocate error = %v", err)
	}
	_, err = s.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AllocationSize: 1}}})
	if err == nil {
		t.Error("GetPreferredAllocation: want an error")
	}
	opts, _ := s.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
	if !opts.GetPreferredAllocationAvailable || opts.PreStartRequired {
		t.Errorf("options %+v, want GetPreferredAllocationAvailable only", opts)
	}
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// assignments is a Handoffer whose Allocate answers by the first device ID.
type assignments map[string]*handoff.Assignment

func (assignments) Prefer(context.Context, []string, []string, int) ([]string, error) {
	return nil, nil
}
func (a assignments) Allocate(_ context.Context, ids []string) (*handoff.Assignment, error) {
	return a[ids[0]], nil
}
func (assignments) Revoke(context.Context, *handoff.Assignment) {}

// goldenRequest is the request of the golden Allocate tests, one for two
// containers (8 GiB on card 2; 4 GiB on each of cards 0 and 1), and the
// handoff's answers to it.
func goldenRequest() (assignments, *pluginapi.AllocateRequest) {
	h := assignments{
		"GPU-2::0": {Shares: []gpushare.DeviceShare{{Index: 2, UUID: "GPU-2", Units: 8}}, PodUnits: 16},
		"GPU-0::0": {Shares: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-0", Units: 4}, {Index: 1, UUID: "GPU-1", Units: 4}}, PodUnits: 16},
	}
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: unitsOn("GPU-2", 0, 8)},
		{DevicesIds: append(unitsOn("GPU-0", 0, 4), unitsOn("GPU-1", 0, 4)...)},
	}}
	return h, req
}

// TestAllocateResponseGolden: the whole Allocate response, as kubelet
// receives it, for every device list strategy: one request for two
// containers, one on card 2 and one on cards 0 and 1.
func TestAllocateResponseGolden(t *testing.T) {
	h, req := goldenRequest()
	for _, strategy := range Strategies {
		t.Run(strategy, func(t *testing.T) {
			s := NewServer(testLogger(t), h, testCards, gpushare.UnitGiB, strategy, nil)
			resp, err := s.Allocate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.MarshalIndent(resp, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			util.Golden(t, "allocate-"+strategy+".json", string(b)+"\n", *update)
		})
	}
}
