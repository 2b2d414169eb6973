package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cmdOps times one container's lifecycle calls in one pod, one container
// after the other, as critest -benchmark's container operations make them:
// CreateContainer, StartContainer, ContainerStatus (verbose), StopContainer,
// RemoveContainer. -status N reads the status N times per container (the
// kubelet reads it far more often than it starts containers).
//
//	cribench ops -endpoint E -n 20 -status 10 -out FILE
func cmdOps(args []string) (retErr error) {
	var t target
	fs := flag.NewFlagSet("ops", flag.ExitOnError)
	t.flags(fs)
	n := fs.Int("n", 20, "containers")
	reads := fs.Int("status", 10, "status reads per container")
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
	pcfg := t.podConfig("ops")
	pr, err := t.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfg})
	if err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	t.track(pr.PodSandboxId)
	samples := map[string][]float64{}
	timed := func(op string, f func() error) error {
		t0 := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		samples[op] = append(samples[op], ms(time.Since(t0)))
		return nil
	}
	for i := 0; i < *n; i++ {
		cfg := t.ctrConfig()
		cfg.Metadata.Attempt = uint32(i)
		var id string
		if err := timed("CreateContainer", func() error {
			r, err := t.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pr.PodSandboxId, Config: cfg, SandboxConfig: pcfg})
			if err == nil {
				id = r.ContainerId
			}
			return err
		}); err != nil {
			return err
		}
		if err := timed("StartContainer", func() error {
			_, err := t.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		}); err != nil {
			return err
		}
		for range *reads {
			if err := timed("StatusContainer", func() error {
				_, err := t.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
				return err
			}); err != nil {
				return err
			}
		}
		if err := timed("StopContainer", func() error {
			_, err := t.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
			return err
		}); err != nil {
			return err
		}
		if err := timed("RemoveContainer", func() error {
			_, err := t.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		}); err != nil {
			return err
		}
	}
	for _, op := range []string{"CreateContainer", "StartContainer", "StatusContainer", "StopContainer", "RemoveContainer"} {
		fmt.Printf("%-11s ops %-16s n=%d p50 %.2f ms p99 %.2f ms\n", t.Name, op, len(samples[op]),
			percentile(samples[op], 50), percentile(samples[op], 99))
	}
	return appendResult(t.Out, Result{Kind: "ops", Runtime: t.Name,
		Params: map[string]string{"n": strconv.Itoa(*n), "status": strconv.Itoa(*reads)}, Samples: samples})
}
