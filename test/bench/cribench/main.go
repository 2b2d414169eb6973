// Command cribench measures a CRI runtime from the outside, through its CRI
// socket only, so that podunit and containerd are measured by the same code:
//
//	cribench startlat -endpoint E -n 50 -parallel 1 -out FILE
//	    pod + container start to RUNNING: RunPodSandbox, CreateContainer,
//	    StartContainer, then ContainerStatus until CONTAINER_RUNNING. With
//	    -parallel P the samples run in bursts of P started together.
//	cribench ops -endpoint E -n 20 -status 10 -out FILE
//	    one container's create, start, verbose status, stop and remove,
//	    sequential, in one pod (ops.go).
//	cribench runp -endpoint E -n 50 -out FILE
//	    RunPodSandbox latency, sequential, pods kept until the end.
//	cribench density -endpoint E -per-pod 1 -counts 1,50,100 -harness H -pid1 P -daemon NAME -out FILE
//	    per-running-container host overhead with pods of -per-pod containers,
//	    at each count of pods (see procs.go).
//	cribench scale -endpoint E -pods 500 -per-pod 2 -churn 10000 -harness H -pid1 P -daemon NAME -unit U -out FILE
//	    N running containers, daemon-reloads while they run, removal, churn
//	    cycles; PID 1's cost, limits kept, leaks (scale.go).
//	cribench cpuwatch -harness NAME -label L -- COMMAND...
//	    CPU seconds per process name of the harness while COMMAND runs.
//	cribench report -results DIR -out docs/benchmarks.md
//	    renders every result of a `make bench` run (see report.go).
//
// Every pod gets the CNI network (the harness' conflist), cgroup parent
// /benchmark.slice, the namespaces a kubelet asks for by default (PID
// namespace per container) and one busybox container running `sleep` (density
// and scale: -per-pod of them). Pods made by a command are stopped and
// removed before it exits, also when it fails.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SleepArg marks the containers' own processes: `sleep 86399` is what every
// benchmark container runs, and nothing else on the host runs it.
const SleepArg = "86399"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cribench startlat|ops|runp|density|scale|cpuwatch|idle|report [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "startlat":
		err = cmdStartLat(os.Args[2:])
	case "runp":
		err = cmdRunp(os.Args[2:])
	case "ops":
		err = cmdOps(os.Args[2:])
	case "density":
		err = cmdDensity(os.Args[2:])
	case "scale":
		err = cmdScale(os.Args[2:])
	case "cpuwatch":
		err = cmdCPUWatch(os.Args[2:])
	case "idle":
		err = cmdIdle(os.Args[2:])
	case "report":
		err = cmdReport(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cribench:", err)
		os.Exit(1)
	}
}

// common flags of the CRI-driving commands
type target struct {
	Endpoint string
	Name     string
	Image    string
	LogDir   string
	Out      string

	rt  runtimeapi.RuntimeServiceClient
	img runtimeapi.ImageServiceClient

	mu   sync.Mutex
	pods []string
}

func (t *target) flags(fs *flag.FlagSet) {
	fs.StringVar(&t.Endpoint, "endpoint", "", "CRI endpoint (unix:///path)")
	fs.StringVar(&t.Name, "name", "", "runtime name recorded in the result (podunit, containerd)")
	fs.StringVar(&t.Image, "image", "registry.k8s.io/e2e-test-images/busybox:1.29-2", "container image")
	fs.StringVar(&t.LogDir, "log-dir", "/var/log/pods", "root of the pods' log directories (as the runtime sees it)")
	fs.StringVar(&t.Out, "out", "", "result file (JSON); appended to")
}

func (t *target) connect(ctx context.Context) error {
	if t.Endpoint == "" || t.Name == "" || t.Out == "" {
		return errors.New("-endpoint, -name and -out are required")
	}
	conn, err := grpc.NewClient(t.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	t.rt = runtimeapi.NewRuntimeServiceClient(conn)
	t.img = runtimeapi.NewImageServiceClient(conn)
	if _, err := t.rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return fmt.Errorf("%s: %w", t.Endpoint, err)
	}
	st, err := t.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: t.Image}})
	if err != nil {
		return err
	}
	if st.Image == nil {
		if _, err := t.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: t.Image}}); err != nil {
			return fmt.Errorf("pull %s: %w", t.Image, err)
		}
	}
	return nil
}

var seq struct {
	sync.Mutex
	n int
}

func (t *target) podConfig(kind string) *runtimeapi.PodSandboxConfig {
	seq.Lock()
	seq.n++
	n := seq.n
	seq.Unlock()
	uid := fmt.Sprintf("bench-%s-%s-%d-%d", t.Name, kind, os.Getpid(), n)
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("%s-%d", kind, n), Namespace: "bench", Uid: uid},
		Hostname:     fmt.Sprintf("%s-%d", kind, n),
		LogDirectory: t.LogDir + "/bench_" + uid,
		// namespaces as a kubelet asks for a pod without
		// shareProcessNamespace: pod network and IPC, a PID namespace per
		// container
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/benchmark.slice",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

func (t *target) ctrConfig() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
		Image:    &runtimeapi.ImageSpec{Image: t.Image},
		Command:  []string{"sleep", SleepArg},
		LogPath:  "sleep/0.log",
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
}

// sleepConfig is the i-th container of a pod of several: ctrConfig named
// sleep-i.
func (t *target) sleepConfig(i int) *runtimeapi.ContainerConfig {
	c := t.ctrConfig()
	name := fmt.Sprintf("sleep-%d", i)
	c.Metadata.Name = name
	c.LogPath = name + "/0.log"
	return c
}

// startTimes of one pod + container start, in milliseconds
type startTimes struct {
	Total, Runp, Create, Start float64
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// startOne runs a pod with one container and waits for CONTAINER_RUNNING.
func (t *target) startOne(ctx context.Context) (startTimes, error) {
	var st startTimes
	pcfg := t.podConfig("start")
	t0 := time.Now()
	pr, err := t.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfg})
	if err != nil {
		return st, fmt.Errorf("RunPodSandbox: %w", err)
	}
	t1 := time.Now()
	t.track(pr.PodSandboxId)
	cr, err := t.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pr.PodSandboxId, Config: t.ctrConfig(), SandboxConfig: pcfg})
	if err != nil {
		return st, fmt.Errorf("CreateContainer: %w", err)
	}
	t2 := time.Now()
	if _, err := t.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		return st, fmt.Errorf("StartContainer: %w", err)
	}
	t3 := time.Now()
	for {
		s, err := t.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cr.ContainerId})
		if err != nil {
			return st, fmt.Errorf("ContainerStatus: %w", err)
		}
		if s.Status.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			break
		}
		if s.Status.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return st, fmt.Errorf("container %s exited: %s %s", cr.ContainerId, s.Status.GetReason(), s.Status.GetMessage())
		}
		if time.Since(t0) > 60*time.Second {
			return st, fmt.Errorf("container %s not running after 60s (%v)", cr.ContainerId, s.Status.GetState())
		}
		time.Sleep(time.Millisecond)
	}
	end := time.Now()
	return startTimes{Total: ms(end.Sub(t0)), Runp: ms(t1.Sub(t0)), Create: ms(t2.Sub(t1)), Start: ms(t3.Sub(t2))}, nil
}

// opTimes collects per-call latencies from many goroutines; a nil *opTimes
// keeps none.
type opTimes struct {
	mu sync.Mutex
	m  map[string][]float64
}

func (o *opTimes) timed(op string, f func() error) error {
	t0 := time.Now()
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if o == nil {
		return nil
	}
	o.mu.Lock()
	o.m[op] = append(o.m[op], ms(time.Since(t0)))
	o.mu.Unlock()
	return nil
}

// startPod runs one pod (named after kind) with k containers, the i-th
// made by ctr, and waits for all to run; o (may be nil) gets each call's
// latency. The scale and density figures start their pods here.
func (t *target) startPod(ctx context.Context, kind string, k int, ctr func(i int) *runtimeapi.ContainerConfig, o *opTimes) ([]string, error) {
	pcfg := t.podConfig(kind)
	var pod string
	if err := o.timed("RunPodSandbox", func() error {
		r, err := t.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfg})
		if err == nil {
			pod = r.PodSandboxId
			t.track(pod)
		}
		return err
	}); err != nil {
		return nil, err
	}
	var ids []string
	for i := range k {
		var id string
		if err := o.timed("CreateContainer", func() error {
			r, err := t.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctr(i), SandboxConfig: pcfg})
			if err == nil {
				id = r.ContainerId
			}
			return err
		}); err != nil {
			return nil, err
		}
		if err := o.timed("StartContainer", func() error {
			_, err := t.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		}); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if err := t.waitRunning(ctx, id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func (t *target) waitRunning(ctx context.Context, id string) error {
	t0 := time.Now()
	for {
		s, err := t.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return fmt.Errorf("ContainerStatus: %w", err)
		}
		switch s.Status.GetState() {
		case runtimeapi.ContainerState_CONTAINER_RUNNING:
			return nil
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			return fmt.Errorf("container %s exited: %s %s", id, s.Status.GetReason(), s.Status.GetMessage())
		}
		if time.Since(t0) > 60*time.Second {
			return fmt.Errorf("container %s not running after 60s", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (t *target) track(id string) {
	t.mu.Lock()
	t.pods = append(t.pods, id)
	t.mu.Unlock()
}

// cleanup stops and removes every pod this process made, four at a time.
func (t *target) cleanup() error {
	t.mu.Lock()
	pods := t.pods
	t.pods = nil
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, 4)
	)
	for _, id := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer func() { <-sem; wg.Done() }()
			_, err := t.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			if err == nil {
				_, err = t.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("remove pod %s: %w", id, err)
				}
				mu.Unlock()
			}
		}(id)
	}
	wg.Wait()
	return first
}

// Result is one line of a result file.
type Result struct {
	Kind    string               `json:"kind"`
	Runtime string               `json:"runtime"`
	Time    string               `json:"time"`
	Params  map[string]string    `json:"params,omitempty"`
	Samples map[string][]float64 `json:"samples,omitempty"`
	Density []DensityPoint       `json:"density,omitempty"`
	Scale   *ScaleResult         `json:"scale,omitempty"`
}

func appendResult(path string, r Result) error {
	r.Time = time.Now().UTC().Format(time.RFC3339)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func cmdStartLat(args []string) (retErr error) {
	var t target
	fs := flag.NewFlagSet("startlat", flag.ExitOnError)
	t.flags(fs)
	n := fs.Int("n", 50, "samples")
	par := fs.Int("parallel", 1, "pods started together (a burst); bursts run one after the other")
	warm := fs.Int("warmup", 2, "untimed pods first (image and pause image in place, caches warm)")
	phased := fs.Bool("phased", false, "bursts by call: each burst's pods run one after the other, then all its "+
		"CreateContainer calls at once, then all its StartContainer calls at once (every runtime's calls meet the same "+
		"number of their own kind in flight); total is StartContainer to RUNNING")
	fs.Parse(args)
	ctx := context.Background()
	if err := t.connect(ctx); err != nil {
		return err
	}
	defer func() {
		if err := t.cleanup(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	for i := 0; i < *warm; i++ {
		if _, err := t.startOne(ctx); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := t.cleanup(); err != nil {
		return err
	}
	samples := map[string][]float64{}
	for done := 0; done < *n; {
		burst := min(*par, *n-done)
		res := make([]startTimes, burst)
		var err error
		if *phased {
			res, err = t.startPhased(ctx, burst)
		} else {
			err = together(burst, func(i int) (err error) {
				res[i], err = t.startOne(ctx)
				return err
			})
		}
		if err != nil {
			return err
		}
		for _, r := range res {
			samples["total"] = append(samples["total"], r.Total)
			samples["RunPodSandbox"] = append(samples["RunPodSandbox"], r.Runp)
			samples["CreateContainer"] = append(samples["CreateContainer"], r.Create)
			samples["StartContainer"] = append(samples["StartContainer"], r.Start)
		}
		done += burst
		// bursts measure concurrent starts, not a growing pile of pods
		if *par > 1 {
			if err := t.cleanup(); err != nil {
				return err
			}
		}
	}
	params := map[string]string{"n": strconv.Itoa(*n), "parallel": strconv.Itoa(*par)}
	if *phased {
		params["phased"] = "1"
	}
	fmt.Printf("%-11s startlat parallel=%d phased=%v n=%d total p50 %.1f ms p99 %.1f ms\n", t.Name, *par, *phased, *n,
		percentile(samples["total"], 50), percentile(samples["total"], 99))
	return appendResult(t.Out, Result{Kind: "startlat", Runtime: t.Name, Params: params, Samples: samples})
}

// startPhased is one burst of startlat -phased: k pods run one after the
// other, then their k CreateContainer calls at once, then their k
// StartContainer calls at once. Total is from the StartContainer call to
// RUNNING.
func (t *target) startPhased(ctx context.Context, k int) ([]startTimes, error) {
	res := make([]startTimes, k)
	pods := make([]string, k)
	pcfgs := make([]*runtimeapi.PodSandboxConfig, k)
	for i := range k {
		pcfgs[i] = t.podConfig("start")
		t0 := time.Now()
		pr, err := t.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfgs[i]})
		if err != nil {
			return nil, fmt.Errorf("RunPodSandbox: %w", err)
		}
		res[i].Runp = ms(time.Since(t0))
		t.track(pr.PodSandboxId)
		pods[i] = pr.PodSandboxId
	}
	ctrs := make([]string, k)
	err := together(k, func(i int) error {
		t0 := time.Now()
		cr, err := t.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: pods[i], Config: t.ctrConfig(), SandboxConfig: pcfgs[i]})
		if err != nil {
			return fmt.Errorf("CreateContainer: %w", err)
		}
		res[i].Create = ms(time.Since(t0))
		ctrs[i] = cr.ContainerId
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = together(k, func(i int) error {
		t0 := time.Now()
		if _, err := t.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctrs[i]}); err != nil {
			return fmt.Errorf("StartContainer: %w", err)
		}
		res[i].Start = ms(time.Since(t0))
		if err := t.waitRunning(ctx, ctrs[i]); err != nil {
			return err
		}
		res[i].Total = ms(time.Since(t0))
		return nil
	})
	return res, err
}

// together runs f(0) … f(k-1) in goroutines released at once.
func together(k int, f func(i int) error) error {
	errs := make([]error, k)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			errs[i] = f(i)
		}()
	}
	close(gate)
	wg.Wait()
	return errors.Join(errs...)
}

func cmdRunp(args []string) (retErr error) {
	var t target
	fs := flag.NewFlagSet("runp", flag.ExitOnError)
	t.flags(fs)
	n := fs.Int("n", 50, "pods")
	fs.Parse(args)
	ctx := context.Background()
	if err := t.connect(ctx); err != nil {
		return err
	}
	defer func() {
		if err := t.cleanup(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	// one untimed pod: the pause image (containerd) and caches in place
	warm, err := t.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: t.podConfig("warm")})
	if err != nil {
		return fmt.Errorf("warm-up RunPodSandbox: %w", err)
	}
	t.track(warm.PodSandboxId)
	var samples []float64
	for range *n {
		t0 := time.Now()
		r, err := t.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: t.podConfig("runp")})
		if err != nil {
			return fmt.Errorf("RunPodSandbox: %w", err)
		}
		samples = append(samples, ms(time.Since(t0)))
		t.track(r.PodSandboxId)
	}
	fmt.Printf("%-11s runp n=%d p50 %.1f ms p99 %.1f ms\n", t.Name, *n, percentile(samples, 50), percentile(samples, 99))
	return appendResult(t.Out, Result{Kind: "runp", Runtime: t.Name,
		Params: map[string]string{"n": strconv.Itoa(*n)}, Samples: map[string][]float64{"RunPodSandbox": samples}})
}

// percentile by nearest rank; p in (0,100].
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, errors.New("counts must increase")
		}
		out = append(out, n)
	}
	return out, nil
}
