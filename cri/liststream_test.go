package cri

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podunit/podunit/config"
	"github.com/podunit/podunit/stats"
	"github.com/podunit/podunit/stats/cristats"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClients serves s over a unix socket the way podunit serve does (both
// services, both interceptors), so the tests see what the kubelet sees:
// gRPC codes, not podunit's errors.
func criClients(t *testing.T, s *Server) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	gs := grpc.NewServer(grpc.UnaryInterceptor(UnaryInterceptor(log)), grpc.StreamInterceptor(StreamInterceptor(log)))
	runtimeapi.RegisterRuntimeServiceServer(gs, s)
	runtimeapi.RegisterImageServiceServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
}

// collect reads a stream to its end as the kubelet does, and fails the
// test on a message without items (the CRI wants at least one each).
func collect[R, T any](t *testing.T, stream grpc.ServerStreamingClient[R], err error, items func(*R) []T) ([]T, error) {
	t.Helper()
	if err != nil {
		return nil, err
	}
	var out []T
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if len(items(msg)) == 0 {
			t.Errorf("stream message without items: %v", msg)
		}
		out = append(out, items(msg)...)
	}
}

func sameProtos[T proto.Message](t *testing.T, what string, unary, streamed []T) {
	t.Helper()
	if !slices.EqualFunc(unary, streamed, func(a, b T) bool { return proto.Equal(a, b) }) {
		t.Errorf("%s: List gave %v, Stream gave %v", what, unary, streamed)
	}
}

func sameCode(t *testing.T, what string, unary, streamed error, want codes.Code) {
	t.Helper()
	if status.Code(unary) != want || status.Code(streamed) != want {
		t.Errorf("%s: List %v, Stream %v; want %s from both", what, unary, streamed, want)
	}
}

func TestStreamPodSandboxesAndContainers(t *testing.T) {
	s := podServer(t)
	rt, _ := criClients(t, s)
	ctx := context.Background()
	var pods []string
	for _, p := range []struct{ name, app string }{{"sa", "x"}, {"sb", "y"}, {"sc", "x"}} {
		run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: testPod(p.name, map[string]string{"app": p.app}), RuntimeHandler: "runc"})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, run.PodSandboxId)
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Command: []string{"sh"}, Labels: map[string]string{"app": p.app},
		}
		cr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: run.PodSandboxId, Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		if p.name == "sa" {
			if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pods[1]}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		f    *runtimeapi.PodSandboxFilter
		want int
	}{
		{nil, 3},
		{&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "x"}}, 2},
		{&runtimeapi.PodSandboxFilter{Id: pods[2][:12]}, 1},
		{&runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}, 1},
		{&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "none"}}, 0},
	} {
		list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		st, err := rt.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: tc.f})
		got, err := collect(t, st, err, (*runtimeapi.StreamPodSandboxesResponse).GetPodSandboxes)
		if err != nil {
			t.Fatalf("StreamPodSandboxes(%v): %v", tc.f, err)
		}
		if len(got) != tc.want {
			t.Errorf("StreamPodSandboxes(%v): %d pods, want %d", tc.f, len(got), tc.want)
		}
		sameProtos(t, "pods "+tc.f.String(), list.GetItems(), got)
	}

	for _, tc := range []struct {
		f    *runtimeapi.ContainerFilter
		want int
	}{
		{nil, 3},
		{&runtimeapi.ContainerFilter{PodSandboxId: pods[0]}, 1},
		{&runtimeapi.ContainerFilter{LabelSelector: map[string]string{"app": "x"}}, 2},
		{&runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, 1},
		{&runtimeapi.ContainerFilter{Id: "nope"}, 0},
	} {
		list, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		st, err := rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: tc.f})
		got, err := collect(t, st, err, (*runtimeapi.StreamContainersResponse).GetContainers)
		if err != nil {
			t.Fatalf("StreamContainers(%v): %v", tc.f, err)
		}
		if len(got) != tc.want {
			t.Errorf("StreamContainers(%v): %d containers, want %d", tc.f, len(got), tc.want)
		}
		sameProtos(t, "containers "+tc.f.String(), list.GetContainers(), got)
	}
}

type streamTestSource struct {
	ctrs []cristats.Container
	pods []cristats.Pod
}

func (f streamTestSource) StatsContainers(context.Context) ([]cristats.Container, error) {
	return f.ctrs, nil
}
func (f streamTestSource) StatsPods(context.Context) ([]cristats.Pod, error) { return f.pods, nil }

// Stats carry read times, so a List and a Stream call are compared by the
// items they name, not by value.
func statsIDs[T any](items []T, id func(T) string) []string {
	var out []string
	for _, it := range items {
		out = append(out, id(it))
	}
	return out
}

func TestStreamStatsAndMetrics(t *testing.T) {
	ifs := func() ([]stats.InterfaceStats, error) { return []stats.InterfaceStats{{Name: "eth0", RxBytes: 1}}, nil }
	c := cristats.New(cristats.Options{
		// Containers without a cgroup: listed with timestamps, no values.
		Reader: stats.NewReaderWith(stats.ReaderOptions{V2Root: t.TempDir()}),
		Source: streamTestSource{
			ctrs: []cristats.Container{
				{ID: "c1", PodID: "p1", Labels: map[string]string{"app": "x"}},
				{ID: "c2", PodID: "p1", Labels: map[string]string{"app": "y"}},
				{ID: "c3", PodID: "p2", Labels: map[string]string{"app": "x"}},
			},
			pods: []cristats.Pod{
				{ID: "p1", Labels: map[string]string{"tier": "a"}, NetNSPath: "/run/netns/p1"},
				{ID: "p2", Labels: map[string]string{"tier": "b"}},
			},
		},
		NetworkStats:     func(string) ([]stats.InterfaceStats, error) { return ifs() },
		HostNetworkStats: ifs,
	})
	cfg := config.Default()
	rt, _ := criClients(t, New(Deps{Config: func() *config.Config { return &cfg }, Stats: StatsDeps{Collector: c}}))
	ctx := context.Background()

	ctrID := func(s *runtimeapi.ContainerStats) string { return s.GetAttributes().GetId() }
	for _, tc := range []struct {
		f    *runtimeapi.ContainerStatsFilter
		want []string
	}{
		{nil, []string{"c1", "c2", "c3"}},
		{&runtimeapi.ContainerStatsFilter{PodSandboxId: "p1"}, []string{"c1", "c2"}},
		{&runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "x"}}, []string{"c1", "c3"}},
		{&runtimeapi.ContainerStatsFilter{Id: "c2"}, []string{"c2"}},
		{&runtimeapi.ContainerStatsFilter{Id: "c9"}, nil},
	} {
		list, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		st, err := rt.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{Filter: tc.f})
		got, err := collect(t, st, err, (*runtimeapi.StreamContainerStatsResponse).GetContainerStats)
		if err != nil {
			t.Fatalf("StreamContainerStats(%v): %v", tc.f, err)
		}
		if ids := statsIDs(got, ctrID); !slices.Equal(ids, tc.want) || !slices.Equal(ids, statsIDs(list.GetStats(), ctrID)) {
			t.Errorf("container stats %v: List %v, Stream %v, want %v", tc.f, statsIDs(list.GetStats(), ctrID), ids, tc.want)
		}
		for _, s := range got {
			if s.GetCpu().GetTimestamp() == 0 || s.GetMemory().GetTimestamp() == 0 {
				t.Errorf("streamed stats of %s without timestamps: %v", ctrID(s), s)
			}
		}
	}

	podID := func(s *runtimeapi.PodSandboxStats) string { return s.GetAttributes().GetId() }
	for _, tc := range []struct {
		f    *runtimeapi.PodSandboxStatsFilter
		want []string
	}{
		{nil, []string{"p1", "p2"}},
		{&runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"tier": "b"}}, []string{"p2"}},
		{&runtimeapi.PodSandboxStatsFilter{Id: "p1"}, []string{"p1"}},
		{&runtimeapi.PodSandboxStatsFilter{Id: "p9"}, nil},
	} {
		list, err := rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		st, err := rt.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{Filter: tc.f})
		got, err := collect(t, st, err, (*runtimeapi.StreamPodSandboxStatsResponse).GetPodSandboxStats)
		if err != nil {
			t.Fatalf("StreamPodSandboxStats(%v): %v", tc.f, err)
		}
		if ids := statsIDs(got, podID); !slices.Equal(ids, tc.want) || !slices.Equal(ids, statsIDs(list.GetStats(), podID)) {
			t.Errorf("pod stats %v: List %v, Stream %v, want %v", tc.f, statsIDs(list.GetStats(), podID), ids, tc.want)
		}
	}

	// A pod's metrics are one item, its containers' metrics inside it.
	metricsOf := func(m *runtimeapi.PodSandboxMetrics) string {
		ids := []string{m.GetPodSandboxId()}
		for _, cm := range m.GetContainerMetrics() {
			ids = append(ids, cm.GetContainerId())
		}
		return strings.Join(ids, "")
	}
	list, err := rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rt.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
	got, err := collect(t, st, err, (*runtimeapi.StreamPodSandboxMetricsResponse).GetPodSandboxMetrics)
	if err != nil {
		t.Fatal(err)
	}
	if ids := statsIDs(got, metricsOf); !slices.Equal(ids, []string{"p1c1c2", "p2c3"}) || !slices.Equal(ids, statsIDs(list.GetPodMetrics(), metricsOf)) {
		t.Errorf("metrics: List %v, Stream %v", statsIDs(list.GetPodMetrics(), metricsOf), ids)
	}
	for _, m := range got {
		if len(m.GetMetrics()) == 0 {
			t.Errorf("streamed metrics of %s without network metrics", m.GetPodSandboxId())
		}
	}
}

func TestStreamStatsNotWired(t *testing.T) {
	cfg := config.Default()
	rt, _ := criClients(t, New(Deps{Config: func() *config.Config { return &cfg }}))
	ctx := context.Background()

	_, uerr := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
	st, err := rt.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{})
	_, serr := collect(t, st, err, (*runtimeapi.StreamContainerStatsResponse).GetContainerStats)
	sameCode(t, "container stats", uerr, serr, codes.Unavailable)

	_, uerr = rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
	pst, err := rt.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{})
	_, serr = collect(t, pst, err, (*runtimeapi.StreamPodSandboxStatsResponse).GetPodSandboxStats)
	sameCode(t, "pod stats", uerr, serr, codes.Unavailable)

	_, uerr = rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	mst, err := rt.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
	_, serr = collect(t, mst, err, (*runtimeapi.StreamPodSandboxMetricsResponse).GetPodSandboxMetrics)
	sameCode(t, "metrics", uerr, serr, codes.Unavailable)
}

func TestStreamImages(t *testing.T) {
	s, addr := newImageServer(t)
	_, img := criClients(t, s)
	ctx := context.Background()
	ref := addr + "/test/img:v1"
	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec(ref)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    *runtimeapi.ImageFilter
		want int
	}{
		{nil, 1},
		{&runtimeapi.ImageFilter{Image: spec(ref)}, 1},
		{&runtimeapi.ImageFilter{Image: spec("busybox")}, 0},
	} {
		list, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		st, err := img.StreamImages(ctx, &runtimeapi.StreamImagesRequest{Filter: tc.f})
		got, err := collect(t, st, err, (*runtimeapi.StreamImagesResponse).GetImages)
		if err != nil {
			t.Fatalf("StreamImages(%v): %v", tc.f, err)
		}
		if len(got) != tc.want {
			t.Errorf("StreamImages(%v): %d images, want %d", tc.f, len(got), tc.want)
		}
		sameProtos(t, "images "+tc.f.String(), list.GetImages(), got)
	}

	bad := &runtimeapi.ImageFilter{Image: spec("Bad Ref")}
	_, uerr := img.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: bad})
	st, err := img.StreamImages(ctx, &runtimeapi.StreamImagesRequest{Filter: bad})
	_, serr := collect(t, st, err, (*runtimeapi.StreamImagesResponse).GetImages)
	sameCode(t, "bad image filter", uerr, serr, codes.InvalidArgument)
	if n := streamCalls(t, "StreamImages", codes.InvalidArgument); n == 0 {
		t.Error("a failed StreamImages is not in podunit_cri_requests_total")
	}
}

// streamCalls reads podunit_cri_requests_total for a method and code.
func streamCalls(t *testing.T, method string, code codes.Code) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(requests)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["code"] == code.String() {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestSendBatches(t *testing.T) {
	mk := func(n int) []*runtimeapi.Image {
		var out []*runtimeapi.Image
		for i := range n {
			out = append(out, &runtimeapi.Image{Id: string(rune('a' + i)), Size: 1})
		}
		return out
	}
	one := proto.Size(&runtimeapi.StreamImagesResponse{Images: mk(1)})
	for _, tc := range []struct {
		n, limit int
		sizes    []int
	}{
		{0, one, nil},
		{5, one, []int{1, 1, 1, 1, 1}},
		{5, 2*one + 1, []int{2, 2, 1}},
		{5, 10 * one, []int{5}},
		// Too big for any batch: alone, never dropped.
		{3, 1, []int{1, 1, 1}},
	} {
		items := mk(tc.n)
		var sizes []int
		var sent []*runtimeapi.Image
		err := sendBatches(context.Background(), items, tc.limit, func(b []*runtimeapi.Image) error {
			if got := proto.Size(&runtimeapi.StreamImagesResponse{Images: b}); len(b) > 1 && got > tc.limit {
				t.Errorf("n=%d limit=%d: batch of %d bytes", tc.n, tc.limit, got)
			}
			sizes = append(sizes, len(b))
			sent = append(sent, b...)
			return nil
		})
		if err != nil || !slices.Equal(sizes, tc.sizes) || !slices.Equal(sent, items) {
			t.Errorf("n=%d limit=%d: batches %v (sent %d of %d), %v; want %v", tc.n, tc.limit, sizes, len(sent), tc.n, err, tc.sizes)
		}
	}

	// A client that went away: nothing more is sent.
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := sendBatches(ctx, mk(3), one, func([]*runtimeapi.Image) error {
		calls++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("after cancel: %d sends, %v", calls, err)
	}
	boom := errors.New("boom")
	if err := sendBatches(context.Background(), mk(3), one, func([]*runtimeapi.Image) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("send error: %v", err)
	}
}
