package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podunit/podunit/errdefs"
)

// Flavor selects the command-line dialect.
type Flavor int

const (
	FlavorRunc Flavor = iota
	FlavorCrun
)

// CLIConfig configures a runtime CLI. Binary and Root come from a
// runtime.handlers entry of package config, ExecDir from paths.run_dir.
type CLIConfig struct {
	// Name is the handler name; default "runc" or "crun".
	Name string
	// Binary is the executable (a path or a name looked up in PATH).
	Binary string
	// Root is the runtime's --root state directory.
	Root string
	// ExecDir holds per-exec scratch files (process.json, pid file, console
	// socket); it must not be Root, which the runtime lists as containers.
	ExecDir string
	// ExecHelper is the command line that runs ExecHelperMain (podunit's
	// binary and ExecHelperName), which terminal execs run under.
	ExecHelper []string
}

// CLI drives runc or crun through their command lines.
type CLI struct {
	flavor Flavor
	cfg    CLIConfig
}

var _ Runtime = (*CLI)(nil)

// NewRunc returns runc; an empty Name is "runc".
func NewRunc(cfg CLIConfig) *CLI { return newCLI(FlavorRunc, cfg) }

// NewCrun returns crun; an empty Name is "crun".
func NewCrun(cfg CLIConfig) *CLI { return newCLI(FlavorCrun, cfg) }

func newCLI(f Flavor, cfg CLIConfig) *CLI {
	if cfg.Name == "" {
		cfg.Name = "runc"
		if f == FlavorCrun {
			cfg.Name = "crun"
		}
	}
	return &CLI{flavor: f, cfg: cfg}
}

// CLISpec is what a CLI is made of, in a form that crosses processes: the
// streaming session process runs a container's execs with the runtime
// podunit describes to it (docs/streaming.md "Session process").
type CLISpec struct {
	Flavor Flavor    `json:"flavor"`
	Config CLIConfig `json:"config"`
}

// Spec describes c; Spec().CLI() is an equal CLI.
func (c *CLI) Spec() CLISpec { return CLISpec{Flavor: c.flavor, Config: c.cfg} }

// CLI makes the runtime s describes.
func (s CLISpec) CLI() *CLI { return newCLI(s.Flavor, s.Config) }

// Name implements Runtime.
func (c *CLI) Name() string { return c.cfg.Name }

// global is the binary and the global flags: every command about a
// container takes the flags it was created with.
func (c *CLI) global() []string {
	argv := []string{c.cfg.Binary, "--root", c.cfg.Root}
	if c.flavor == FlavorCrun {
		// crun refuses its cgroupfs manager on hybrid hosts and its systemd
		// manager would put the container in a scope outside the unit; with
		// no manager the container stays in the unit's own cgroup.
		argv = append(argv, "--cgroup-manager=disabled")
	}
	return argv
}

// globalWithLog adds the runtime's own log (runc and crun both take --log
// and --log-format as global flags): the only place a failed start's
// message survives, since the runtime's stderr goes to the container's
// journal.
func (c *CLI) globalWithLog(logFile string) []string {
	return append([]string{c.cfg.Binary, "--log=" + logFile, "--log-format=json"}, c.global()[1:]...)
}

// CreateArgv implements Runtime. runc 1.1 and crun 1.8 both refuse a
// terminal process without --console-socket (and take no terminal from
// their own stdio when detached).
func (c *CLI) CreateArgv(id, bundle, pidFile, logFile, consoleSocket string) []string {
	argv := append(c.globalWithLog(logFile), "create", "--pid-file", pidFile, "--bundle", bundle)
	if consoleSocket != "" {
		argv = append(argv, "--console-socket", consoleSocket)
	}
	return append(argv, id)
}

// StartArgv implements Runtime.
func (c *CLI) StartArgv(id, logFile string) []string {
	return append(c.globalWithLog(logFile), "start", id)
}

// DeleteArgv implements Runtime.
func (c *CLI) DeleteArgv(id string) []string {
	return append(c.global(), "delete", "--force", id)
}

// terminalExecArgv runs process.json on a new terminal, whose master the
// runtime sends to consoleSocket. The runtime runs detached (under the
// exec helper, exechelper.go): in the foreground runc proxies the
// terminal itself and clears ONLCR on it after the command may already
// have written. --tty only matters to runtimes that do not take the
// terminal from processFile.
func (c *CLI) terminalExecArgv(id, processFile, consoleSocket, pidFile string) []string {
	return append(c.global(), "exec", "--detach", "--tty", "--console-socket", consoleSocket,
		"--pid-file", pidFile, "--process", processFile, id)
}

// StateDir is the runtime's state directory of container id (runc and
// crun alike): <root>/<id>. id must be a valid container ID.
func (c *CLI) StateDir(id string) string { return filepath.Join(c.cfg.Root, id) }

// execArgv runs process.json in the foreground; pidFile tells podunit the
// exec'd process so a timeout can kill it (killing the runtime would not).
func (c *CLI) execArgv(id, processFile, pidFile string) []string {
	return append(c.global(), "exec", "--process", processFile, "--pid-file", pidFile, id)
}

// OwnCgroup implements Runtime.
func (c *CLI) OwnCgroup() bool { return c.flavor != FlavorCrun }

// updateArgv reads the new limits as JSON (specs.LinuxResources) from
// stdin; nil for crun, whose containers have no cgroup of their own (see
// Update).
func (c *CLI) updateArgv(id string) []string {
	if !c.OwnCgroup() {
		return nil
	}
	return append(c.global(), "update", "--resources", "-", id)
}

// command runs a short runtime command and classifies its failure.
func (c *CLI) command(ctx context.Context, argv []string) ([]byte, error) {
	return c.commandInput(ctx, argv, nil)
}

// commandInput is command with stdin (nil: none).
func (c *CLI) commandInput(ctx context.Context, argv []string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	// The subcommand follows the global flags.
	op := c.cfg.Name + " " + argv[len(c.global())]
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w: %w", op, errdefs.ErrDeadline, ctx.Err())
	}
	return nil, classify(op, stderr.String(), err)
}

// classify maps runc's and crun's messages to podunit's sentinels.
func classify(op, stderr string, err error) error {
	msg := runtimeMessage(stderr)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("%s: %w", op, err)
	}
	switch {
	case strings.Contains(msg, "does not exist"),
		strings.Contains(msg, "No such file or directory") && strings.Contains(msg, "status"),
		strings.Contains(msg, "cannot open directory") && strings.Contains(msg, "No such file or directory"):
		return fmt.Errorf("%s: %w: %s", op, errdefs.ErrNotFound, msg)
	case strings.Contains(msg, "not running"), strings.Contains(msg, "container is not running"),
		strings.Contains(msg, "No such process"):
		return fmt.Errorf("%s: %w: %s", op, errdefs.ErrPrecondition, msg)
	}
	return fmt.Errorf("%s: %s (%w)", op, msg, err)
}

// runtimeMessage extracts the error text: runc logs logrus lines
// (`time=... level=error msg="..."`), crun plain lines; the last one wins.
func runtimeMessage(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if i := strings.Index(last, `msg="`); i >= 0 {
		if s, err := strconv.Unquote(last[i+4:]); err == nil {
			return s
		}
		return strings.TrimSuffix(last[i+5:], `"`)
	}
	return last
}

// Delete implements Runtime.
func (c *CLI) Delete(ctx context.Context, id string) error {
	_, err := c.command(ctx, c.DeleteArgv(id))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

// Update implements Runtime: `update --resources -` writes the limits into
// the container's own cgroup. crun runs with --cgroup-manager=disabled, so
// its containers stay in the unit's cgroup, which systemd owns and has
// already updated: nothing to do.
func (c *CLI) Update(ctx context.Context, id string, r *specs.LinuxResources) error {
	argv := c.updateArgv(id)
	if argv == nil || r == nil {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("%s update %s: encode resources: %w", c.cfg.Name, id, err)
	}
	_, err = c.commandInput(ctx, argv, b)
	return err
}
