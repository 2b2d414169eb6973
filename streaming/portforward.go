package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/podunit/podunit/netns"
)

const dialTimeout = 10 * time.Second

// dialInNetNS connects to localhost:port inside the network namespace
// pinned at path ("" is podunit's own). The socket is created on a
// throw-away thread that joined the namespace, and a socket stays in the
// namespace it was created in, so the connection is then used from any
// goroutine.
func dialInNetNS(ctx context.Context, path string, port int32) (net.Conn, error) {
	dial := func() (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		var errs []error
		// "localhost" would be resolved with the host's /etc/hosts; a pod
		// server may listen on either loopback.
		for _, host := range []string{"127.0.0.1", "::1"} {
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
			if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EADDRNOTAVAIL) && !errors.Is(err, syscall.ENETUNREACH) {
				break
			}
		}
		return nil, errors.Join(errs...)
	}
	if path == "" {
		return dial()
	}
	var conn net.Conn
	err := netns.Do(map[netns.Kind]string{netns.Net: path}, func() error {
		var err error
		conn, err = dial()
		return err
	})
	return conn, err
}

// forward copies between stream and localhost:port in the namespace. It
// returns when the pod side has finished sending (or either side failed):
// the client's end of input only half-closes the connection, so a reply
// still in flight is delivered.
func forward(ctx context.Context, nsPath string, port int32, stream io.ReadWriteCloser) error {
	conn, err := dialInNetNS(ctx, nsPath, port)
	if err != nil {
		return fmt.Errorf("connect to port %d in the pod: %w", port, err)
	}
	defer conn.Close()

	var once sync.Once
	stop := func() { once.Do(func() { conn.Close(); stream.Close() }) }
	go func() {
		<-ctx.Done()
		stop()
	}()

	upDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, stream)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		upDone <- err
	}()
	_, downErr := io.Copy(stream, conn)
	stop()
	if downErr != nil && !errors.Is(downErr, net.ErrClosed) && ctx.Err() == nil {
		return fmt.Errorf("port %d: copy from pod: %w", port, downErr)
	}
	select {
	case err := <-upDone:
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) && ctx.Err() == nil {
			return fmt.Errorf("port %d: copy to pod: %w", port, err)
		}
	default:
	}
	return nil
}
