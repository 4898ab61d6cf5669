// Package kubeletclient plays kubelet's DRA manager against a driver's
// kubelet-facing gRPC socket (NodePrepareResources and
// NodeUnprepareResources, dra/v1), for the tests and the demo that run the
// driver without a kubelet.
package kubeletclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// Claim names a claim as kubelet sends it.
type Claim struct {
	Namespace, Name string
	UID             types.UID
}

// ClaimOf is c's Claim.
func ClaimOf(c *resourceapi.ResourceClaim) Claim {
	return Claim{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
}

// Client calls the driver socket at Socket (a path).
type Client struct{ Socket string }

// dial connects to the socket (lazily: the first call connects).
func (c Client) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(addr, "unix://"))
		}))
	if err != nil {
		return nil, fmt.Errorf("connecting to the driver's socket %s: %w", c.Socket, err)
	}
	return conn, nil
}

func request(claims []Claim) []*drapbv1.Claim {
	out := make([]*drapbv1.Claim, len(claims))
	for i, c := range claims {
		out[i] = &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
	}
	return out
}

// Prepare calls NodePrepareResources for claims and returns the CDI device
// IDs of each claim the driver prepared. The error joins the driver's
// refusals, one a claim, or is the call's; the claims prepared are in the
// map either way.
func (c Client) Prepare(ctx context.Context, claims ...Claim) (map[types.UID][]string, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	resp, err := drapbv1.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: request(claims)})
	if err != nil {
		return nil, fmt.Errorf("NodePrepareResources: %w", err)
	}
	out := map[types.UID][]string{}
	var errs []error
	for _, cl := range claims {
		r := resp.Claims[string(cl.UID)]
		if err := refusal(cl, r != nil, r.GetError()); err != nil {
			errs = append(errs, err)
		} else {
			ids := []string{}
			for _, d := range r.Devices {
				ids = append(ids, d.CdiDeviceIds...)
			}
			out[cl.UID] = ids
		}
	}
	return out, errors.Join(errs...)
}

// Unprepare calls NodeUnprepareResources for claims and returns the UIDs
// of those the driver unprepared; the error is as Prepare's.
func (c Client) Unprepare(ctx context.Context, claims ...Claim) ([]types.UID, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	resp, err := drapbv1.NewDRAPluginClient(conn).NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: request(claims)})
	if err != nil {
		return nil, fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	var done []types.UID
	var errs []error
	for _, cl := range claims {
		r := resp.Claims[string(cl.UID)]
		if err := refusal(cl, r != nil, r.GetError()); err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, cl.UID)
		}
	}
	return done, errors.Join(errs...)
}

// refusal is the error for a claim the driver did not answer (answered
// false) or refused (msg), nil for one it served.
func refusal(cl Claim, answered bool, msg string) error {
	switch {
	case !answered:
		return fmt.Errorf("claim %s/%s: no answer", cl.Namespace, cl.Name)
	case msg != "":
		return fmt.Errorf("claim %s/%s: %s", cl.Namespace, cl.Name, msg)
	}
	return nil
}
