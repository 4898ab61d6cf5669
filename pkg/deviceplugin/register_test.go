package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// fakeRegistration is kubelet's registration service: it hands every
// request to got.
type fakeRegistration struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (f *fakeRegistration) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	f.got <- r
	return &pluginapi.Empty{}, nil
}

// serveRegistration serves f on sock, as kubelet does on kubelet.sock, and
// returns a function that stops it once its calls are answered and
// removes the socket.
func serveRegistration(t testing.TB, sock string, f *fakeRegistration) (stop func()) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(gs, f)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return gs.GracefulStop
}

// registration is what a RegisterRequest says.
type registration struct {
	Version, Endpoint, ResourceName string
	PreferredAllocation             bool
}

func TestEndpointRegistersAgain(t *testing.T) {
	tests := []struct {
		name string
		// again makes the endpoint register again, with kubelet's
		// registration service now at f's socket.
		again func(t *testing.T, restart chan<- struct{}, sock string, stopKubelet func(), f *fakeRegistration)
	}{
		{
			name: "SIGHUP",
			again: func(_ *testing.T, restart chan<- struct{}, _ string, _ func(), _ *fakeRegistration) {
				restart <- struct{}{}
			},
		},
		{
			// kubelet drops the plugin (as it does when an older plugin of
			// the resource ends after this one registered): it closes the
			// connection of its ListAndWatch stream, kubelet.sock stays.
			name: "kubelet hung up",
			again: func(t *testing.T, _ chan<- struct{}, sock string, _ func(), _ *fakeRegistration) {
				conn, err := dial(filepath.Join(filepath.Dir(sock), SocketName))
				if err != nil {
					t.Fatal(err)
				}
				stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pluginapi.Empty{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := stream.Recv(); err != nil {
					t.Fatal(err)
				}
				_ = conn.Close()
			},
		},
		{
			name: "kubelet restarted",
			again: func(t *testing.T, _ chan<- struct{}, sock string, stopKubelet func(), f *fakeRegistration) {
				stopKubelet()
				serveRegistration(t, sock, f) // re-creates kubelet.sock
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A short directory: unix socket paths are limited to about
			// 100 bytes.
			dir, err := os.MkdirTemp("", "dp")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			f := &fakeRegistration{got: make(chan *pluginapi.RegisterRequest, 4)}
			kubeletSock := filepath.Join(dir, "kubelet.sock")
			stopKubelet := serveRegistration(t, kubeletSock, f)

			restart := make(chan struct{}, 1)
			ep := &Endpoint{Dir: dir, Server: NewServer(testLogger(t), fakeHandoffer{}, testCards, gpushare.UnitGiB, StrategyEnvvar, nil), Restart: restart}
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), testLogger(t)))
			done := make(chan error, 1)
			go func() { done <- ep.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run = %v, want nil once its context ends", err)
				}
			}()

			var got []registration
			next := func() {
				t.Helper()
				select {
				case r := <-f.got:
					got = append(got, registration{r.Version, r.Endpoint, r.ResourceName, r.Options.GetGetPreferredAllocationAvailable()})
				case <-time.After(30 * time.Second):
					t.Fatalf("registrations so far %+v; no further one", got)
				}
			}
			next()
			tc.again(t, restart, kubeletSock, stopKubelet, f)
			next()
			want := registration{pluginapi.Version, SocketName, string(gpushare.ResourceGPUMem), true}
			if diff := cmp.Diff([]registration{want, want}, got); diff != "" {
				t.Errorf("registrations mismatch (-want +got):\n%s", diff)
			}

			// The plugin serves again on its socket.
			conn, err := dial(filepath.Join(dir, SocketName))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
				t.Errorf("the plugin's socket after registering again: %v", err)
			}
		})
	}
}
