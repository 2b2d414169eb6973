package cri

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path"
	"time"

	"github.com/podunit/podunit/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "podunit", Subsystem: "cri", Name: "requests_total",
		Help: "CRI requests by method and gRPC code.",
	}, []string{"method", "code"})
	latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "podunit", Subsystem: "cri", Name: "request_duration_seconds",
		Help:    "CRI request latency by method.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
	}, []string{"method"})
)

// Collectors returns the package's metrics for registration.
func Collectors() []prometheus.Collector { return []prometheus.Collector{requests, latency} }

// ToStatus maps podunit's sentinel errors to gRPC codes. It is the only
// place that knows about both.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Unknown
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errdefs.ErrDeadline):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, errdefs.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, errdefs.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, errdefs.ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, errdefs.ErrPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, errdefs.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, errdefs.ErrPermission):
		code = codes.PermissionDenied
	case errors.Is(err, errdefs.ErrResourceExhausted):
		code = codes.ResourceExhausted
	case errors.Is(err, errdefs.ErrUnimplemented):
		code = codes.Unimplemented
	}
	return status.Error(code, err.Error())
}

// UnaryInterceptor maps errors, logs failures with the method and
// records metrics for every CRI call.
func UnaryInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		return resp, finish(log, info.FullMethod, start, err)
	}
}

// StreamInterceptor does for streaming RPCs what UnaryInterceptor does:
// the Stream* lists stand in for their List* twins, so a kubelet that
// streams must show in the same metrics. GetContainerEvents' duration is
// its subscription's lifetime, in a histogram of its own method label.
func StreamInterceptor(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		return finish(log, info.FullMethod, start, handler(srv, ss))
	}
}

// finish maps err to its gRPC status, counts the call and logs a failure.
// A client that cancelled (the kubelet's timeout, or the end of an events
// subscription) and "no such thing" answers are routine, not warnings.
func finish(log *slog.Logger, fullMethod string, start time.Time, err error) error {
	method := path.Base(fullMethod)
	err = ToStatus(err)
	code := status.Code(err)
	requests.WithLabelValues(method, code.String()).Inc()
	latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		log.Debug("cri call", "method", method, "duration", time.Since(start))
	case code == codes.NotFound || code == codes.Unimplemented || code == codes.Canceled:
		log.Debug("cri call failed", "method", method, "code", code.String(), "err", err)
	default:
		log.Warn("cri call failed", "method", method, "code", code.String(), "err", err, "duration", time.Since(start))
	}
	return err
}

func (s *Server) configJSON() string {
	b, err := json.Marshal(s.cfg())
	if err != nil {
		return err.Error()
	}
	return string(b)
}
