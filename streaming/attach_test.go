package streaming

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/errdefs"
)

type pipeOutput struct {
	r    *os.File
	once sync.Once
	c    chan []byte
}

func (p *pipeOutput) Follow(ctx context.Context, _ Target, stdout, _ io.Writer) (func() error, error) {
	p.once.Do(func() {
		p.c = make(chan []byte)
		go func() {
			defer close(p.c)
			for {
				b := make([]byte, 4096)
				n, err := p.r.Read(b)
				if n > 0 {
					p.c <- b[:n]
				}
				if err != nil {
					return
				}
			}
		}()
	})
	return func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case b, ok := <-p.c:
				if !ok {
					return nil
				}
				stdout.Write(b)
			}
		}
	}, nil
}

// The unit's wrapper opened the FIFO read-write itself: input arrives, and
// a session ends with the client's stdin even for stdin_once, since
// nothing can close the container's stdin.
func TestAttachUnheldFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "stdin")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	rc := runcRun(t, busyboxBundle(t, "runc", []string{"sh"}, false), nil, in, outW)
	in.Close()
	outW.Close()
	ctrs := &fakeContainers{}
	tgt := Target{ID: "unheld", Running: true, Stdin: true, StdinPath: fifo}
	ctrs.set(tgt)
	s := startServer(t, Deps{Containers: ctrs, Pods: fakePods{}, Output: &pipeOutput{r: outR}})
	for i, word := range []string{"one", "two"} {
		resp, err := s.Attach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "unheld", Stdin: true, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		st := remoteCommand(t, resp.Url, true, true, false, false)
		io.WriteString(st.stdin, "echo "+word+"\n")
		readUntil(t, st.stdout, word+"\n", 10*time.Second)
		st.stdin.Close()
		st.status(t, 10*time.Second)
		if got := rc.status(); got != "running" {
			t.Fatalf("session %d: container %s", i, got)
		}
	}
	tgt.Running = false
	ctrs.set(tgt)
	if _, err := s.Attach(context.Background(), &runtimeapi.AttachRequest{ContainerId: "unheld", Stdout: true}); !errors.Is(err, errdefs.ErrPrecondition) {
		t.Fatalf("attach to a stopped container: %v, want FailedPrecondition", err)
	}
}
