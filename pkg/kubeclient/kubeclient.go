// Package kubeclient builds the API clients our programs use, with the
// settings they share: a kubeconfig path or in-cluster configuration,
// explicit rate limits, a user agent, and protobuf on the wire.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// New builds a clientset from a kubeconfig path ("" for in-cluster
// configuration), allowing qps queries per second with bursts of burst.
// Protobuf decodes the informers' initial lists of every pod in the cluster
// with a fraction of JSON's garbage and CPU.
func New(kubeconfig string, qps float32, burst int, userAgent string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = userAgent
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return kubernetes.NewForConfig(cfg)
}
