package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
)

// panickyHandoffer panics in every call, as a handoff bug would.
type panickyHandoffer struct{}

func (panickyHandoffer) Prefer(context.Context, []string, []string, int) ([]string, error) {
	var free []string
	return free[:4], nil // the shape of the bug: slicing past a free list
}

func (panickyHandoffer) Allocate(context.Context, []string) (*handoff.Assignment, error) {
	panic("allocate blew up")
}

func (panickyHandoffer) Revoke(context.Context, *handoff.Assignment) { panic("revoke blew up") }

// TestPanicsBecomeErrors: a handler that panics answers codes.Internal and
// the plugin's gRPC server, registered with kubelet, keeps serving.
func TestPanicsBecomeErrors(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	f := &fakeRegistration{got: make(chan *pluginapi.RegisterRequest, 1)}
	serveRegistration(t, filepath.Join(dir, "kubelet.sock"), f)
	ep := &Endpoint{Dir: dir, Server: NewServer(testLogger(t), panickyHandoffer{}, testCards, gpushare.UnitGiB, StrategyEnvvar, nil)}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), testLogger(t)))
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	select {
	case <-f.got:
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin never registered")
	}
	conn, err := dial(filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := pluginapi.NewDevicePluginClient(conn)
	for i := 0; i < 2; i++ { // the second round proves the server survived the first
		_, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AllocationSize: 4}}})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "GetPreferredAllocation panicked: runtime error: slice bounds out of range") {
			t.Errorf("GetPreferredAllocation error = %v, want Internal naming the panic", err)
		}
		_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-0::0"}}}})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "Allocate panicked: allocate blew up") {
			t.Errorf("Allocate error = %v, want Internal naming the panic", err)
		}
	}
	if _, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Errorf("GetDevicePluginOptions after the panics: %v", err)
	}
}

// panickyStream panics in ListAndWatch.
type panickyStream struct{ grpc.ServerStream }

func TestStreamPanicsBecomeErrors(t *testing.T) {
	interceptor := recoverStream(testLogger(t))
	err := interceptor(nil, panickyStream{}, &grpc.StreamServerInfo{FullMethod: "/v1beta1.DevicePlugin/ListAndWatch"},
		func(any, grpc.ServerStream) error { panic("stream blew up") })
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "ListAndWatch panicked: stream blew up") {
		t.Errorf("error = %v, want Internal naming the panic", err)
	}
}
