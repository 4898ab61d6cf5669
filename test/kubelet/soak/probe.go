package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/pkg/inspectapi"
)

// inspectPath is the extender's inspect route (pkg/extender).
const inspectPath = "/gpushare-scheduler/inspect"

// maxInspectBody bounds the extender's answer read.
const maxInspectBody = 16 << 20

// readInspect reads the extender's GET /gpushare-scheduler/inspect.
func readInspect(ctx context.Context, client *http.Client, baseURL string) ([]inspectapi.Node, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+inspectPath, http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("reading the extender's inspect: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the extender's inspect: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxInspectBody))
	if err != nil {
		return nil, fmt.Errorf("reading the extender's inspect: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the extender's inspect: HTTP %d", resp.StatusCode)
	}
	var res inspectapi.Result
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("decoding the extender's inspect: %w", err)
	}
	return res.Nodes, nil
}

// podResources lists kubelet's PodResources of each node over its unix
// socket, one client connection per node, made on first use.
type podResources struct {
	mu sync.Mutex
	// conns: socket path -> connection.
	conns map[string]*grpc.ClientConn
}

func newPodResources() *podResources {
	return &podResources{conns: map[string]*grpc.ClientConn{}}
}

// List returns what kubelet's device manager at socket holds, per pod.
func (p *podResources) List(ctx context.Context, socket string) ([]*podresourcesv1.PodResources, error) {
	p.mu.Lock()
	conn, ok := p.conns[socket]
	if !ok {
		var err error
		conn, err = grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.mu.Unlock()
			return nil, fmt.Errorf("connecting to PodResources at %s: %w", socket, err)
		}
		p.conns[socket] = conn
	}
	p.mu.Unlock()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing PodResources at %s: %w", socket, err)
	}
	return resp.GetPodResources(), nil
}

// Close closes every connection.
func (p *podResources) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
