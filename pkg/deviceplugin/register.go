package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// SocketName is the plugin's socket in kubelet's device-plugins directory.
const SocketName = "gpushare-gpu-mem.sock"

// retryInterval is how long the plugin waits before trying to register
// again after a failure (kubelet down, socket not there yet).
const retryInterval = 5 * time.Second

// rejoinDelay is how long the plugin waits, once kubelet has closed its
// last ListAndWatch stream, before it registers again. kubelet 1.34 drops a
// plugin that registered while the previous plugin of the same resource was
// still connected. When that older connection ends, kubelet disconnects
// whichever plugin holds the resource then, the newer one. It leaves its
// devices unhealthy, allocatable 0, with no stream to bring them back.
// Waiting lets the dropped connection's own teardown finish first, so the
// next registration is not dropped the same way.
const rejoinDelay = time.Second

// Endpoint serves a DevicePlugin service on a socket in kubelet's plugin
// directory and keeps it registered with kubelet.
type Endpoint struct {
	// Dir is kubelet's device-plugins directory (holding kubelet.sock).
	Dir    string
	Server pluginapi.DevicePluginServer
	// Restart, when it delivers, makes the endpoint serve and register
	// again (SIGHUP).
	Restart <-chan struct{}
}

// Run serves and registers until ctx ends. It serves and registers again
// whenever one of three things happens. kubelet re-creates kubelet.sock: a
// kubelet restart wipes the plugin sockets. kubelet closes the plugin's
// last ListAndWatch stream while the plugin serves (see rejoinDelay). Or
// Restart delivers. A failed attempt is retried every few seconds.
func (e *Endpoint) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := os.MkdirAll(e.Dir, 0o750); err != nil {
		return fmt.Errorf("creating the device plugin directory: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", e.Dir, err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(e.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", e.Dir, err)
	}
	kubeletSock := e.kubeletSocket()
	streams := newStreamWatch()
	for {
		stop, err := e.start(ctx, streams)
		var retry <-chan time.Time
		if err != nil {
			logger.Error(err, "Device plugin not registered; retrying", "in", retryInterval)
			retry = time.After(retryInterval)
		} else {
			logger.Info("Registered with kubelet", "resource", gpushare.ResourceGPUMem, "socket", filepath.Join(e.Dir, SocketName))
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				stop()
				return nil
			case <-retry:
				break wait
			case <-e.Restart:
				logger.Info("Restarting the device plugin on request")
				break wait
			case <-streams.hungUp:
				if retry == nil {
					logger.Info("kubelet closed the plugin's last ListAndWatch stream without restarting; registering again", "in", rejoinDelay)
					retry = time.After(rejoinDelay)
				}
			case ev := <-w.Events:
				if ev.Name == kubeletSock && ev.Has(fsnotify.Create) {
					logger.Info("kubelet.sock re-created (kubelet restarted); registering again")
					break wait
				}
			case err := <-w.Errors:
				logger.Error(err, "Watching the device plugin directory")
			}
		}
		stop()
	}
}

// start serves the plugin on its socket, proves it answers, and registers
// it. The returned stop (never nil) stops serving and removes the socket.
// streams learns of the server's ListAndWatch streams.
func (e *Endpoint) start(ctx context.Context, streams *streamWatch) (stop func(), err error) {
	sock := filepath.Join(e.Dir, SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return func() {}, fmt.Errorf("removing the stale socket %s: %w", sock, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return func() {}, fmt.Errorf("listening on %s: %w", sock, err)
	}
	counted := streams.server()
	gs := newGRPCServer(klog.FromContext(ctx), counted.interceptor)
	pluginapi.RegisterDevicePluginServer(gs, e.Server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := gs.Serve(ln); err != nil {
			klog.FromContext(ctx).Error(err, "Device plugin gRPC server stopped")
		}
	}()
	stop = func() {
		// Streams the server itself ends are no hang-up.
		counted.stop()
		gs.Stop()
		<-done
		_ = os.Remove(sock)
	}
	if err := e.prove(ctx, sock); err != nil {
		stop()
		return func() {}, err
	}
	if err := e.register(ctx); err != nil {
		stop()
		return func() {}, err
	}
	return stop, nil
}

// newGRPCServer returns the plugin's gRPC server. A panic in a handler
// becomes a codes.Internal error for that call, logged once with its stack.
// The server goes on serving, so kubelet fails one pod's admission with the
// message instead of losing the plugin. watch, if not nil, sees every
// stream call around the recovery.
func newGRPCServer(logger klog.Logger, watch grpc.StreamServerInterceptor) *grpc.Server {
	stream := []grpc.StreamServerInterceptor{recoverStream(logger)}
	if watch != nil {
		stream = append([]grpc.StreamServerInterceptor{watch}, stream...)
	}
	return grpc.NewServer(grpc.ChainUnaryInterceptor(recoverUnary(logger)), grpc.ChainStreamInterceptor(stream...))
}

// listAndWatchMethod is the full gRPC name of ListAndWatch.
var listAndWatchMethod = "/" + pluginapi.DevicePlugin_ServiceDesc.ServiceName + "/ListAndWatch"

// streamWatch reports, on hungUp, each time kubelet has let go of the
// plugin: the last ListAndWatch stream of the serving gRPC server ended
// while that server was not stopping (serverStreams).
type streamWatch struct {
	// hungUp holds at most one report; more while one waits are the same
	// news.
	hungUp chan struct{}
}

func newStreamWatch() *streamWatch {
	return &streamWatch{hungUp: make(chan struct{}, 1)}
}

// server returns the stream count of a new gRPC server, dropping a report
// about the one before it.
func (w *streamWatch) server() *serverStreams {
	select {
	case <-w.hungUp:
	default:
	}
	return &serverStreams{w: w}
}

// serverStreams counts one gRPC server's open ListAndWatch streams. Its
// streams that end once it is stopping (its own Stop ends them, and
// handlers may return after the next server started) report nothing.
type serverStreams struct {
	w        *streamWatch
	mu       sync.Mutex
	open     int
	stopping bool
}

// stop marks the server stopping.
func (s *serverStreams) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
}

// interceptor is the grpc.StreamServerInterceptor that does the counting.
func (s *serverStreams) interceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != listAndWatchMethod {
		return handler(srv, ss)
	}
	s.mu.Lock()
	s.open++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.open--
		if s.open == 0 && !s.stopping {
			select {
			case s.w.hungUp <- struct{}{}:
			default:
			}
		}
	}()
	return handler(srv, ss)
}

func recoverUnary(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = recovered(logger, info.FullMethod, r)
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(logger klog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = recovered(logger, info.FullMethod, r)
			}
		}()
		return handler(srv, ss)
	}
}

// recovered logs a panic in method (a full gRPC method name) with the
// stack and returns the error its caller gets. It runs in the deferred
// call, so the stack still holds the frames that panicked.
func recovered(logger klog.Logger, method string, r any) error {
	err := fmt.Errorf("%s panicked: %v", path.Base(method), r)
	logger.Error(err, "Recovered from a panic in a gRPC handler; serving on", "method", method, "stack", string(debug.Stack()))
	return status.Error(codes.Internal, err.Error()+" (a bug in gpushare-device-plugin; its log has the stack)")
}

func dial(sock string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", sock, err)
	}
	return conn, nil
}

// prove dials the plugin's own socket and calls it, so kubelet is never
// told about a socket that does not answer.
func (e *Endpoint) prove(ctx context.Context, sock string) error {
	conn, err := dial(sock)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("calling the plugin's own socket %s: %w", sock, err)
	}
	return nil
}

// kubeletSocket is kubelet's registration socket, kubelet.sock in Dir.
func (e *Endpoint) kubeletSocket() string {
	return filepath.Join(e.Dir, filepath.Base(pluginapi.KubeletSocket))
}

// register tells kubelet about the plugin.
func (e *Endpoint) register(ctx context.Context) error {
	kubeletSock := e.kubeletSocket()
	conn, err := dial(kubeletSock)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     SocketName,
		ResourceName: string(gpushare.ResourceGPUMem),
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("registering with kubelet at %s: %w", kubeletSock, err)
	}
	return nil
}
