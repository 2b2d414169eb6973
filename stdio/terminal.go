package stdio

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podunit/podunit/console"
	"github.com/podunit/podunit/fdstore"
	"github.com/podunit/podunit/logrelay"
)

// A tty container runs on a real terminal: the runtime makes it (its
// --console-socket, package console) and the container's process gets the
// slave as its controlling terminal, stdin, stdout and stderr. The master
// must be held for the container's whole life by a process that neither
// podunit's nor the unit's end takes down: the node's log relay, which
// keeps it in systemd's fd store like the pipes of other containers, reads
// the output (the CRI log file's stdout, journald's stdout stream) and
// hands the master to attach sessions for input and resizes.

// masterWait bounds how long the wrapper waits for the master once the
// runtime's create has returned (runc and crun send it during create).
const masterWait = 10 * time.Second

// superviseTerminal is Supervise for a tty container: it receives the
// terminal on the console socket while the runtime creates the container,
// hands it to the relay, then adopts and starts the init like Supervise.
func superviseTerminal(o Options, path string, warn io.Writer) int {
	lis, err := console.Listen(o.ConsoleSocket)
	if err != nil {
		fmt.Fprintln(warn, "podunit _stdio:", err)
		return 1
	}
	got := make(chan *os.File, 1)
	go func() {
		f, err := console.ReceiveMaster(lis)
		if err != nil {
			f = nil
		}
		got <- f
	}()
	code := runRuntime(o.MountNS, path, o.Argv)
	lis.Close()
	_ = os.Remove(o.ConsoleSocket)
	if code != 0 {
		return code
	}
	var master *os.File
	select {
	case master = <-got:
	case <-time.After(masterWait):
	}
	if master == nil {
		fmt.Fprintln(warn, "podunit _stdio: the runtime sent no terminal")
		return 1
	}
	defer master.Close()
	if err := holdTerminal(o, master, o.PIDFile+".relay", warn); err != nil {
		fmt.Fprintln(warn, "podunit _stdio:", err)
		return 1
	}
	return adopt(o.MountNS, o.PIDFile, o.StartArgv, os.Getppid(), fdstore.Notify{}, 30*time.Second)
}

// holdTerminal hands the master and a journald stream to the node's relay,
// or else to a relay child in the unit (no CRI log file, no attach input;
// its PID goes to pidFile for the exit recorder).
func holdTerminal(o Options, master *os.File, pidFile string, warn io.Writer) error {
	noJournal := o.NoJournal
	sock, err := Connect(o.Socket, o.Identifier, o.Unit, PriorityStdout)
	if err != nil {
		// Logging degraded is no reason to fail the container: the relay
		// still writes the CRI file, the stream is a sink.
		fmt.Fprintf(warn, "podunit _stdio: %v; the terminal's output stays out of journald\n", err)
		sock, err = unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		noJournal = true
	}
	sf := os.NewFile(uintptr(sock), "stdout-stream")
	defer sf.Close()
	tapDir := filepath.Dir(o.ConsoleSocket)
	if o.RelaySocket != "" {
		lo := logrelay.LogOptions{Path: o.LogPath, UID: -1, GID: -1, NoJournal: noJournal}
		err := logrelay.RegisterTerminal(o.RelaySocket, o.RelayID, tapDir, unitCgroupDir(ownCgroupDir(o.CgroupRoot), o.CgroupLeaf), lo, int(master.Fd()), sock, 10*time.Second)
		if err == nil {
			return nil
		}
		fmt.Fprintf(warn, "podunit _stdio: %v; relaying the terminal from inside the unit instead (no CRI log file, no attach input)\n", err)
	}
	cmd := exec.Command("/proc/self/exe", "_stdio", relayFlag, ttyFlag, tapFlag+tapDir)
	cmd.Args[0] = os.Args[0]
	cmd.ExtraFiles = []*os.File{master, sf}
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start terminal relay: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("terminal relay pid file: %w", err)
	}
	return nil
}
