package streaming

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/podunit/podunit/errdefs"
	"github.com/podunit/podunit/netns"
)

const moveSize = 100 << 20

// podNetNS pins a fresh network namespace with loopback up.
func podNetNS(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "net")
	if err := netns.New(map[netns.Kind]string{netns.Net: path}); err != nil {
		t.Fatalf("create netns (needs root): %v", err)
	}
	t.Cleanup(func() { netns.Unpin(path) })
	if out, err := exec.Command("nsenter", "--net="+path, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}
	return path
}

// podServer listens on 127.0.0.1 inside the namespace. A connection that
// starts with 'D' gets moveSize pseudo-random bytes; with 'U' the server
// reads to EOF and answers the hex SHA-256 of what it got.
func podServer(t *testing.T, nsPath string) int32 {
	t.Helper()
	var lis net.Listener
	err := netns.Do(map[netns.Kind]string{netns.Net: nsPath}, func() error {
		var err error
		lis, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				mode, err := br.ReadByte()
				if err != nil {
					return
				}
				switch mode {
				case 'D':
					io.Copy(c, io.LimitReader(newPRNG(), moveSize))
				case 'U':
					h := sha256.New()
					io.Copy(h, br)
					io.WriteString(c, hex.EncodeToString(h.Sum(nil)))
				}
			}()
		}
	}()
	return int32(lis.Addr().(*net.TCPAddr).Port)
}

type prng struct{ r *rand.ChaCha8 }

func newPRNG() io.Reader                  { return prng{rand.NewChaCha8([32]byte{7})} }
func (p prng) Read(b []byte) (int, error) { return p.r.Read(b) }

func digest(r io.Reader) (string, int64) {
	h := sha256.New()
	n, _ := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n
}

// openPair opens the error and data streams for one forwarded connection.
func openPair(t *testing.T, conn httpstream.Connection, port int32, id int) (data, errs httpstream.Stream) {
	t.Helper()
	data, errs, err := openPairErr(t, conn, port, id)
	if err != nil {
		t.Fatal(err)
	}
	return data, errs
}

// openPairErr tolerates a data stream the server reset before the reply
// was seen (it resets both after a failed dial).
func openPairErr(t *testing.T, conn httpstream.Connection, port int32, id int) (data, errs httpstream.Stream, dataErr error) {
	t.Helper()
	h := http.Header{}
	h.Set("streamType", "error")
	h.Set("port", strconv.Itoa(int(port)))
	h.Set("requestID", strconv.Itoa(id))
	errs, err := conn.CreateStream(h)
	if err != nil {
		t.Fatal(err)
	}
	errs.Close() // the client never writes to the error stream
	h.Set("streamType", "data")
	data, dataErr = conn.CreateStream(h)
	return data, errs, dataErr
}

func TestPortForward(t *testing.T) {
	ns := podNetNS(t)
	port := podServer(t, ns)
	s := startServer(t, Deps{Containers: &fakeContainers{}, Pods: fakePods{"pod1": ns}})
	ctx := context.Background()

	if _, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown pod: %v, want NotFound", err)
	}
	if _, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("no pod: %v, want InvalidArgument", err)
	}
	resp, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "pod1", Port: []int32{port}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Url, "http://127.0.0.1:") {
		t.Fatalf("url %q", resp.Url)
	}
	conn := spdyConnect(t, resp.Url, "portforward.k8s.io")

	t.Run("download", func(t *testing.T) {
		data, errs := openPair(t, conn, port, 1)
		if _, err := data.Write([]byte{'D'}); err != nil {
			t.Fatal(err)
		}
		got, n := digest(data)
		want, _ := digest(io.LimitReader(newPRNG(), moveSize))
		if n != moveSize || got != want {
			t.Fatalf("got %d bytes sha %s, want %d bytes sha %s", n, got, moveSize, want)
		}
		if msg, _ := io.ReadAll(errs); len(msg) != 0 {
			t.Fatalf("error stream: %s", msg)
		}
	})
	t.Run("upload", func(t *testing.T) {
		data, _ := openPair(t, conn, port, 2)
		go func() {
			data.Write([]byte{'U'})
			io.Copy(data, io.LimitReader(newPRNG(), moveSize))
			data.Close() // half-close: the pod still answers
		}()
		got, _ := io.ReadAll(data)
		want, _ := digest(io.LimitReader(newPRNG(), moveSize))
		if string(got) != want {
			t.Fatalf("pod saw sha %q, want %q", got, want)
		}
	})
	t.Run("closed port", func(t *testing.T) {
		data, errs, _ := openPairErr(t, conn, port+1, 3)
		if data != nil {
			defer data.Close()
		}
		done := make(chan []byte)
		go func() { b, _ := io.ReadAll(errs); done <- b }()
		select {
		case msg := <-done:
			if !strings.Contains(string(msg), "connection refused") {
				t.Fatalf("error stream: %q, want connection refused", msg)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no error for a closed port")
		}
	})
}
