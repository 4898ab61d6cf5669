package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Config is one run of the plugin, built from its flags.
type Config struct {
	// Source of the numbers: APISource or ExtenderSource.
	Source Source
	// Query says which nodes.
	Query Query
	// Namespace limits the pods listed to one namespace; "" for all.
	Namespace string
	// View says how to print.
	View View
	// Out receives the report; ErrOut the "nothing found" message.
	Out, ErrOut io.Writer
}

// Validate checks a Config.
func (c *Config) Validate() error {
	var errs []error
	if c.Source == nil {
		errs = append(errs, errors.New("no source"))
	}
	if c.Out == nil || c.ErrOut == nil {
		errs = append(errs, errors.New("no output streams"))
	}
	if c.View.Output != OutputTable && !slices.Contains(Outputs, c.View.Output) {
		errs = append(errs, fmt.Errorf("unknown output format %q; want one of %s (or none for the table)", c.View.Output, strings.Join(Outputs, ", ")))
	}
	if c.Query.Node != "" && c.Query.Selector != "" {
		errs = append(errs, fmt.Errorf("both a node name (%q) and --selector %q given; pass one of them", c.Query.Node, c.Query.Selector))
	}
	if _, ok := c.Source.(ExtenderSource); ok && c.Query.Selector != "" {
		errs = append(errs, fmt.Errorf("--selector %q needs node labels, which the extender does not report; omit --from-extender to read the API", c.Query.Selector))
	}
	return errors.Join(errs...)
}

// Run gathers the report and prints it.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	r, err := cfg.Source.Report(ctx, cfg.Query)
	if err != nil {
		return err
	}
	r.onlyNamespace(cfg.Namespace)
	text := cfg.View.Output == OutputTable || cfg.View.Output == OutputWide
	if text && len(r.Nodes) == 0 {
		what := "nodes"
		if cfg.Query.Selector != "" {
			what = fmt.Sprintf("nodes matching %q", cfg.Query.Selector)
		}
		fmt.Fprintf(cfg.ErrOut, "No GPU-sharing nodes found: no %s report %s.\n", what, gpushare.ResourceGPUMem)
	}
	return write(cfg.Out, r, cfg.View)
}
