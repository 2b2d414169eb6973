package streaming

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/procstat"
)

// The session process (`podunit _stream`, podunit-stream.service) serves
// the streaming URLs so that sessions outlive podunit (docs/streaming.md
// "Session process"). podunit checks each Exec/Attach/PortForward
// request, resolves what the session needs and registers it over a unix
// socket; the session process answers with the single-use URL. What it
// keeps (Registry) is only what registrations told it: losing it with
// the process ends its sessions and nothing else.

// Control-socket operations.
const (
	opPing        = "ping"
	opExec        = "exec"
	opAttach      = "attach"
	opPortForward = "portforward"
)

// request is one registration (or a ping), one JSON line per connection.
type request struct {
	Op string
	// ID is the container's full ID, or the pod's for a port-forward.
	ID                         string
	Cmd                        []string
	Stdin, Stdout, Stderr, TTY bool
	Ports                      []int32
	Target                     *Target
	Exec                       *ExecTarget
	NetNS                      string
}

// response carries the URL, or the error with its kind so that podunit
// answers with the same gRPC code as if it had failed itself.
type response struct {
	URL string
	// Listen is the session process's listen configuration (ping).
	Listen string
	Error  string
	Kind   string
}

var errKinds = []struct {
	name string
	err  error
}{
	{"invalid", errdefs.ErrInvalid}, {"notfound", errdefs.ErrNotFound},
	{"precondition", errdefs.ErrPrecondition}, {"unavailable", errdefs.ErrUnavailable},
}

func errResponse(err error) response {
	r := response{Error: err.Error()}
	for _, k := range errKinds {
		if errors.Is(err, k.err) {
			r.Kind = k.name
			break
		}
	}
	return r
}

// err is the response's error, wrapping the sentinel of its kind.
func (r response) err() error {
	if r.Error == "" {
		return nil
	}
	for _, k := range errKinds {
		if r.Kind == k.name {
			return fmt.Errorf("streaming session process: %s: %w", r.Error, k.err)
		}
	}
	return fmt.Errorf("streaming session process: %s", r.Error)
}

// ListenKey names a listen configuration: a session process started with
// another one is replaced (its sessions end) when podunit starts.
func ListenKey(c Config) string {
	return c.Address + " " + c.TLSCert + " " + c.TLSKey
}

// Registry is the session process's view of containers and pods, made of
// what registrations brought: it serves as the streaming Server's
// Containers, Pods and Executor there. A container's entry stays while
// the container runs (its init and exit record tell), a pod's while its
// network namespace exists, so sessions and port-forward connections
// opened later find them.
type Registry struct {
	mu   sync.Mutex
	ctrs map[string]*regCtr
	pods map[string]string
	// procRoot is /proc (tests may change it).
	procRoot string
}

type regCtr struct {
	t    Target
	exec *ExecTarget
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{ctrs: map[string]*regCtr{}, pods: map[string]string{}, procRoot: "/proc"}
}

// putContainer records t (and x, for an exec) and forgets containers that
// stopped.
func (r *Registry) putContainer(t Target, x *ExecTarget) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, c := range r.ctrs {
		if !r.runs(c.t) {
			delete(r.ctrs, id)
		}
	}
	c := r.ctrs[t.ID]
	if c == nil {
		c = &regCtr{}
		r.ctrs[t.ID] = c
	}
	c.t = t
	if x != nil {
		c.exec = x
	}
}

// putPod records a pod's netns and forgets pods whose netns is gone.
func (r *Registry) putPod(id, netns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, path := range r.pods {
		if _, err := os.Stat(path); path != "" && err != nil {
			delete(r.pods, p)
		}
	}
	r.pods[id] = netns
}

// runs reports whether the container still runs: no exit record and, when
// its init is known, that process alive (same start time: not a recycled
// PID).
func (r *Registry) runs(t Target) bool {
	if !t.Running {
		return false
	}
	if t.ExitFile != "" {
		if _, err := os.Lstat(t.ExitFile); err == nil {
			return false
		}
	}
	if t.InitPID > 0 {
		st, err := procstat.Read(r.procRoot, t.InitPID)
		return err == nil && !st.Exited() && st.Start == t.InitStart
	}
	return true
}

// StreamTarget implements Containers.
func (r *Registry) StreamTarget(_ context.Context, id string) (Target, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.ctrs[id]
	if c == nil {
		return Target{}, fmt.Errorf("container %s not registered with the session process: %w", id, errdefs.ErrNotFound)
	}
	t := c.t
	t.Running = r.runs(t)
	return t, nil
}

// NetNSPath implements Pods.
func (r *Registry) NetNSPath(_ context.Context, podID string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	path, ok := r.pods[podID]
	if !ok {
		return "", fmt.Errorf("pod %s not registered with the session process: %w", podID, errdefs.ErrNotFound)
	}
	return path, nil
}

// Exec implements Executor with the one exec of package oci, as
// container.Manager.Exec runs it in podunit: the process is derived from
// the container's by oci.ExecSpec, the runtime is the one podunit
// described.
func (r *Registry) Exec(ctx context.Context, id string, p ExecProcess) (int, error) {
	r.mu.Lock()
	c := r.ctrs[id]
	var x *ExecTarget
	if c != nil {
		x = c.exec
	}
	r.mu.Unlock()
	if x == nil {
		return -1, fmt.Errorf("exec in container %s: not registered with the session process: %w", id, errdefs.ErrNotFound)
	}
	proc := oci.ExecSpec(&x.Process, p.Args, p.TTY)
	code, err := x.Runtime.CLI().Exec(ctx, x.ID, oci.ExecProcess{Process: proc, Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr, Resize: p.Resize})
	if err != nil {
		return code, fmt.Errorf("exec in container %s: %w", id, err)
	}
	return code, nil
}

// Control serves registrations on the session process's unix socket:
// each fills reg and asks srv (whose Deps are reg) for the URL, so the
// checks are the in-process ones.
type Control struct {
	Srv    *Server
	Reg    *Registry
	Listen string
	Logger *slog.Logger
}

// ListenControl listens at socket (mode 0600), replacing a stale file;
// a socket that answers belongs to a running session process and is
// refused.
func ListenControl(socket string) (*net.UnixListener, error) {
	if _, err := Ping(socket, time.Second); err == nil {
		return nil, fmt.Errorf("a streaming session process already answers at %s", socket)
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o711); err != nil {
		return nil, err
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers connections until ctx ends.
func (c *Control) Serve(ctx context.Context, l net.Listener) error {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go c.handle(ctx, conn)
	}
}

// controlTimeout bounds one registration on either side.
const controlTimeout = 10 * time.Second

func (c *Control) handle(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	var req request
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		c.Logger.Warn("bad registration", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	resp := c.answer(ctx, req)
	if err := json.NewEncoder(conn).Encode(resp); err != nil {
		c.Logger.Debug("registration reply", "err", err)
	}
}

func (c *Control) answer(ctx context.Context, q request) response {
	var url string
	var err error
	switch q.Op {
	case opPing:
		return response{Listen: c.Listen}
	case opExec, opAttach:
		if q.Target == nil || q.Target.ID != q.ID || q.Op == opExec && (q.Exec == nil || q.Exec.ID != q.ID) {
			return errResponse(fmt.Errorf("%s registration without its container: %w", q.Op, errdefs.ErrInvalid))
		}
		c.Reg.putContainer(*q.Target, q.Exec)
		if q.Op == opExec {
			var r *runtimeapi.ExecResponse
			r, err = c.Srv.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: q.ID, Cmd: q.Cmd, Tty: q.TTY, Stdin: q.Stdin, Stdout: q.Stdout, Stderr: q.Stderr})
			url = r.GetUrl()
		} else {
			var r *runtimeapi.AttachResponse
			r, err = c.Srv.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: q.ID, Tty: q.TTY, Stdin: q.Stdin, Stdout: q.Stdout, Stderr: q.Stderr})
			url = r.GetUrl()
		}
	case opPortForward:
		c.Reg.putPod(q.ID, q.NetNS)
		var r *runtimeapi.PortForwardResponse
		r, err = c.Srv.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: q.ID, Port: q.Ports})
		url = r.GetUrl()
	default:
		err = fmt.Errorf("unknown operation %q: %w", q.Op, errdefs.ErrInvalid)
	}
	if err != nil {
		return errResponse(err)
	}
	return response{URL: url}
}

// call sends one request to the session process at socket.
func call(socket string, q request, timeout time.Duration) (response, error) {
	conn, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return response{}, fmt.Errorf("streaming session process: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if err := json.NewEncoder(conn).Encode(q); err != nil {
		return response{}, fmt.Errorf("streaming session process: send: %w", err)
	}
	var r response
	if err := json.NewDecoder(io.LimitReader(conn, 1<<20)).Decode(&r); err != nil {
		return response{}, fmt.Errorf("streaming session process: reply: %w", err)
	}
	return r, nil
}

// Ping asks the session process at socket for its listen configuration.
func Ping(socket string, timeout time.Duration) (string, error) {
	r, err := call(socket, request{Op: opPing}, timeout)
	if err != nil {
		return "", err
	}
	return r.Listen, r.err()
}
