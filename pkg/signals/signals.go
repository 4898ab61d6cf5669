// Package signals turns process signals into the channels our long-running
// components take.
package signals

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Hangups returns a channel that receives once per SIGHUP until ctx ends.
// A SIGHUP that arrives while the previous one is still unreceived is
// coalesced into it: a restart is a restart.
func Hangups(ctx context.Context) <-chan struct{} {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	out := make(chan struct{})
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-hup:
				select {
				case out <- struct{}{}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
