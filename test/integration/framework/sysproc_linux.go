package framework

import (
	"os"
	"syscall"
)

// childAttr puts a child in its own process group, so that Stop can signal
// everything it forked, and has the kernel SIGKILL it if the test binary dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// utsAttr is childAttr with a new UTS namespace (its own host name); as
// non-root also a user namespace mapping this user to root, which may set
// that name.
func utsAttr() (*syscall.SysProcAttr, error) {
	a := childAttr()
	a.Cloneflags = syscall.CLONE_NEWUTS
	if uid, gid := os.Geteuid(), os.Getegid(); uid != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	}
	return a, nil
}
