package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/podunit/podunit/idindex"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func init() {
	register("ps", command{summary: "list pods and their containers with units, state and PIDs", run: runPs})
	register("inspect", command{summary: "show one pod or container: unit, slice, cgroup, bundle, logs", run: runInspect})
	register("logs", command{summary: "show a container's journal (podunit logs ID [-f])", run: runLogs})
	register("gc", command{summary: "run the garbage collectors once (--dry-run to only report)", run: runGC})
}

// cliFlags locate the daemon for operator commands.
type cliFlags struct {
	configFlags
}

func newCLIFlags(name, usage string) (*flag.FlagSet, *cliFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var cf cliFlags
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: podunit %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs, &cf
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "podunit: "+format+"\n", args...)
	return 1
}

func (cf *cliFlags) dial() (runtimeapi.RuntimeServiceClient, func(), error) {
	c, code := cf.load()
	if c == nil {
		return nil, nil, fmt.Errorf("configuration error (exit %d)", code)
	}
	conn, err := grpc.NewClient("unix://"+c.Server.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", c.Server.Socket, err)
	}
	return runtimeapi.NewRuntimeServiceClient(conn), func() { conn.Close() }, nil
}

type psContainer struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	State    string `json:"state"`
	Unit     string `json:"unit,omitempty"`
	MainPID  string `json:"mainPID,omitempty"`
	Image    string `json:"image"`
	Created  string `json:"created"`
	Attempt  uint32 `json:"attempt"`
	ExitCode int32  `json:"exitCode"`
}

type psPod struct {
	ID         string        `json:"id"`
	Namespace  string        `json:"namespace"`
	Name       string        `json:"name"`
	State      string        `json:"state"`
	Slice      string        `json:"slice,omitempty"`
	Created    string        `json:"created"`
	Containers []psContainer `json:"containers"`
}

func runPs(args []string) int {
	fs, cf := newCLIFlags("ps", "ps [--json]")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	rt, closeFn, err := cf.dial()
	if err != nil {
		return fail("%v", err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := collectPods(ctx, rt)
	if err != nil {
		return fail("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(pods); err != nil {
			return fail("%v", err)
		}
		return 0
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD/CONTAINER\tID\tSTATE\tUNIT\tPID\tUPTIME\tIMAGE")
	for _, p := range pods {
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t\t%s\t\n", p.Namespace, p.Name, short(p.ID), p.State, p.Slice, uptime(p.Created))
		for _, c := range p.Containers {
			up := ""
			if c.State == "RUNNING" {
				up = uptime(c.Created)
			}
			fmt.Fprintf(w, "  └ %s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, short(c.ID), c.State, c.Unit, c.MainPID, up, c.Image)
		}
	}
	w.Flush()
	return 0
}

func collectPods(ctx context.Context, rt runtimeapi.RuntimeServiceClient) ([]psPod, error) {
	pr, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	cr, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	byPod := map[string][]psContainer{}
	for _, c := range cr.Containers {
		pc := psContainer{ID: c.Id, Name: c.GetMetadata().GetName(), Attempt: c.GetMetadata().GetAttempt(),
			State: strings.TrimPrefix(c.State.String(), "CONTAINER_"), Image: c.GetImage().GetImage(),
			Created: time.Unix(0, c.CreatedAt).UTC().Format(time.RFC3339)}
		if st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true}); err == nil {
			pc.Unit = st.Info["unit"]
			pc.MainPID = st.Info["mainPID"]
			pc.ExitCode = st.GetStatus().GetExitCode()
			if s := st.GetStatus().GetStartedAt(); s > 0 {
				pc.Created = time.Unix(0, s).UTC().Format(time.RFC3339)
			}
		}
		byPod[c.PodSandboxId] = append(byPod[c.PodSandboxId], pc)
	}
	var out []psPod
	for _, p := range pr.Items {
		pp := psPod{ID: p.Id, Namespace: p.GetMetadata().GetNamespace(), Name: p.GetMetadata().GetName(),
			State: strings.TrimPrefix(p.State.String(), "SANDBOX_"), Created: time.Unix(0, p.CreatedAt).UTC().Format(time.RFC3339),
			Containers: byPod[p.Id]}
		if st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Id, Verbose: true}); err == nil {
			pp.Slice = st.Info["slice"]
		}
		sort.Slice(pp.Containers, func(i, j int) bool { return pp.Containers[i].Name < pp.Containers[j].Name })
		out = append(out, pp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out, nil
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func uptime(rfc string) string {
	t, err := time.Parse(time.RFC3339, rfc)
	if err != nil {
		return ""
	}
	return time.Since(t).Round(time.Second).String()
}

// resolveID expands an ID or ID prefix to exactly one pod or container,
// by the rule the CRI RPCs apply (package idindex) over both kinds at
// once: pod and container IDs are drawn from the same space.
func resolveID(ctx context.Context, rt runtimeapi.RuntimeServiceClient, ref string) (kind, id string, err error) {
	kinds := map[string]string{}
	pr, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return "", "", err
	}
	for _, p := range pr.Items {
		kinds[p.Id] = "pod"
	}
	cr, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return "", "", err
	}
	for _, c := range cr.Containers {
		kinds[c.Id] = "container"
	}
	id, err = idindex.Resolve("pod or container", ref, kinds)
	if err != nil {
		return "", "", err
	}
	return kinds[id], id, nil
}

func runInspect(args []string) int {
	fs, cf := newCLIFlags("inspect", "inspect ID-PREFIX")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return fail("inspect needs exactly one ID prefix")
	}
	rt, closeFn, err := cf.dial()
	if err != nil {
		return fail("%v", err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kind, id, err := resolveID(ctx, rt, fs.Arg(0))
	if err != nil {
		return fail("%v", err)
	}
	var out any
	if kind == "pod" {
		st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		if err != nil {
			return fail("%v", err)
		}
		out = map[string]any{"kind": kind, "status": st.Status, "info": decodeInfo(st.Info)}
	} else {
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
		if err != nil {
			return fail("%v", err)
		}
		info := decodeInfo(st.Info)
		info["journalMatch"] = "CONTAINER_ID=" + id
		out = map[string]any{"kind": kind, "status": st.Status, "info": info}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fail("%v", err)
	}
	return 0
}

// decodeInfo turns verbose info values that hold JSON into objects.
func decodeInfo(in map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range in {
		var j any
		if (strings.HasPrefix(v, "{") || strings.HasPrefix(v, "[")) && json.Unmarshal([]byte(v), &j) == nil {
			out[k] = j
		} else {
			out[k] = v
		}
	}
	return out
}

func runLogs(args []string) int {
	fs, cf := newCLIFlags("logs", "logs ID-PREFIX [-f] [-n N]")
	follow := fs.Bool("f", false, "follow")
	lines := fs.Int("n", -1, "show only the last N lines")
	// Flags may come after the ID (podunit logs abc -f).
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return flagExit(err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		return fail("logs needs exactly one ID prefix")
	}
	rt, closeFn, err := cf.dial()
	if err != nil {
		return fail("%v", err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	kind, id, err := resolveID(ctx, rt, pos[0])
	cancel()
	if err != nil {
		return fail("%v", err)
	}
	jargs := []string{"--no-pager", "-o", "short-precise"}
	if kind == "pod" {
		jargs = append(jargs, "POD_UID="+podUID(rt, id))
	} else {
		jargs = append(jargs, "CONTAINER_ID="+id)
	}
	if *follow {
		jargs = append(jargs, "-f")
	}
	if *lines >= 0 {
		jargs = append(jargs, "-n", fmt.Sprint(*lines))
	}
	cmd := exec.Command("journalctl", jargs...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fail("journalctl: %v", err)
	}
	return 0
}

func podUID(rt runtimeapi.RuntimeServiceClient, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return ""
	}
	return st.GetStatus().GetMetadata().GetUid()
}

func runGC(args []string) int {
	fs, cf := newCLIFlags("gc", "gc [--dry-run]")
	dry := fs.Bool("dry-run", false, "only report what would be removed")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	c, code := cf.load()
	if c == nil {
		return code
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", adminSocket(c.Paths.RunDir))
	}}, Timeout: 5 * time.Minute}
	resp, err := hc.Post(fmt.Sprintf("http://podunit/gc?dry_run=%t", *dry), "application/json", nil)
	if err != nil {
		return fail("reach the podunit daemon's admin socket: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fail("gc: %s", strings.TrimSpace(string(body)))
	}
	var results []struct {
		Collector string
		Removed   []string
		Error     string
	}
	if err := json.Unmarshal(body, &results); err != nil {
		return fail("gc: bad answer: %v", err)
	}
	verb := "removed"
	if *dry {
		verb = "would remove"
	}
	failed := false
	for _, r := range results {
		for _, it := range r.Removed {
			fmt.Printf("%s: %s %s\n", r.Collector, verb, it)
		}
		if r.Error != "" {
			failed = true
			fmt.Fprintf(os.Stderr, "%s: error: %s\n", r.Collector, r.Error)
		}
	}
	if failed {
		return 1
	}
	return 0
}
