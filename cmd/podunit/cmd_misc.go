package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/podunit/podunit/config"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func init() {
	register("version", command{summary: "print podunit's version", run: runVersion})
	register("config", command{summary: "print the effective configuration as TOML", run: runConfig})
}

func runVersion(args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintf(fs.Output(), "Usage: podunit version\n\nPrints podunit's version.\n") }
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	fmt.Printf("podunit %s (CRI %s)\n", podunitVersion(), "v1")
	return 0
}

// configFlags are shared by serve and config: the file and its overrides.
type configFlags struct {
	path                       string
	socket, logLevel           string
	stateDir, runDir           string
	cniConfDir, registriesConf string
}

func (f *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "config", "/etc/podunit/podunit.toml", "configuration file; drop-ins are read from FILE.d/*.toml")
	fs.StringVar(&f.socket, "socket", "", "override server.socket")
	fs.StringVar(&f.logLevel, "log-level", "", "override server.log_level (debug, info, warn, error)")
	fs.StringVar(&f.stateDir, "state-dir", "", "override paths.state_dir")
	fs.StringVar(&f.runDir, "run-dir", "", "override paths.run_dir")
	fs.StringVar(&f.cniConfDir, "cni-conf-dir", "", "override cni.conf_dir")
	fs.StringVar(&f.registriesConf, "registries-conf", "", "override image.registries_conf")
}

// load returns the validated configuration or prints why not; exit code 2
// is for configuration errors.
func (f *configFlags) load() (*config.Config, int) {
	c, err := f.read()
	if err != nil {
		fmt.Fprintf(os.Stderr, "podunit: %v\n", err)
		return nil, 2
	}
	return &c, 0
}

// read loads the files, applies the flags and validates: what serve does at
// start and again on every reload, so flags keep overriding the files.
func (f *configFlags) read() (config.Config, error) {
	c, _, err := config.Load(f.path)
	if err != nil {
		var fe *config.FileError
		if errors.As(err, &fe) {
			return c, fmt.Errorf("configuration error: %w", fe)
		}
		return c, fmt.Errorf("reading configuration: %w", err)
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.Server.Socket, f.socket)
	set(&c.Server.LogLevel, f.logLevel)
	set(&c.Paths.StateDir, f.stateDir)
	set(&c.Paths.RunDir, f.runDir)
	set(&c.CNI.ConfDir, f.cniConfDir)
	set(&c.Image.RegistriesConf, f.registriesConf)
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

func runConfig(args []string) int {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs)
	documented := fs.Bool("documented", false, "print every key with its documentation (the shipped sample)")
	running := fs.Bool("running", false, "print the configuration the daemon runs with (after reloads; a changed key that waits for a restart shows its running value)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: podunit config [flags]\n\nPrints the effective configuration (defaults, file, drop-ins, flags) as TOML.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	c, code := cf.load()
	if c == nil {
		return code
	}
	if *running {
		rc, err := runningConfig(&cliFlags{configFlags: cf})
		if err != nil {
			return fail("%v", err)
		}
		c = rc
	}
	encode := config.Encode
	if *documented {
		encode = config.Documented
	}
	b, err := encode(*c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podunit: %v\n", err)
		return 1
	}
	os.Stdout.Write(b)
	return 0
}

func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// runningConfig asks the daemon, through CRI Status verbose, for the
// configuration it runs with.
func runningConfig(cf *cliFlags) (*config.Config, error) {
	rt, closeConn, err := cf.dial()
	if err != nil {
		return nil, err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("podunit daemon status: %w", err)
	}
	var c config.Config
	if err := json.Unmarshal([]byte(st.GetInfo()["config"]), &c); err != nil {
		return nil, fmt.Errorf("podunit daemon status: configuration: %w", err)
	}
	return &c, nil
}
