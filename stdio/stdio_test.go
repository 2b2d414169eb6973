package stdio

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/fdstore"
)

func TestMain(m *testing.M) {
	// Re-executed as the wrapper by TestWrapperSeparatesStreams.
	if len(os.Args) > 1 && os.Args[1] == "_stdio" {
		os.Exit(Main(os.Args[2:]))
	}
	if len(os.Args) > 4 && os.Args[1] == "_fakeruntime" {
		os.Exit(fakeRuntimeCreate(os.Args[2:]))
	}
	// The test plays systemd for the wrappers it runs: what they leave
	// behind is re-parented to it, their parent, as to systemd in a unit.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs([]string{"--unit", "u.service", "--", "runc", "--root", "/r", "run"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Identifier != "u.service" || o.Socket != DefaultSocket || strings.Join(o.Argv, " ") != "runc --root /r run" {
		t.Errorf("got %+v", o)
	}
	for _, bad := range [][]string{{"--", "runc"}, {"--unit", "u"}, {"--unit", "a\nb", "--", "x"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) accepted", bad)
		}
	}
}

// fakeJournal accepts stream connections and returns, per connection, the
// header and the lines that followed.
func fakeJournal(t *testing.T) (string, <-chan []string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "stdout")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan []string, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var lines []string
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					lines = append(lines, sc.Text())
				}
				ch <- lines
			}()
		}
	}()
	return sock, ch
}

func TestWrapperSeparatesStreams(t *testing.T) {
	sock, ch := fakeJournal(t)
	cmd := exec.Command(os.Args[0], "_stdio", "--unit", "podunit-ctr-x.service", "--identifier", "web",
		"--socket", sock, "--", "/bin/sh", "-c", "echo out1; echo err1 >&2; echo out2")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("wrapper: %v, output on inherited fds: %q", err, out)
	}
	got := map[string][]string{}
	for i := 0; i < 2; i++ {
		select {
		case lines := <-ch:
			if len(lines) < 7 {
				t.Fatalf("short stream %q", lines)
			}
			got[lines[2]] = lines
		case <-time.After(5 * time.Second):
			t.Fatal("no stream")
		}
	}
	wantOut := []string{"web", "podunit-ctr-x.service", "6", "0", "0", "0", "0", "out1", "out2"}
	wantErr := []string{"web", "podunit-ctr-x.service", "3", "0", "0", "0", "0", "err1"}
	if strings.Join(got["6"], "|") != strings.Join(wantOut, "|") {
		t.Errorf("stdout stream %q, want %q", got["6"], wantOut)
	}
	if strings.Join(got["3"], "|") != strings.Join(wantErr, "|") {
		t.Errorf("stderr stream %q, want %q", got["3"], wantErr)
	}
}

func TestStreamIsBlocking(t *testing.T) {
	sock, _ := fakeJournal(t)
	fd, err := Connect(sock, "i", "u", 6)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		t.Error("journal stream is non-blocking; the container would see EAGAIN")
	}
}

func TestFallbackWithoutJournal(t *testing.T) {
	cmd := exec.Command(os.Args[0], "_stdio", "--unit", "u.service",
		"--socket", filepath.Join(t.TempDir(), "missing"), "--", "/bin/sh", "-c", "echo still-here")
	cmd.Stderr = io.Discard
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "still-here" {
		t.Errorf("fallback: %v %q", err, out)
	}
}

func TestMissingCommand(t *testing.T) {
	if rc := Main([]string{"--unit", "u", "--", "/nonexistent/runc"}); rc != 127 {
		t.Errorf("rc = %d, want 127", rc)
	}
}

func TestStdinFIFONeverEOF(t *testing.T) {
	sock, ch := fakeJournal(t)
	fifo := filepath.Join(t.TempDir(), "stdin")
	// read one line from stdin, then check that a second read would block
	// (no EOF) by timing it out.
	cmd := exec.Command(os.Args[0], "_stdio", "--unit", "u.service", "--socket", sock, "--stdin-fifo", fifo, "--",
		"/bin/sh", "-c", "read a; echo got:$a; if timeout 1 sh -c 'read b'; then echo eof-or-data; else echo blocked; fi")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(fifo); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("hello\n")
	w.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := 0; i < 2; i++ {
		select {
		case lines := <-ch:
			if lines[2] == "6" {
				out = lines[7:]
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no stream")
		}
	}
	if strings.Join(out, "|") != "got:hello|blocked" {
		t.Errorf("stdout %q: stdin must stay open after the writer leaves", out)
	}
}

func TestEnterLeaf(t *testing.T) {
	// v1/hybrid root: nothing to do, nothing created
	v1 := t.TempDir()
	if err := EnterLeaf(v1, "runtime"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(v1); len(ents) != 0 {
		t.Errorf("v1: created %v", ents)
	}
	// a fake v2 root mirroring our own cgroup path: the pid lands in the leaf
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		t.Fatalf("no v2 line in %q", b)
	}
	v2 := t.TempDir()
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("memory\n"), 0o644)
	if err := os.MkdirAll(filepath.Join(v2, own), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := EnterLeaf(v2, "runtime"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(v2, own, "runtime", "cgroup.procs")); string(got) != "0" {
		t.Errorf("cgroup.procs = %q", got)
	}
	if _, err := ParseArgs([]string{"--unit", "u", "--cgroup-leaf", "../x", "--", "runc"}); err == nil {
		t.Error("leaf with a slash accepted")
	}
}

// A "runtime" that leaves its long-lived process behind an intermediate
// that exits later, like crun: the wrapper names it the main process only
// once that process is systemd's child (here the test's: it is the
// subreaper the orphans go to).
func TestAdoptWaitsForInitToBeSystemdsChild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	sd := fakeSystemd(t)
	script := `sh -c 'sleep 30 & echo $! > ` + pidFile + `; sleep 0.3' & exit 0`
	if rc := runRuntime("", "/bin/sh", []string{"sh", "-c", script}); rc != 0 {
		t.Fatalf("runtime rc %d", rc)
	}
	start := time.Now()
	if rc := adopt("", pidFile, nil, os.Getpid(), sd.notify, 10*time.Second); rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("returned after %v, before the intermediate exited", d)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	defer func() {
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}()
	if got := sd.next(t); got.msg != "MAINPID="+strconv.Itoa(pid) || got.parent != os.Getpid() {
		t.Errorf("systemd got %q while the init's parent was %d, want MAINPID=%d from our child", got.msg, got.parent, pid)
	}
}

// The start step runs only after systemd has processed MAINPID (the
// barrier), without $NOTIFY_SOCKET in its environment.
func TestAdoptNamesTheMainPIDBeforeTheStart(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	sd := fakeSystemd(t)
	started := sd.marker
	t.Setenv("NOTIFY_SOCKET", sd.notify.Socket)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	startStep := []string{"/bin/sh", "-c", `[ -z "$NOTIFY_SOCKET" ] || exit 9; touch ` + started}
	if rc := adopt("", pidFile, startStep, os.Getpid(), fdstore.Notify{}, 10*time.Second); rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	if got := sd.next(t); got.msg != "MAINPID="+strconv.Itoa(cmd.Process.Pid) || got.startedBefore {
		t.Errorf("systemd got %q, start step already run: %v", got.msg, got.startedBefore)
	}
	if got := sd.next(t); got.msg != "BARRIER=1" || got.startedBefore {
		t.Errorf("systemd got %q, start step already run: %v", got.msg, got.startedBefore)
	}
	if _, err := os.Stat(started); err != nil {
		t.Errorf("start step did not run: %v", err)
	}
}

// A unit without a notify socket cannot learn the main PID from the
// wrapper: the start step must not run then (the init would run with
// systemd not knowing it).
func TestAdoptRefusesToStartWithoutNotifySocket(t *testing.T) {
	dir := t.TempDir()
	pidFile, started := filepath.Join(dir, "pid"), filepath.Join(dir, "started")
	t.Setenv("NOTIFY_SOCKET", "")
	os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644)
	if rc := adopt("", pidFile, []string{"/usr/bin/touch", started}, os.Getppid(), fdstore.Notify{}, time.Second); rc != 1 {
		t.Errorf("rc %d, want 1", rc)
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("start step ran")
	}
	// Without a start step (an older unit with PIDFile=) it is fine.
	if rc := adopt("", pidFile, nil, os.Getppid(), fdstore.Notify{}, time.Second); rc != 0 {
		t.Errorf("without a start step: rc %d", rc)
	}
}

func TestSuperviseRuntimeFailure(t *testing.T) {
	if rc := Supervise("", "/bin/sh", []string{"sh", "-c", "exit 3"}, filepath.Join(t.TempDir(), "pid"), []string{"/bin/true"}, time.Second); rc != 3 {
		t.Errorf("rc %d, want the runtime's 3", rc)
	}
}

type notifyMsg struct {
	msg           string
	parent        int  // MAINPID's parent when the message arrived
	startedBefore bool // the start step's marker existed when it arrived
}

// fakeSystemdSock is a notify socket that records each message and, like
// systemd, closes a barrier's pipe after every earlier message.
type fakeSystemdSock struct {
	notify fdstore.Notify
	msgs   chan notifyMsg
	marker string // the start step's marker
}

func fakeSystemd(t *testing.T) *fakeSystemdSock {
	t.Helper()
	sd := &fakeSystemdSock{notify: fdstore.Notify{Socket: filepath.Join(t.TempDir(), "notify")}, msgs: make(chan notifyMsg, 8)}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sd.notify.Socket}); err != nil {
		t.Fatal(err)
	}
	sd.marker = filepath.Join(filepath.Dir(sd.notify.Socket), "started")
	marker := sd.marker
	go func() {
		defer unix.Close(fd)
		buf, oob := make([]byte, 256), make([]byte, 64)
		for {
			n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			if err != nil {
				return
			}
			m := notifyMsg{msg: string(buf[:n])}
			if p, ok := strings.CutPrefix(m.msg, "MAINPID="); ok {
				pid, _ := strconv.Atoi(p)
				m.parent, _ = parentOf(pid)
			}
			_, err = os.Stat(marker)
			m.startedBefore = err == nil
			if oobn > 0 {
				msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
				for _, cm := range msgs {
					fds, _ := unix.ParseUnixRights(&cm)
					for _, f := range fds {
						unix.Close(f)
					}
				}
			}
			sd.msgs <- m
			if m.msg == "STOP" {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0); err == nil {
			_ = unix.Sendto(c, []byte("STOP"), 0, &unix.SockaddrUnix{Name: sd.notify.Socket})
			unix.Close(c)
		}
	})
	return sd
}

func (sd *fakeSystemdSock) next(t *testing.T) notifyMsg {
	t.Helper()
	select {
	case m := <-sd.msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
		return notifyMsg{}
	}
}

// Unit mode: the container writes to /dev/stdout and /dev/stderr by name
// (an open(2) that fails with ENXIO on a socket); the relay carries both
// pipes into their journald streams and exits when the writers are gone.
func TestRelayPipesOpenByName(t *testing.T) {
	sock, ch := fakeJournal(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := `echo $$ > ` + pidFile + `; echo by-fd; echo by-name > /dev/stdout; echo err-by-name > /dev/stderr`
	cmd := exec.Command(os.Args[0], "_stdio", "--unit", "u.service", "--identifier", "c", "--socket", sock,
		"--pid-file", pidFile, "--", "/bin/sh", "-c", script)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("wrapper: %v, output on inherited fds: %q", err, out)
	}
	got := map[string][]string{}
	for i := 0; i < 2; i++ {
		select {
		case lines := <-ch:
			got[lines[2]] = lines[7:]
		case <-time.After(5 * time.Second):
			t.Fatal("relay did not finish both streams")
		}
	}
	if strings.Join(got["6"], "|") != "by-fd|by-name" || strings.Join(got["3"], "|") != "err-by-name" {
		t.Errorf("streams: %q", got)
	}
	if !WaitRelay(pidFile+".relay", 5*time.Second) {
		t.Error("relay still running after both pipes closed")
	}
}

func TestUnitCgroupDir(t *testing.T) {
	for _, c := range [][3]string{
		{"/sys/fs/cgroup/a.slice/u.service/runtime", "runtime", "/sys/fs/cgroup/a.slice/u.service"},
		{"/sys/fs/cgroup/systemd/a.slice/u.service", "runtime", "/sys/fs/cgroup/systemd/a.slice/u.service"},
		{"", "runtime", ""},
	} {
		if got := unitCgroupDir(c[0], c[1]); got != c[2] {
			t.Errorf("unitCgroupDir(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

// The runtime's create must not wait for the relay: the wrapper runs it
// while the pipes are handed over. The fake relay holds its reply until
// the runtime has run (or 5 s), then reads what the runtime wrote from
// the pipe it was given.
func TestRuntimeRunsWhileRelayRegisters(t *testing.T) {
	sock, _ := fakeJournal(t)
	dir := t.TempDir()
	relaySock := filepath.Join(dir, "relay.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: relaySock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	marker := filepath.Join(dir, "created")
	type result struct {
		sawMarker bool
		output    string
		err       error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		defer func() { res <- r }()
		c, err := l.AcceptUnix()
		if err != nil {
			r.err = err
			return
		}
		defer c.Close()
		buf, oob := make([]byte, 4096), make([]byte, 256)
		_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			r.err = err
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			r.err = err
			return
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 4 {
			r.err = err
			return
		}
		for _, fd := range fds[1:] {
			unix.Close(fd)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(marker); err == nil {
				r.sawMarker = true
				break
			}
		}
		c.Write([]byte("OK"))
		out := os.NewFile(uintptr(fds[0]), "stdout-pipe")
		b, err := io.ReadAll(out)
		out.Close()
		r.output, r.err = string(b), err
	}()
	pidFile := filepath.Join(dir, "pid")
	script := `echo $$ > ` + pidFile + `; echo from-runtime; touch ` + marker
	cmd := exec.Command(os.Args[0], "_stdio", "--unit", "u.service", "--identifier", "c", "--socket", sock,
		"--pid-file", pidFile, "--relay-socket", relaySock, "--relay-id", "c1", "--", "/bin/sh", "-c", script)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("wrapper: %v, output on inherited fds: %q", err, out)
	}
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("fake relay: %v", r.err)
		}
		if !r.sawMarker {
			t.Error("the runtime ran only after the relay replied")
		}
		if strings.TrimSpace(r.output) != "from-runtime" {
			t.Errorf("relay read %q from the stdout pipe", r.output)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fake relay did not finish")
	}
}

// Without journald the pipes are relayed to the unit's own stdout and
// stderr, and the wrapper's warning goes to its inherited stderr, not into
// the container's stderr pipe.
func TestUnitModeWithoutJournal(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	cmd := exec.Command(os.Args[0], "_stdio", "--unit", "u.service", "--socket", filepath.Join(dir, "missing"),
		"--pid-file", pidFile, "--", "/bin/sh", "-c", `echo $$ > `+pidFile+`; echo to-out; echo to-err >&2`)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("wrapper: %v (stderr %q)", err, stderr.String())
	}
	// The relays (cat) outlive the wrapper; Run returns once they closed
	// the inherited pipes, so both outputs are complete here.
	if stdout.String() != "to-out\n" {
		t.Errorf("stdout %q", stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	warned, relayed := false, false
	for _, l := range lines {
		warned = warned || strings.Contains(l, "relaying to the inherited stdout/stderr")
		relayed = relayed || l == "to-err"
	}
	if !warned || !relayed || len(lines) != 2 {
		t.Errorf("stderr %q: want the warning and the container's line", stderr.String())
	}
}
