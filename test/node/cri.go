package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClient talks to containerd's CRI plugin, as kubelet does.
type criClient struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

// dialCRI connects to the CRI socket; nothing is sent yet.
func dialCRI(socket string) (*criClient, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to the CRI at %s: %w", socket, err)
	}
	return &criClient{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

func (c *criClient) close() { _ = c.conn.Close() }

// waitReady waits until the runtime answers Status with RuntimeReady and
// NetworkReady (which needs a CNI configuration: the node writes it
// before containerd starts).
func (c *criClient) waitReady(ctx context.Context, exited func() error) error {
	var last error
	for {
		if err := exited(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.rt.Status(cctx, &runtimeapi.StatusRequest{})
		cancel()
		if err == nil {
			last = fmt.Errorf("conditions %v", st.GetStatus().GetConditions())
			ready := 0
			for _, cond := range st.GetStatus().GetConditions() {
				if (cond.Type == runtimeapi.RuntimeReady || cond.Type == runtimeapi.NetworkReady) && cond.Status {
					ready++
				}
			}
			if ready == 2 {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for containerd's CRI to be ready: %w (last: %w)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// removeAllSandboxes stops and removes every pod sandbox, which stops and
// removes its containers, runs the CNI teardown of its network namespace
// and unmounts its /dev/shm. It returns how many it removed.
func (c *criClient) removeAllSandboxes(ctx context.Context) (int, error) {
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	n := 0
	for _, sb := range resp.GetItems() {
		name := sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName()
		if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stopping the sandbox of %s: %w", name, err))
			continue
		}
		if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("removing the sandbox of %s: %w", name, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
