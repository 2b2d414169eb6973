package podfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podunit/podunit/errdefs"
)

// Namespace is the kernel namespace a sysctl belongs to.
type Namespace string

const (
	NetNS Namespace = "net"
	IPCNS Namespace = "ipc"
	UTSNS Namespace = "uts"
)

// ipcSysctls are the kernel.* sysctls the IPC namespace owns (besides
// fs.mqueue.*), as listed in the kernel's ipc/ipc_sysctl.c and in the
// kubelet's safe/unsafe sysctl rules.
var ipcSysctls = map[string]bool{
	"kernel.shmall": true, "kernel.shmmax": true, "kernel.shmmni": true,
	"kernel.shm_rmid_forced": true, "kernel.msgmax": true, "kernel.msgmnb": true,
	"kernel.msgmni": true, "kernel.sem": true, "kernel.auto_msgmni": true,
	"kernel.msg_next_id": true, "kernel.sem_next_id": true, "kernel.shm_next_id": true,
}

// normalize turns the slash form ("net/ipv4/ip_forward") into the dotted
// form; in slash form dots are part of a component (an interface name).
func normalize(name string) (dotted, path string) {
	if strings.Contains(name, "/") {
		p := strings.Trim(name, "/")
		return strings.ReplaceAll(p, "/", "."), p
	}
	return name, strings.ReplaceAll(name, ".", "/")
}

// Classify sorts sysctls by owning namespace. A sysctl that is not
// namespaced, or whose namespace the pod shares with the host, would change
// the node, so it is rejected as invalid.
func Classify(sysctls map[string]string, hostNet, hostIPC bool) (map[Namespace]map[string]string, error) {
	out := map[Namespace]map[string]string{}
	for name, val := range sysctls {
		dotted, p := normalize(name)
		if p == "" || strings.Contains(p, "..") || strings.HasPrefix(p, ".") {
			return nil, fmt.Errorf("sysctl %q: %w", name, errdefs.ErrInvalid)
		}
		if strings.ContainsAny(val, "\n\x00") {
			return nil, fmt.Errorf("sysctl %q value %q: %w", name, val, errdefs.ErrInvalid)
		}
		var ns Namespace
		switch {
		case strings.HasPrefix(dotted, "net."):
			ns = NetNS
		case ipcSysctls[dotted], strings.HasPrefix(dotted, "fs.mqueue."):
			ns = IPCNS
		case dotted == "kernel.domainname":
			ns = UTSNS
		default:
			return nil, fmt.Errorf("sysctl %q is not namespaced: %w", name, errdefs.ErrInvalid)
		}
		if ns == NetNS && hostNet || ns == UTSNS && hostNet {
			return nil, fmt.Errorf("sysctl %q not allowed with the host network: %w", name, errdefs.ErrInvalid)
		}
		if ns == IPCNS && hostIPC {
			return nil, fmt.Errorf("sysctl %q not allowed with the host IPC namespace: %w", name, errdefs.ErrInvalid)
		}
		if out[ns] == nil {
			out[ns] = map[string]string{}
		}
		out[ns][name] = val
	}
	return out, nil
}

// Apply writes sysctls under procSys ("/proc/sys"). The kernel resolves
// namespaced entries against the calling thread's namespaces, so call it on
// a thread inside the pod's namespaces (netns.Do).
func Apply(procSys string, sysctls map[string]string) error {
	for name, val := range sysctls {
		_, p := normalize(name)
		f := filepath.Join(procSys, p)
		w, err := os.OpenFile(f, os.O_WRONLY|os.O_TRUNC, 0)
		if os.IsNotExist(err) {
			return fmt.Errorf("sysctl %q does not exist: %w", name, errdefs.ErrInvalid)
		}
		if err == nil {
			_, err = w.WriteString(val)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fmt.Errorf("set sysctl %q=%q: %w", name, val, err)
		}
	}
	return nil
}
