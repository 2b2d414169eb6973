package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c2, used, err := Load(filepath.Join(t.TempDir(), "none.toml"))
	if err != nil || len(used) != 0 {
		t.Fatalf("missing file: %v %v", used, err)
	}
	if c2.Server.Socket != "/run/podunit/podunit.sock" {
		t.Fatalf("socket %q", c2.Server.Socket)
	}
}

func TestDropinsOverrideInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "podunit.toml")
	write(t, main, "[server]\nlog_level = \"debug\"\n[systemd]\ncall_timeout = \"10s\"\n")
	write(t, main+".d/20-b.toml", "[systemd]\ncall_timeout = \"20s\"\n")
	write(t, main+".d/10-a.toml", "[systemd]\ncall_timeout = \"15s\"\nparent_slice = \"x.slice\"\n")
	write(t, main+".d/ignored.conf", "garbage")
	c, used, err := Load(main)
	if err != nil {
		t.Fatal(err)
	}
	if len(used) != 3 || !strings.HasSuffix(used[2], "20-b.toml") {
		t.Fatalf("used %v", used)
	}
	if c.Systemd.CallTimeout.D() != 20*time.Second || c.Systemd.ParentSlice != "x.slice" || c.Server.LogLevel != "debug" {
		t.Fatalf("got %+v", c)
	}
	if c.Image.StorageRoot != "/var/lib/podunit/storage" {
		t.Fatal("defaults lost")
	}
}

func TestErrorsNameFileKeyLine(t *testing.T) {
	for name, tc := range map[string]struct {
		body, key string
		line      int
	}{
		"unknown key":   {"[server]\nsocket = \"/x.sock\"\n\nlog_levle = \"debug\"\n", "server.log_levle", 4},
		"unknown table": {"[server]\nsocket = \"/x.sock\"\n[imgae]\nstorage_root = \"/x\"\n", "imgae", 3},
		"bad duration":  {"[systemd]\n\ncall_timeout = \"soon\"\n", "systemd.call_timeout", 3},
		"bad type":      {"[systemd]\nmax_parallel_jobs = \"many\"\n", "systemd.max_parallel_jobs", 2},
		"syntax":        {"[server\n", "", 2},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "podunit.toml")
			write(t, p, tc.body)
			_, _, err := Load(p)
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("want FileError, got %v", err)
			}
			if fe.File != p || fe.Line != tc.line || (tc.key != "" && !strings.HasPrefix(fe.Key, tc.key)) {
				t.Fatalf("got file=%s key=%q line=%d (%v)", fe.File, fe.Key, fe.Line, err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	c.Server.Socket = "relative.sock"
	c.Runtime.DefaultHandler = "kata"
	c.Image.StorageDriver = "zfs"
	c.Logs.JournaldRateLimitInterval = Duration(time.Nanosecond)
	err := c.Validate()
	for _, want := range []string{"server.socket", "runtime.default_handler", "image.storage_driver", "logs.journald_rate_limit_interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want mention of %s", err, want)
		}
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	b, err := Encode(Default())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "p.toml")
	write(t, p, string(b))
	c, _, err := Load(p)
	if err != nil {
		t.Fatalf("re-load of encoded defaults: %v\n%s", err, b)
	}
	if c.Systemd.CallTimeout != Default().Systemd.CallTimeout || len(c.CNI.BinDirs) != 2 {
		t.Fatalf("round trip lost values: %+v", c)
	}
}

func TestCDI(t *testing.T) {
	d := Default().CDI
	if !d.Enabled || strings.Join(d.SpecDirs, " ") != "/etc/cdi /var/run/cdi" {
		t.Fatalf("defaults %+v", d)
	}
	p := filepath.Join(t.TempDir(), "podunit.toml")
	write(t, p, "[cdi]\nenabled = false\nspec_dirs = [\"/opt/cdi\"]\n")
	c, _, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.CDI.Enabled || strings.Join(c.CDI.SpecDirs, " ") != "/opt/cdi" {
		t.Fatalf("loaded %+v", c.CDI)
	}
	for name, tc := range map[string]CDI{
		"relative dir":        {Enabled: true, SpecDirs: []string{"/etc/cdi", "cdi"}},
		"enabled without dir": {Enabled: true},
	} {
		c := Default()
		c.CDI = tc
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cdi.spec_dirs") {
			t.Errorf("%s: Validate = %v, want a cdi.spec_dirs error", name, err)
		}
	}
	c = Default()
	c.CDI = CDI{Enabled: false}
	if err := c.Validate(); err != nil {
		t.Errorf("disabled without dirs: %v", err)
	}
}
