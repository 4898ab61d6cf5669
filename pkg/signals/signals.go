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
// SIGHUPs that arrive while the previous one is still unreceived are
// coalesced into it. A restart is a restart, so any number of them before
// the next receive give one reception.
func Hangups(ctx context.Context) <-chan struct{} {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	// out holds at most one pending hangup; the send below never blocks.
	out := make(chan struct{}, 1)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-hup:
				select {
				case out <- struct{}{}:
				default: // one is already pending
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
