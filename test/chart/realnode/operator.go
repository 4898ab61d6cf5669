package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// operatorFiles are the files the extender topology's operator copies to
// the control-plane nodes (NOTES.txt, steps 1 and 2).
type operatorFiles struct {
	config, cert, key, ca string
	// urlPrefix is the configuration's extender URL.
	urlPrefix string
}

// operatorFiles reads the scheduler configuration from its ConfigMap and
// the client certificate, key and CA from their Secret, and writes them
// under the cluster's directory.
func (c *Cluster) operatorFiles(ctx context.Context) (operatorFiles, error) {
	dir := filepath.Join(c.Dir, "operator-scheduler")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return operatorFiles{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	cm, err := c.Client.CoreV1().ConfigMaps(Namespace).Get(ctx, "gpushare-kube-scheduler-config", metav1.GetOptions{})
	if err != nil {
		return operatorFiles{}, fmt.Errorf("reading the scheduler configuration NOTES.txt names: %w", err)
	}
	sec, err := c.Client.CoreV1().Secrets(Namespace).Get(ctx, "gpushare-scheduler-client-tls", metav1.GetOptions{})
	if err != nil {
		return operatorFiles{}, fmt.Errorf("reading the scheduler's client certificate NOTES.txt names: %w", err)
	}
	f := operatorFiles{
		config: filepath.Join(dir, "kube-scheduler-config.yaml"),
		cert:   filepath.Join(dir, "tls.crt"),
		key:    filepath.Join(dir, "tls.key"),
		ca:     filepath.Join(dir, "ca.crt"),
	}
	cfg := cm.Data["kube-scheduler-config.yaml"]
	var parsed struct {
		Extenders []struct {
			URLPrefix string `json:"urlPrefix"`
		} `json:"extenders"`
	}
	if err := yaml.Unmarshal([]byte(cfg), &parsed); err != nil {
		return operatorFiles{}, fmt.Errorf("reading the ConfigMap's scheduler configuration: %w\n%s", err, cfg)
	}
	if len(parsed.Extenders) == 0 {
		return operatorFiles{}, fmt.Errorf("the ConfigMap's scheduler configuration has no extenders:\n%s", cfg)
	}
	f.urlPrefix = parsed.Extenders[0].URLPrefix
	for path, data := range map[string][]byte{
		f.config: []byte(cfg),
		f.cert:   sec.Data["tls.crt"],
		f.key:    sec.Data["tls.key"],
		f.ca:     sec.Data["ca.crt"],
	} {
		if len(data) == 0 {
			return operatorFiles{}, fmt.Errorf("writing %s: the ConfigMap or Secret has no such key", path)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return operatorFiles{}, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return f, nil
}
