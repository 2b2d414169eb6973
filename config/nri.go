package config

import (
	"fmt"
	"path/filepath"
)

// NRI is the Node Resource Interface (github.com/containerd/nri): plugins
// that see pods and containers come and go and adjust containers as they
// are created (resources, devices, mounts, environment...). Defaults are in
// Default(); docs/nri.md says what podunit applies.
type NRI struct {
	Enabled             bool     `toml:"enabled" doc:"Serve NRI plugins: they see pod and container lifecycle events and may adjust, update and evict containers."`
	SocketPath          string   `toml:"socket_path" doc:"Unix socket where externally started plugins connect."`
	DisableConnections  bool     `toml:"disable_connections" doc:"Do not listen on socket_path: only plugins podunit starts from plugin_path run."`
	PluginPath          string   `toml:"plugin_path" doc:"Directory of plugin executables (NN-name) podunit starts at startup."`
	PluginConfigPath    string   `toml:"plugin_config_path" doc:"Directory of configuration files for the plugins podunit starts (NN-name.conf or name.conf)."`
	RegistrationTimeout Duration `toml:"registration_timeout" doc:"How long a plugin may take to register and synchronize before it is dropped."`
	RequestTimeout      Duration `toml:"request_timeout" doc:"How long a plugin may take to answer one event before the event fails."`
}

func (n *NRI) validate() []string {
	if !n.Enabled {
		return nil
	}
	var errs []string
	for _, kv := range [][2]string{{"nri.socket_path", n.SocketPath}, {"nri.plugin_path", n.PluginPath}, {"nri.plugin_config_path", n.PluginConfigPath}} {
		if !filepath.IsAbs(kv[1]) {
			errs = append(errs, fmt.Sprintf("%s: must be an absolute path, got %q", kv[0], kv[1]))
		}
	}
	if n.RegistrationTimeout <= 0 {
		errs = append(errs, "nri.registration_timeout: must be positive")
	}
	if n.RequestTimeout <= 0 {
		errs = append(errs, "nri.request_timeout: must be positive")
	}
	return errs
}
