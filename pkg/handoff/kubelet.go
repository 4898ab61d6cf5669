package handoff

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// maxPodResourcesBytes is the largest PodResources List answer read: one
// ID per unit of every container on the node (MiB nodes have many).
const maxPodResourcesBytes = 64 << 20

// podResourcesTimeout bounds one PodResources List: a kubelet whose socket
// accepts and never answers must not hold up GetPreferredAllocation,
// Allocate or the verifier.
const podResourcesTimeout = 2 * time.Second

// PodResources reads kubelet's PodResources v1 API
// (<kubelet-dir>/pod-resources/kubelet.sock). It connects on first use and
// reconnects by itself when kubelet restarts.
type PodResources struct {
	Socket string

	// timeout bounds each List; podResourcesTimeout when 0.
	timeout time.Duration

	mu     sync.Mutex
	client podresourcesv1.PodResourcesListerClient // nil until first use
}

var _ KubeletPods = (*PodResources)(nil)

// List returns kubelet's active pods with their aliyun.com/gpu-mem IDs. It
// gives up after 2 s (podResourcesTimeout).
func (p *PodResources) List(ctx context.Context) ([]KubeletPod, error) {
	timeout := p.timeout
	if timeout <= 0 {
		timeout = podResourcesTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p.mu.Lock()
	if p.client == nil {
		conn, err := grpc.NewClient("unix://"+p.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.mu.Unlock()
			return nil, fmt.Errorf("dialing %s: %w", p.Socket, err)
		}
		p.client = podresourcesv1.NewPodResourcesListerClient(conn)
	}
	c := p.client
	p.mu.Unlock()
	resp, err := c.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.MaxCallRecvMsgSize(maxPodResourcesBytes))
	if err != nil {
		return nil, fmt.Errorf("PodResources List at %s: %w", p.Socket, err)
	}
	out := make([]KubeletPod, 0, len(resp.PodResources))
	for _, pr := range resp.PodResources {
		kp := KubeletPod{Namespace: pr.Namespace, Name: pr.Name, Containers: map[string][]string{}}
		for _, c := range pr.Containers {
			var ids []string
			for _, d := range c.Devices {
				if d.ResourceName == string(gpushare.ResourceGPUMem) {
					ids = append(ids, d.DeviceIds...)
				}
			}
			kp.Containers[c.Name] = ids
		}
		out = append(out, kp)
	}
	return out, nil
}
