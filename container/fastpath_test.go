package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/oci"
	"github.com/podunit/podunit/systemd"
	"github.com/podunit/podunit/systemd/systemdtest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const fakeInitPID = 4242

// procEnv is an env whose manager reads a fake /proc, and whose fake
// systemd writes the unit's PID file on start as the runtime would.
type procEnv struct {
	*env
	proc string
}

func newProcEnv(t testing.TB) *procEnv {
	e := &procEnv{env: newEnv(t), proc: filepath.Join(t.TempDir(), "proc")}
	e.m.procRoot = e.proc
	e.sd.StartFunc = func(u *systemdtest.Unit) systemd.JobResult {
		id := idOfUnit(u.Name)
		if err := os.WriteFile(filepath.Join(e.opts.RunDir, id, "pid"), []byte(strconv.Itoa(fakeInitPID)), 0o644); err != nil {
			t.Error(err)
		}
		return systemd.JobDone
	}
	return e
}

// setProc makes /proc/<pid> describe a process in state st started at
// start, in cgroup cg ("" removes the process).
func (e *procEnv) setProc(pid int, st byte, start uint64, cg string) {
	e.t.Helper()
	dir := filepath.Join(e.proc, strconv.Itoa(pid))
	if cg == "" {
		os.RemoveAll(dir)
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (sh) %c 1 %d %d 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 1000 100", pid, st, pid, pid, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cg), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// containerCgroup is /proc/<pid>/cgroup of a container's init on a
// hybrid host, as runc leaves it.
func containerCgroup(id string) string {
	p := systemd.SlicePath("kubepods-besteffort-pod1.slice") + "/" + unitName(id) + "/container"
	return "12:memory:" + p + "\n1:name=systemd:" + p + "\n0::" + p + "\n"
}

// callsSince returns the systemd calls made after the first n.
func (e *procEnv) callsSince(n int) []string { return e.sd.Calls[n:] }

// started creates and starts a container whose init is a live process.
func (e *procEnv) started(name string) string {
	e.t.Helper()
	id := e.create("pod1", name)
	e.setProc(fakeInitPID, 'S', 1000, containerCgroup(id))
	if err := e.m.Start(ctx, id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func TestStatusOfRunningContainerNeedsNoSystemd(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	n := len(e.sd.Calls)
	for i := 0; i < 3; i++ {
		if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("status %v", st)
		}
	}
	if got := e.callsSince(n); len(got) != 0 {
		t.Errorf("status of a running container with a live init asked systemd: %q", got)
	}
}

func TestStatusFallsBackToSystemd(t *testing.T) {
	for name, tc := range map[string]struct {
		st    byte
		start uint64
		gone  bool
	}{
		"init gone":       {gone: true},
		"pid reused":      {st: 'S', start: 2000},
		"init is zombie":  {st: 'Z', start: 1000},
		"init is dead(X)": {st: 'X', start: 1000},
	} {
		t.Run(name, func(t *testing.T) {
			e := newProcEnv(t)
			id := e.started("app")
			cg := containerCgroup(id)
			if tc.gone {
				cg = ""
			}
			e.setProc(fakeInitPID, tc.st, tc.start, cg)
			n := len(e.sd.Calls)
			if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Fatalf("unit still active, status %v", st)
			}
			if got := e.callsSince(n); !contains(got, "get "+unitName(id)) {
				t.Errorf("doubtful init did not ask systemd: %q", got)
			}
			// The unit ends: systemd's answer, not the stale init, decides.
			e.exit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "3", FinishedAt: time.Now().UnixNano()})
			if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 {
				t.Errorf("after exit: %v", st)
			}
		})
	}
}

// An exit record means the init is done even when its PID looks alive.
func TestStatusExitRecordBeatsLiveProcess(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	e.exit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "9", FinishedAt: time.Now().UnixNano()})
	n := len(e.sd.Calls)
	st := e.status(id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 9 {
		t.Errorf("status %v", st)
	}
	if got := e.callsSince(n); !contains(got, "get "+unitName(id)) {
		t.Errorf("calls %q", got)
	}
}

// A PID file naming a process outside the container's cgroup (another
// PID namespace's /proc, a recycled PID) is never trusted.
func TestInitOutsideContainerCgroupIsNotTrusted(t *testing.T) {
	e := newProcEnv(t)
	id := e.create("pod1", "app")
	e.setProc(fakeInitPID, 'S', 1000, "0::/system.slice/other.service\n")
	if err := e.m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		n := len(e.sd.Calls)
		e.status(id)
		if got := e.callsSince(n); !contains(got, "get "+unitName(id)) {
			t.Fatalf("status %d trusted a foreign process: %q", i, got)
		}
	}
}

// After a podunit restart the first status asks systemd and learns the
// init; the next ones do not ask.
func TestStatusLearnsInitAfterRestart(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	m2 := e.newManager()
	m2.procRoot = e.proc
	e.m = m2
	n := len(e.sd.Calls)
	e.status(id)
	if got := e.callsSince(n); len(got) != 1 {
		t.Errorf("first status after restart: %q, want one call", got)
	}
	n = len(e.sd.Calls)
	if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("status %v", st)
	}
	if got := e.callsSince(n); len(got) != 0 {
		t.Errorf("second status after restart asked systemd: %q", got)
	}
}

// verboseInfo is what the tests read of a verbose status's info.
type verboseInfo struct {
	PID         uint32 `json:"pid"`
	ActiveState string `json:"activeState"`
	SubState    string `json:"subState"`
}

// A verbose status of a container whose init provably runs asks systemd
// nothing: the PID comes from the evidence, and no unit state is claimed.
func TestVerboseStatusOfRunningInitNeedsNoSystemd(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	n := len(e.sd.Calls)
	st, info, err := e.m.Status(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.callsSince(n); len(got) != 0 {
		t.Errorf("verbose status of a live init asked systemd: %q", got)
	}
	var v verboseInfo
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil {
		t.Fatal(err)
	}
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || v.PID != fakeInitPID || v.ActiveState != "" || v.SubState != "" {
		t.Errorf("verbose %v %+v; want RUNNING, the init's PID, no unit state", st.State, v)
	}
}

func TestVerboseStatusIsOneCall(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	u := e.sd.Units[unitName(id)]
	u.Props["MainPID"] = uint32(fakeInitPID)
	u.Props["SubState"] = "running"
	// No local proof (the init's start time changed: another process has
	// the PID): systemd is asked, once.
	e.setProc(fakeInitPID, 'S', 2000, containerCgroup(id))
	n := len(e.sd.Calls)
	st, info, err := e.m.Status(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.callsSince(n); len(got) != 1 {
		t.Errorf("verbose status calls %q, want one", got)
	}
	var v verboseInfo
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil {
		t.Fatal(err)
	}
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || v.PID != fakeInitPID || v.ActiveState != "active" || v.SubState != "running" {
		t.Errorf("verbose %v %+v", st.State, v)
	}

	// A stopped-but-loaded unit's exit comes from the same answer.
	u.ActiveState = "failed"
	u.Props["ExecMainCode"], u.Props["ExecMainStatus"] = int32(1), int32(4)
	n = len(e.sd.Calls)
	st, info, err = e.m.Status(ctx, id, true)
	if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 4 {
		t.Fatalf("verbose of failed unit: %v %v", st, err)
	}
	if got := e.callsSince(n); len(got) != 1 {
		t.Errorf("verbose status of failed unit: calls %q, want one", got)
	}
	v.PID = 0
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil || v.PID != 0 {
		t.Errorf("exited container has a pid: %d %v", v.PID, err)
	}
}

func TestVerboseStatusOfCollectedUnit(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	e.exit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "2", FinishedAt: time.Now().UnixNano()})
	st, _, err := e.m.Status(ctx, id, true)
	if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 2 {
		t.Fatalf("%v %v", st, err)
	}
}

// rootRuntime is the fake runtime with a state root, like runc's --root.
type rootRuntime struct {
	*fakeRuntime
	root string
}

func (r rootRuntime) StateDir(id string) string { return filepath.Join(r.root, id) }

func newRootEnv(t *testing.T) (*procEnv, rootRuntime) {
	e := newProcEnv(t)
	rt := rootRuntime{fakeRuntime: e.rt, root: filepath.Join(t.TempDir(), "runc")}
	if err := os.MkdirAll(rt.root, 0o700); err != nil {
		t.Fatal(err)
	}
	e.deps.Runtimes = map[string]oci.Runtime{"runc": rt}
	e.m = e.newManager()
	e.m.procRoot = e.proc
	return e, rt
}

func TestRemoveOfCollectedExitedContainer(t *testing.T) {
	e, _ := newRootEnv(t)
	id := e.started("app")
	e.exit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1", FinishedAt: time.Now().UnixNano()})
	e.status(id)
	// On v1 the OCI runtime's cgroup path below the unit stays in the
	// hierarchies systemd does not manage once the unit is gone.
	r := e.m.ctrs[id].rec
	freezer := filepath.Join(e.opts.CgroupRoot, "freezer", systemd.UnitCgroupPath(r.Slice, r.Unit))
	if err := os.MkdirAll(filepath.Join(freezer, "container"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := len(e.sd.Calls)
	if err := e.m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	got := e.callsSince(n)
	if contains(got, "stop "+unitName(id)) || contains(got, "reset-failed "+unitName(id)) {
		t.Errorf("remove of a collected unit stopped or reset it: %q", got)
	}
	if _, err := os.Stat(freezer); !os.IsNotExist(err) {
		t.Errorf("the unit's freezer cgroup is left: %v", err)
	}
	if len(e.rt.deleted) != 0 {
		t.Errorf("runtime delete ran without runtime state: %q", e.rt.deleted)
	}
	e.assertClean()
}

func TestRemoveKeepsFullPathWhenInDoubt(t *testing.T) {
	// The unit is still loaded (not collected) and the runtime still has
	// state: both get cleaned up. A stopped unit needs only a reset (its
	// collection follows); one still stopping, or a failed listing, gets
	// the kill and the stop job too.
	for _, tc := range []struct {
		state     string
		listFails bool
		stop      bool
	}{
		{state: "failed"},
		{state: "inactive"},
		{state: "deactivating", stop: true},
		{state: "failed", listFails: true, stop: true},
	} {
		t.Run(fmt.Sprintf("%s/listfails=%v", tc.state, tc.listFails), func(t *testing.T) {
			e, rt := newRootEnv(t)
			id := e.started("app")
			e.writeExit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1", FinishedAt: time.Now().UnixNano()})
			if err := os.MkdirAll(filepath.Join(rt.root, id), 0o700); err != nil {
				t.Fatal(err)
			}
			// the record settles as exited; the unit is then in tc.state
			e.sd.Units[unitName(id)].ActiveState = "failed"
			if st := e.status(id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				t.Fatalf("status %v", st.State)
			}
			e.sd.Units[unitName(id)].ActiveState = tc.state
			if tc.listFails {
				e.sd.FailOn = map[string]error{"list": errors.New("bus gone")}
			}
			n := len(e.sd.Calls)
			if err := e.m.Remove(ctx, id); err != nil {
				t.Fatal(err)
			}
			got := e.callsSince(n)
			if contains(got, "stop "+unitName(id)) != tc.stop || !contains(got, "reset-failed "+unitName(id)) {
				t.Errorf("calls %q; want a stop job: %v, a reset: true", got, tc.stop)
			}
			if len(e.rt.deleted) != 1 || e.rt.deleted[0] != id {
				t.Errorf("runtime state not deleted: %q", e.rt.deleted)
			}
			if _, ok := e.sd.Units[unitName(id)]; ok {
				t.Error("unit left")
			}
		})
	}
}

// A runtime whose root is missing gives no evidence: delete runs.
func TestRuntimeStateGone(t *testing.T) {
	root := filepath.Join(t.TempDir(), "runc")
	rt := rootRuntime{fakeRuntime: &fakeRuntime{}, root: root}
	id := newID()
	if runtimeStateGone(rt, id) {
		t.Error("missing root counted as evidence")
	}
	if err := os.MkdirAll(filepath.Join(root, id), 0o700); err != nil {
		t.Fatal(err)
	}
	if runtimeStateGone(rt, id) {
		t.Error("present state counted as gone")
	}
	if !runtimeStateGone(rt, newID()) {
		t.Error("absent state under an existing root not seen as gone")
	}
	if runtimeStateGone(&fakeRuntime{}, id) {
		t.Error("runtime without a state dir counted as evidence")
	}
	cli := oci.NewRunc(oci.CLIConfig{Binary: "runc", Root: root})
	if got := cli.StateDir(id); got != filepath.Join(root, id) {
		t.Errorf("runc state dir %q", got)
	}
	// Its parent exists and has no x: only the ID check keeps it out.
	if runtimeStateGone(cli, "../x") {
		t.Error("a bad id counted as gone")
	}
}

func TestInContainerCgroup(t *testing.T) {
	unit := unitName("ab12")
	for listing, want := range map[string]bool{
		"0::/a.slice/" + unit + "/container\n":                             true,
		"12:memory:/a.slice/" + unit + "/container\n0::/\n":                true,
		"0::/a.slice/" + unit + "\n":                                       false,
		"0::/a.slice/" + unit + "/.control\n":                              false,
		"0::/a.slice/podunit-ctr-ab123.service/container\n":                false,
		"1:name=systemd:/a.slice/x" + unit + "/container\n":                false,
		"0::/system.slice/other.service\n1:name=systemd:/" + unit + "/x\n": false,
	} {
		if got := inContainerCgroup([]byte(listing), unit); got != want {
			t.Errorf("%q: %v, want %v", listing, got, want)
		}
	}
}

// A verbose status names the properties it reads: every property of a
// service is one large D-Bus answer that systemd and podunit spend
// milliseconds on (issue 20).
func TestVerboseStatusReadsOnlyWhatItUses(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	u := e.sd.Units[unitName(id)]
	u.Props["MainPID"] = uint32(fakeInitPID)
	u.Props["SubState"] = "running"
	u.Props["ExecMainCode"], u.Props["ExecMainStatus"] = int32(1), int32(3)
	e.setProc(fakeInitPID, 'S', 2000, containerCgroup(id)) // no local proof: ask systemd
	n := len(e.sd.PropertyReads)
	if _, _, err := e.m.Status(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	reads := e.sd.PropertyReads[n:]
	if len(reads) != 1 {
		t.Fatalf("property reads %q, want one", reads)
	}
	for _, want := range []string{"ActiveState", "SubState", "MainPID", "ExecMainCode", "ExecMainStatus", "Result"} {
		if !slices.Contains(reads[0], want) {
			t.Errorf("verbose status read %q: no %s", reads[0], want)
		}
	}

	// The exit of a failed but loaded unit comes from those names alone.
	u.ActiveState = "failed"
	st, _, err := e.m.Status(ctx, id, true)
	if err != nil || st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 3 {
		t.Fatalf("verbose of failed unit: %v %v", st, err)
	}
	for _, r := range e.sd.PropertyReads[n:] {
		if len(r) == 0 {
			t.Errorf("a status read asked systemd for every property: %q", e.sd.PropertyReads[n:])
		}
	}
}

// BenchmarkVerboseStatus is critest's StatusContainer (verbose) of a
// running container, on fakes: podunit's own cost without gRPC.
func BenchmarkVerboseStatus(b *testing.B) {
	e := newProcEnv(b)
	id := e.started("app")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := e.m.Status(ctx, id, true); err != nil {
			b.Fatal(err)
		}
	}
}

// The verbose info carries the bundle's spec as written, inside one valid
// JSON object; a config.json that is not a JSON object is left out.
func TestVerboseInfoRuntimeSpec(t *testing.T) {
	e := newProcEnv(t)
	id := e.started("app")
	read := func() map[string]json.RawMessage {
		t.Helper()
		_, info, err := e.m.Status(ctx, id, true)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal([]byte(info["info"]), &v); err != nil {
			t.Fatalf("info is not JSON: %v\n%s", err, info["info"])
		}
		return v
	}
	v := read()
	var spec struct{ OCIVersion string }
	if err := json.Unmarshal(v["runtimeSpec"], &spec); err != nil || spec.OCIVersion == "" {
		t.Fatalf("runtimeSpec %s: %v", v["runtimeSpec"], err)
	}
	if string(v["id"]) != `"`+id+`"` || v["pid"] == nil {
		t.Errorf("info %v", v)
	}
	if err := os.WriteFile(filepath.Join(e.m.bundleDir(id), "config.json"), []byte(`{"ociVersion": "1.`), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := read(); v["runtimeSpec"] != nil {
		t.Errorf("a torn config.json was shown: %s", v["runtimeSpec"])
	}
}

// With systemd's directory of transient files at hand, Remove asks systemd
// nothing about a unit whose file is gone (systemd freed it); a file there,
// or no such directory, sends it to the listing as before.
func TestRemoveSkipsListingOfFreedUnit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noDir    bool
		unitFile bool
		wantList bool
	}{
		{name: "freed"},
		{name: "still-loaded", unitFile: true, wantList: true},
		{name: "no-directory", noDir: true, wantList: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newRootEnv(t)
			dir := filepath.Join(t.TempDir(), "transient")
			if !tc.noDir {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			e.transientDir = dir
			e.m = e.newManager()
			e.m.procRoot = e.proc
			id := e.started("app")
			e.exit(id, &exitrec.Record{ServiceResult: "exit-code", ExitCode: "exited", ExitStatus: "1", FinishedAt: time.Now().UnixNano()})
			e.status(id)
			if tc.unitFile {
				if err := os.WriteFile(filepath.Join(dir, unitName(id)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n := len(e.sd.Calls)
			if err := e.m.Remove(ctx, id); err != nil {
				t.Fatal(err)
			}
			got := e.callsSince(n)
			listed := false
			for _, c := range got {
				listed = listed || strings.HasPrefix(c, "list")
			}
			if listed != tc.wantList {
				t.Errorf("calls %q: listing %v, want %v", got, listed, tc.wantList)
			}
			e.assertClean()
		})
	}
}
