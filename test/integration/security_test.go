//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podunit/podunit/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestSecurity: the CRI socket is 0660 root:root, the streaming server
// listens on loopback only, and a container writes only where it was
// given a writable mount.
func TestSecurity(t *testing.T) {
	e := StartEnv(t)
	ctx := harness.Context(t, 3*time.Minute)

	t.Run("SocketMode", func(t *testing.T) {
		fi, err := os.Stat(e.P.Socket)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 0 {
			t.Fatalf("CRI socket %s: mode %s owner %d:%d, want a socket 0660 root:root", e.P.Socket, fi.Mode(), st.Uid, st.Gid)
		}
	})

	ro := filepath.Join(e.H.StateDir, "sec", "ro")
	rw := filepath.Join(e.H.StateDir, "sec", "rw")
	for _, d := range []string{ro, rw} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "keep"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pc := PodConfig("sec")
	pr, err := e.P.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
	if err != nil {
		t.Fatal(err)
	}
	cc := ContainerConfig("sec")
	cc.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/ro", HostPath: harness.StateDirInside + "/sec/ro", Readonly: true},
		{ContainerPath: "/rw", HostPath: harness.StateDirInside + "/sec/rw"},
	}
	cr, err := e.P.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pr.PodSandboxId, Config: cc, SandboxConfig: pc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.P.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	execIn := func(id string, cmd string) (int32, string) {
		r, err := e.P.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", cmd}, Timeout: 20})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return r.ExitCode, string(r.Stdout) + string(r.Stderr)
	}

	t.Run("StreamingOnLoopback", func(t *testing.T) {
		r, err := e.P.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: cr.ContainerId, Cmd: []string{"true"}, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(r.Url)
		if err != nil {
			t.Fatal(err)
		}
		ip := net.ParseIP(u.Hostname())
		if ip == nil || !ip.IsLoopback() {
			t.Fatalf("streaming URL %s is not on a loopback address", r.Url)
		}
		// and the socket is bound to loopback, not to every address
		// behind a loopback URL: connect to the port on another address
		// of the harness' netns fails. Its only other address is the CNI
		// bridge's gateway.
		pf, err := e.P.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: pr.PodSandboxId, Port: []int32{80}})
		if err != nil {
			t.Fatal(err)
		}
		if pu, _ := url.Parse(pf.Url); pu == nil || pu.Host != u.Host {
			t.Fatalf("port-forward URL %s is not the exec server %s", pf.Url, u.Host)
		}
		out, _ := e.H.Exec("ss", "-Htln", "sport = :"+u.Port())
		for _, l := range lines(out) {
			f := strings.Fields(l)
			if len(f) >= 4 && !strings.HasPrefix(f[3], "127.") && !strings.HasPrefix(f[3], "[::1]") {
				t.Errorf("streaming port %s listens on %s", u.Port(), f[3])
			}
		}
		if len(lines(out)) == 0 {
			t.Errorf("ss shows no listener on the streaming port %s", u.Port())
		}
	})

	t.Run("ContainerWrites", func(t *testing.T) {
		if code, out := execIn(cr.ContainerId, "echo x > /ro/new"); code == 0 {
			t.Errorf("wrote into the read-only mount: %s", out)
		}
		if code, out := execIn(cr.ContainerId, "echo x >> /ro/keep"); code == 0 {
			t.Errorf("appended to a file of the read-only mount: %s", out)
		}
		if code, out := execIn(cr.ContainerId, "mount -o remount,rw /ro"); code == 0 {
			t.Errorf("remounted the read-only mount read-write: %s", out)
		}
		if b, _ := os.ReadFile(filepath.Join(ro, "keep")); string(b) != "original\n" {
			t.Errorf("read-only host file now %q", b)
		}
		if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
			t.Errorf("a file appeared in the read-only host dir")
		}
		if code, out := execIn(cr.ContainerId, "echo given > /rw/f"); code != 0 {
			t.Errorf("cannot write the writable mount: %s", out)
		}
		if b, _ := os.ReadFile(filepath.Join(rw, "f")); string(b) != "given\n" {
			t.Errorf("writable mount: host sees %q", b)
		}
		// the container's rootfs is its own, not the host's
		if code, out := execIn(cr.ContainerId, "echo pwned > /etc/podunit-sec-test && echo pwned > /podunit-sec-test"); code != 0 {
			t.Errorf("cannot write its own rootfs: %s", out)
		}
		for _, p := range []string{"/etc/podunit-sec-test", "/podunit-sec-test"} {
			if _, err := os.Stat(e.Inside(p)); err == nil {
				t.Errorf("container write reached the node's %s", p)
			}
		}
		for _, cmd := range []string{
			"echo 1 > /proc/sys/vm/overcommit_memory", // /proc/sys is read-only
			"echo 1 > /proc/sysrq-trigger",            // masked
			// /sys is read-only (writing back the current value is harmless if not)
			"v=$(cat /sys/kernel/mm/ksm/run) && echo $v > /sys/kernel/mm/ksm/run",
			// cgroup v1: the hierarchies are read-only binds in a tmpfs; v2: a read-only cgroup2
			"d=/sys/fs/cgroup/memory; [ -d $d ] || d=/sys/fs/cgroup; mkdir $d/podunit-sec-test",
			"mount -t tmpfs none /mnt", // no CAP_SYS_ADMIN
			"mknod /tmp/sda b 8 0 && echo x > /tmp/sda",
		} {
			if code, out := execIn(cr.ContainerId, cmd); code == 0 {
				t.Errorf("%q succeeded in an unprivileged container: %s", cmd, out)
			}
		}
	})

	t.Run("ReadonlyRootfs", func(t *testing.T) {
		c := ContainerConfig("ro-root")
		c.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}}
		r, err := e.P.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pr.PodSandboxId, Config: c, SandboxConfig: pc})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.P.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: r.ContainerId}); err != nil {
			t.Fatal(err)
		}
		if code, out := execIn(r.ContainerId, "echo x > /etc/x"); code == 0 {
			t.Errorf("wrote into a read-only rootfs: %s", out)
		}
	})

	t.Run("HostPathWithDotDot", func(t *testing.T) {
		c := ContainerConfig("dotdot")
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: harness.StateDirInside + "/sec/rw/../../.."}}
		_, err := e.P.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pr.PodSandboxId, Config: c, SandboxConfig: pc})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("host_path with ..: %v, want InvalidArgument", err)
		}
	})
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMalformedRequests sends 10,000 random malformed CRI requests
// (PODUNIT_MALFORMED=N for another count) to a podunit with one running
// pod: every answer must be a gRPC status (no crash, no dropped
// connection), input errors never Unknown, and nothing may change.
func TestMalformedRequests(t *testing.T) {
	n := 10000
	if s := os.Getenv("PODUNIT_MALFORMED"); s != "" {
		fmt.Sscan(s, &n)
	}
	e := StartEnv(t)
	ctx := harness.Context(t, 10*time.Minute)
	pod, ctr, err := e.RunContainer(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	before := e.CheckInvariants(ctx, "before")
	pid := e.PodunitPID()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	g := &garbage{r: rand.New(rand.NewPCG(seed, 1)), real: []string{pod, ctr}}
	images, err := e.P.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range images.Images {
		g.real = append(g.real, im.Id)
	}
	codesSeen := map[string]int{}
	var unknown []string
	start := time.Now()
	for i := 0; i < n; i++ {
		name, call := g.request(pod)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := call(cctx, e.P)
		cancel()
		c := status.Code(err)
		if _, ok := status.FromError(err); !ok {
			t.Fatalf("request %d (%s): not a gRPC status: %v", i, name, err)
		}
		codesSeen[name+":"+c.String()]++
		switch c {
		case codes.Unavailable:
			t.Fatalf("request %d (%s): connection lost: %v", i, name, err)
		case codes.Unknown, codes.DeadlineExceeded:
			if len(unknown) < 20 {
				unknown = append(unknown, fmt.Sprintf("%s: %v", name, trunc(err.Error())))
			}
		}
	}
	t.Logf("%d malformed requests in %s", n, time.Since(start).Round(time.Millisecond))
	keys := make([]string, 0, len(codesSeen))
	for k := range codesSeen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %d\n", k, codesSeen[k])
	}
	t.Logf("answers by RPC and code:\n%s", b.String())
	for _, u := range unknown {
		t.Errorf("input error answered Unknown/DeadlineExceeded: %s", u)
	}
	if got := e.PodunitPID(); got != pid {
		t.Fatalf("podunit restarted during the flood (pid %d -> %d)", pid, got)
	}
	after := e.CheckInvariants(ctx, "after")
	if fmt.Sprint(before.Pods, before.Containers, before.Units, before.Mounts, before.CNIIPs, before.Records) !=
		fmt.Sprint(after.Pods, after.Containers, after.Units, after.Mounts, after.CNIIPs, after.Records) {
		t.Errorf("state changed:\nbefore %+v\nafter  %+v", before, after)
	}
	if err := e.RemoveAllPods(ctx); err != nil {
		t.Fatal(err)
	}
}

func trunc(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// garbage makes malformed requests. Every request it makes is invalid by
// construction (a defect the validation must catch), or names objects
// that do not exist, so a correct podunit changes nothing.
type garbage struct {
	r    *rand.Rand
	real []string // IDs that exist: random IDs must not be prefixes of them
}

func (g *garbage) str() string {
	switch g.r.IntN(10) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("../", 1+g.r.IntN(20)) + "etc/passwd"
	case 2:
		return strings.Repeat("A", 1<<(10+g.r.IntN(11))) // 1 KiB .. 1 MiB
	case 3:
		return "\x00nul\x00" + g.word()
	case 4:
		return "/" + g.word() + "/../../" + g.word()
	case 5:
		return "ünïcödé-☃-" + g.word()
	case 6:
		return "a=b,c!=d,e in (f)"
	default:
		return g.word()
	}
}

func (g *garbage) word() string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@ %$*"
	b := make([]byte, 1+g.r.IntN(40))
	for i := range b {
		b[i] = chars[g.r.IntN(len(chars))]
	}
	return string(b)
}

// id is a random ID that is no prefix of a real one.
func (g *garbage) id() string {
	for {
		s := g.str()
		if g.r.IntN(3) == 0 {
			s = fmt.Sprintf("%016x", g.r.Uint64())[:1+g.r.IntN(16)]
		}
		ok := s != "" || g.r.IntN(2) == 0 // "" is its own malformed case
		for _, r := range g.real {
			if s != "" && strings.HasPrefix(r, s) {
				ok = false
			}
		}
		if ok {
			return s
		}
	}
}

func (g *garbage) labels() map[string]string {
	m := map[string]string{}
	for i := g.r.IntN(4); i > 0; i-- {
		m[g.str()] = g.str()
	}
	return m
}

// badPod is a pod config with at least one defect RunPodSandbox rejects
// before it touches the node.
func (g *garbage) badPod() *runtimeapi.PodSandboxConfig {
	c := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: g.str(), Namespace: g.str(), Uid: g.str()},
		Hostname:     g.str(),
		LogDirectory: g.str(),
		Labels:       g.labels(),
		Annotations:  g.labels(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: g.str(), Sysctls: g.labels()},
	}
	switch g.r.IntN(6) {
	case 0:
		c.Metadata = nil
	case 1:
		c.Metadata.Name = ""
	case 2:
		c.Metadata.Namespace = ""
	case 3:
		c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: -1 - g.r.Int32N(1000), HostPort: g.r.Int32()}}
	case 4:
		c.Linux.CgroupParent = "../../" + g.word() + ".slice"
	case 5:
		c.Hostname = "bad/host name " + g.word()
	}
	return c
}

// badContainer has at least one defect CreateContainer rejects.
func (g *garbage) badContainer() *runtimeapi.ContainerConfig {
	c := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: g.str(), Attempt: g.r.Uint32()},
		Image:      &runtimeapi.ImageSpec{Image: TestImage},
		Command:    []string{g.str()},
		Args:       []string{g.str()},
		WorkingDir: g.str(),
		Envs:       []*runtimeapi.KeyValue{{Key: g.str(), Value: []byte(g.str())}},
		Labels:     g.labels(),
		LogPath:    g.word() + ".log",
	}
	switch g.r.IntN(7) {
	case 0:
		c.Metadata = nil
	case 1:
		c.Metadata.Name = ""
	case 2:
		c.Image = &runtimeapi.ImageSpec{Image: ""}
	case 3:
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/a/../" + g.word(), HostPath: "/tmp"}}
	case 4:
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: "/var/../" + g.word()}}
	case 5:
		c.LogPath = "../" + g.word()
	case 6:
		c.LogPath = "/abs/" + g.word()
	}
	if c.Metadata != nil && c.Metadata.Name == "" && g.r.IntN(2) == 0 {
		c.Image = &runtimeapi.ImageSpec{Image: "no-such-registry.invalid/" + g.word()}
	}
	return c
}

// request picks one RPC with malformed arguments; pod is the real pod.
func (g *garbage) request(pod string) (string, func(context.Context, *harness.Podunit) error) {
	rt := func(p *harness.Podunit) runtimeapi.RuntimeServiceClient { return p.Runtime }
	switch g.r.IntN(22) {
	case 0:
		cfg := g.badPod()
		h := g.str()
		if g.r.IntN(4) != 0 {
			h = "" // the pod's own defect, not the handler, is tested
		} else if h == "" {
			h = "bad-handler"
		}
		return "RunPodSandbox", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: h})
			return err
		}
	case 1:
		return "RunPodSandbox", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{})
			return err
		}
	case 2, 3:
		target := pod
		if g.r.IntN(3) == 0 {
			target = g.id()
		}
		cfg := g.badContainer()
		return "CreateContainer", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: target, Config: cfg})
			return err
		}
	case 4:
		id := g.id()
		return "StartContainer", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		}
	case 5:
		id, to := g.id(), g.r.Int64N(100)-50
		return "StopContainer", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: to})
			return err
		}
	case 6:
		id := g.id()
		return "RemoveContainer", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		}
	case 7:
		id := g.id()
		return "StopPodSandbox", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		}
	case 8:
		id := g.id()
		return "RemovePodSandbox", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		}
	case 9:
		id, v := g.id(), g.r.IntN(2) == 0
		return "ContainerStatus", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: v})
			return err
		}
	case 10:
		id := g.id()
		return "PodSandboxStatus", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			return err
		}
	case 11:
		f := &runtimeapi.ContainerFilter{Id: g.str(), PodSandboxId: g.str(), LabelSelector: g.labels()}
		return "ListContainers", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
			return err
		}
	case 12:
		f := &runtimeapi.PodSandboxFilter{Id: g.str(), LabelSelector: g.labels(),
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState(g.r.Int32N(10) - 3)}}
		return "ListPodSandbox", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
			return err
		}
	case 13:
		id := g.id()
		r := &runtimeapi.LinuxContainerResources{CpuShares: g.r.Int64(), MemoryLimitInBytes: g.r.Int64N(1 << 40), CpusetCpus: g.str()}
		return "UpdateContainerResources", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: r})
			return err
		}
	case 14:
		id, cmd := g.id(), []string{g.str()}
		return "ExecSync", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 1})
			return err
		}
	case 15:
		id, cmd := g.id(), []string{g.str()}
		return "Exec", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Stdout: true})
			return err
		}
	case 16:
		id := g.id()
		return "Attach", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true})
			return err
		}
	case 17:
		id := g.id()
		return "PortForward", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: []int32{g.r.Int32()}})
			return err
		}
	case 18:
		id := g.id()
		return "ReopenContainerLog", func(ctx context.Context, p *harness.Podunit) error {
			_, err := rt(p).ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
			return err
		}
	case 19:
		ref := g.id()
		return "ImageStatus", func(ctx context.Context, p *harness.Podunit) error {
			_, err := p.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			return err
		}
	case 20:
		ref := g.id()
		return "RemoveImage", func(ctx context.Context, p *harness.Podunit) error {
			_, err := p.Image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			return err
		}
	default:
		return g.nonUTF8()
	}
}

// nonUTF8 sends bytes the generated clients refuse to marshal: proto3
// strings that are not UTF-8, and truncated messages, over a raw codec.
func (g *garbage) nonUTF8() (string, func(context.Context, *harness.Podunit) error) {
	bad := []byte{'p', 0xff, 0xfe, 'x', 0xc3}
	var meta []byte
	meta = protowire.AppendTag(meta, 1, protowire.BytesType) // name
	meta = protowire.AppendBytes(meta, bad)
	meta = protowire.AppendTag(meta, 3, protowire.BytesType) // namespace
	meta = protowire.AppendBytes(meta, bad)
	var cfg []byte
	cfg = protowire.AppendTag(cfg, 1, protowire.BytesType) // metadata
	cfg = protowire.AppendBytes(cfg, meta)
	var msg []byte
	method := "/runtime.v1.RuntimeService/RunPodSandbox"
	switch g.r.IntN(3) {
	case 0:
		msg = protowire.AppendTag(msg, 1, protowire.BytesType) // config
		msg = protowire.AppendBytes(msg, cfg)
	case 1:
		method = "/runtime.v1.RuntimeService/StopPodSandbox"
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendBytes(msg, bad)
	case 2:
		// a length that runs past the end of the message
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendVarint(msg, 1000)
		msg = append(msg, "short"...)
	}
	return "raw" + method[strings.LastIndexByte(method, '/'):], func(ctx context.Context, p *harness.Podunit) error {
		var out rawMsg
		return p.Conn.Invoke(ctx, method, rawMsg(msg), &out, grpc.ForceCodec(rawCodec{}))
	}
}

type rawMsg []byte

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(rawMsg)
	if !ok {
		return nil, errors.New("rawCodec: not raw bytes")
	}
	return m, nil
}
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*rawMsg)) = append(rawMsg(nil), b...)
	return nil
}
