package framework

import "syscall"

// childAttr puts a child in its own process group, so that Stop can signal
// everything it forked, and has the kernel SIGKILL it if the test binary dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
