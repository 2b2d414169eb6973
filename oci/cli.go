package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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

// Name implements Runtime.
func (c *CLI) Name() string { return c.cfg.Name }

// Config returns the effective configuration.
func (c *CLI) Config() CLIConfig { return c.cfg }

func (c *CLI) global() []string {
	return []string{c.cfg.Binary, "--root", c.cfg.Root}
}

// RunArgv implements Runtime.
func (c *CLI) RunArgv(id, bundle, pidFile string) []string {
	return c.runArgv(id, bundle, pidFile, "")
}

// ConsoleRunArgv implements Runtime.
func (c *CLI) ConsoleRunArgv(id, bundle, pidFile, consoleSocket string) []string {
	return c.runArgv(id, bundle, pidFile, consoleSocket)
}

func (c *CLI) runArgv(id, bundle, pidFile, consoleSocket string) []string {
	argv := c.global()
	if c.flavor == FlavorCrun {
		// crun refuses its cgroupfs manager on hybrid hosts and its systemd
		// manager would put the container in a scope outside the unit; with
		// no manager the container stays in the unit's own cgroup.
		argv = append(argv, "--cgroup-manager=disabled")
	}
	argv = append(argv, "run", "--detach", "--pid-file", pidFile)
	if consoleSocket != "" {
		argv = append(argv, "--console-socket", consoleSocket)
	}
	return append(argv, "--bundle", bundle, id)
}

// execArgv runs process.json in the foreground; pidFile tells podunit the
// exec'd process so a timeout can kill it (killing the runtime would not).
func (c *CLI) execArgv(id, processFile, pidFile, consoleSocket string) []string {
	argv := append(c.global(), "exec", "--process", processFile, "--pid-file", pidFile)
	if consoleSocket != "" {
		argv = append(argv, "--console-socket", consoleSocket)
	}
	return append(argv, id)
}

func (c *CLI) killArgv(id string, sig syscall.Signal, all bool) []string {
	argv := append(c.global(), "kill")
	// crun without a cgroup manager has no process list for --all and
	// silently signals nothing; the init is what it can reach (SIGKILL of a
	// PID namespace's init ends the namespace; systemd's stop covers the
	// unit's whole cgroup).
	if all && c.flavor != FlavorCrun {
		argv = append(argv, "--all")
	}
	return append(argv, id, strconv.Itoa(int(sig)))
}

func (c *CLI) deleteArgv(id string, force bool) []string {
	argv := append(c.global(), "delete")
	if force {
		argv = append(argv, "--force")
	}
	return append(argv, id)
}

// updateArgv reads the new limits as JSON (specs.LinuxResources) from
// stdin; nil for crun, whose containers have no cgroup of their own (see
// Update).
// OwnCgroup implements Runtime.
func (c *CLI) OwnCgroup() bool { return c.flavor != FlavorCrun }

func (c *CLI) updateArgv(id string) []string {
	if !c.OwnCgroup() {
		return nil
	}
	return append(c.global(), "update", "--resources", "-", id)
}

func (c *CLI) stateArgv(id string) []string { return append(c.global(), "state", id) }

func (c *CLI) listArgv() []string { return append(c.global(), "list", "--format", "json") }

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
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s %s: %w: %w", c.cfg.Name, argv[3], errdefs.ErrDeadline, ctx.Err())
	}
	return nil, classify(c.cfg.Name+" "+argv[3], stderr.String(), err)
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

// Kill implements Runtime.
func (c *CLI) Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error {
	_, err := c.command(ctx, c.killArgv(id, sig, all))
	return err
}

// Delete implements Runtime.
func (c *CLI) Delete(ctx context.Context, id string, force bool) error {
	_, err := c.command(ctx, c.deleteArgv(id, force))
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

// State implements Runtime.
func (c *CLI) State(ctx context.Context, id string) (*State, error) {
	out, err := c.command(ctx, c.stateArgv(id))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("%s state %s: decode %q: %w", c.cfg.Name, id, out, err)
	}
	return &s, nil
}

// List implements Runtime.
func (c *CLI) List(ctx context.Context) ([]State, error) {
	out, err := c.command(ctx, c.listArgv())
	if err != nil {
		return nil, err
	}
	var states []State
	if err := json.Unmarshal(out, &states); err != nil {
		return nil, fmt.Errorf("%s list: decode %q: %w", c.cfg.Name, out, err)
	}
	return states, nil
}
