// Package apparmor is podunit's view of the host's AppArmor: whether the
// kernel enforces it, which profiles are loaded, and loading podunit's own
// default container profile (DefaultProfile) with apparmor_parser.
//
// Every host path and the parser are fields of Host, so tests run against
// plain files and a fake parser.
package apparmor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/podunit/podunit/errdefs"
)

// DefaultProfile is the profile RuntimeDefault (and, on an AppArmor host, an
// unset profile) maps to; podunit generates and loads it (Profile).
const DefaultProfile = "podunit-default"

// Host is the kernel's AppArmor as seen through its files and
// apparmor_parser. The zero value is not usable; use NewHost.
type Host struct {
	// EnabledParam is the module parameter that reads "Y" when AppArmor is on.
	EnabledParam string
	// SecurityFS is AppArmor's securityfs directory; its "profiles" file
	// lists the loaded profiles ("name (mode)" per line).
	SecurityFS string
	// ConfigDir holds the parser's includes (tunables/global,
	// abstractions/base, abi/3.0); the profile includes those present.
	ConfigDir string
	// SelfLabel is this process's confinement (/proc/self/attr/current):
	// the profile podunit itself runs under may signal containers.
	SelfLabel string
	// Parser is apparmor_parser, by name (looked up in PATH) or path.
	Parser string
	// RetryAfter is how long a failed load of the default profile is
	// remembered before the parser is run again.
	RetryAfter time.Duration
	Logger     *slog.Logger

	now func() time.Time

	mu       sync.Mutex
	failedAt time.Time
	lastErr  error
	warned   bool
}

// NewHost is the system's AppArmor.
func NewHost(log *slog.Logger) *Host {
	if log == nil {
		log = slog.Default()
	}
	return &Host{
		EnabledParam: "/sys/module/apparmor/parameters/enabled",
		SecurityFS:   "/sys/kernel/security/apparmor",
		ConfigDir:    "/etc/apparmor.d",
		SelfLabel:    "/proc/self/attr/current",
		Parser:       "apparmor_parser",
		RetryAfter:   time.Minute,
		Logger:       log,
	}
}

// Enabled reports whether the kernel enforces AppArmor: the module is on
// and its securityfs is mounted (runc and containerd check both).
func (h *Host) Enabled() bool {
	b, err := os.ReadFile(h.EnabledParam)
	if err != nil || !bytes.HasPrefix(b, []byte("Y")) {
		return false
	}
	st, err := os.Stat(h.SecurityFS)
	return err == nil && st.IsDir()
}

// IsLoaded reports whether a profile called name is loaded in the kernel.
func (h *Host) IsLoaded(name string) (bool, error) {
	p := filepath.Join(h.SecurityFS, "profiles")
	f, err := os.Open(p)
	if err != nil {
		return false, fmt.Errorf("apparmor: loaded profiles: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if profileName(sc.Text()) == name {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("apparmor: %s: %w", p, err)
	}
	return false, nil
}

// profileName is the name in a "name (mode)" line of the profiles file or
// in /proc/<pid>/attr/current; names may contain spaces, so the mode is cut
// at the last " (". An empty label is "unconfined".
func profileName(line string) string {
	line = strings.TrimSpace(line)
	if i := strings.LastIndex(line, " ("); i >= 0 && strings.HasSuffix(line, ")") {
		line = line[:i]
	}
	if line == "" {
		return "unconfined"
	}
	return line
}

// EnsureDefault loads podunit's default profile under name unless a profile
// of that name is loaded already. It is safe for concurrent use; a failure
// is remembered for RetryAfter (the parser is not run for every container)
// and logged once until a load succeeds. Errors wrap errdefs.ErrPrecondition.
func (h *Host) EnsureDefault(ctx context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ok, err := h.IsLoaded(name)
	if err == nil && ok {
		h.lastErr, h.warned = nil, false
		return nil
	}
	if h.lastErr != nil && h.clock().Sub(h.failedAt) < h.RetryAfter {
		return h.lastErr
	}
	if err == nil {
		err = h.load(ctx, name)
	}
	if err != nil {
		h.lastErr = fmt.Errorf("apparmor: default profile %q: %w: %w", name, errdefs.ErrPrecondition, err)
		h.failedAt = h.clock()
		if !h.warned {
			h.warned = true
			h.Logger.Warn("AppArmor default profile not loaded: containers without a profile run unconfined, RuntimeDefault ones fail",
				"profile", name, "err", err)
		}
		return h.lastErr
	}
	h.lastErr, h.warned = nil, false
	h.Logger.Info("loaded AppArmor default profile", "profile", name)
	return nil
}

func (h *Host) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// load generates the profile and feeds it to `apparmor_parser -Kr` on stdin
// (replace, no cache), then checks that the kernel lists it.
func (h *Host) load(ctx context.Context, name string) error {
	prof, err := h.Profile(name)
	if err != nil {
		return err
	}
	bin, err := exec.LookPath(h.Parser)
	if err != nil {
		return fmt.Errorf("no parser: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-Kr")
	cmd.Stdin = bytes.NewReader(prof)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s -Kr: %w: %s", bin, err, bytes.TrimSpace(out))
	}
	ok, err := h.IsLoaded(name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s -Kr succeeded but %q is not among the loaded profiles", bin, name)
	}
	return nil
}

// Profile is the text of podunit's default profile under name for this
// host: the includes the host's parser has, and a signal rule for the
// profile podunit itself runs under.
func (h *Host) Profile(name string) ([]byte, error) {
	p := Params{Name: name, DaemonProfile: "unconfined"}
	if h.exists("abi/3.0") {
		p.ABI = "abi/3.0"
	}
	p.Tunables = h.exists("tunables/global")
	p.BaseAbstraction = h.exists("abstractions/base")
	if b, err := os.ReadFile(h.SelfLabel); err == nil {
		p.DaemonProfile = profileName(string(b))
	} else if !errors.Is(err, fs.ErrNotExist) {
		h.Logger.Debug("apparmor: own label unreadable, assuming unconfined", "err", err)
	}
	var buf bytes.Buffer
	if err := Generate(&buf, p); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (h *Host) exists(include string) bool {
	_, err := os.Stat(filepath.Join(h.ConfigDir, include))
	return err == nil
}
