//go:build !linux

package framework

import "syscall"

// childAttr puts a child in its own process group. Outside Linux there is no
// parent-death signal, so a crashed test binary can leave children behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
