package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpushare/gpushare/pkg/inspectapi"
)

// inspectPath is the extender's inspect route (pkg/extender).
const inspectPath = "/gpushare-scheduler/inspect"

// maxExtenderBody bounds the extender's answer we read.
const maxExtenderBody = 64 << 20

// extenderTimeout bounds one request to the extender.
const extenderTimeout = 30 * time.Second

// ExtenderSource reads the extender's GET /gpushare-scheduler/inspect[/NODE].
// The extender knows no node addresses and no pending pods.
type ExtenderSource struct {
	// URL of the extender, e.g. http://gpushare-scheduler-extender.kube-system:39999;
	// the inspect path is appended unless it is already there.
	URL string
}

var _ Source = ExtenderSource{}

// parseExtenderURL checks an --from-extender value and returns the inspect
// URL for node ("" for all).
func parseExtenderURL(raw, node string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--from-extender %q: want an http:// or https:// URL, e.g. http://gpushare-scheduler-extender.kube-system:39999", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(u.Path, inspectPath) {
		u.Path += inspectPath
	}
	if node != "" {
		u.Path += "/" + node
	}
	u.RawPath = ""
	return u.String(), nil
}

// Report implements Source. The selector is not supported (Config.Validate
// rejects it).
func (s ExtenderSource) Report(ctx context.Context, q Query) (*Report, error) {
	target, err := parseExtenderURL(s.URL, q.Node)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: extenderTimeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("reading the extender: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the extender at %s: %w (is it running and reachable from here? try kubectl port-forward, or omit --from-extender to read the API)", target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxExtenderBody))
	if err != nil {
		return nil, fmt.Errorf("reading the extender's answer from %s: %w", target, err)
	}
	if resp.StatusCode == http.StatusNotFound && q.Node != "" {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("node %q %w", q.Node, errNotFound)
		}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the extender at %s answered %s: %s (is the URL a gpushare extender?)", target, resp.Status, snippet(body))
	}
	var res inspectapi.Result
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("decoding the extender's answer from %s: %w", target, err)
	}
	return newReport("extender "+s.URL, res.Nodes, q.Node, nil, nil), nil
}

// snippet returns the start of a body for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
