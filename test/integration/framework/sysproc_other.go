//go:build !linux

package framework

import (
	"errors"
	"syscall"
)

// childAttr puts a child in its own process group. Outside Linux there is no
// parent-death signal, so a crashed test binary can leave children behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// utsAttr: host names per process need Linux namespaces.
func utsAttr() (*syscall.SysProcAttr, error) {
	return nil, errors.New("a host name of its own needs a Linux UTS namespace")
}
