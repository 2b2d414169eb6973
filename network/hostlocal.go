package network

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// hostLocalDefaultDir is where the host-local IPAM plugin keeps its
// reservations when the configuration names no dataDir.
const hostLocalDefaultDir = "/var/lib/cni/networks"

// HostLocalDirs returns the reservation directories of the host-local IPAM
// plugins in the network configuration podunit uses; none when there is no
// configuration or it uses another IPAM.
func (c *CNI) HostLocalDirs() ([]string, error) {
	list, err := c.config()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, p := range list.Plugins {
		var conf struct {
			IPAM struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		}
		if err := json.Unmarshal(p.Bytes, &conf); err != nil || conf.IPAM.Type != "host-local" {
			continue
		}
		dir := conf.IPAM.DataDir
		if dir == "" {
			dir = hostLocalDefaultDir
		}
		dirs = append(dirs, filepath.Join(dir, list.Name))
	}
	return dirs, nil
}

// ReleaseTornReservations removes the host-local reservations in dir that
// name no owner. host-local creates an address's file and then writes the
// container ID into it; a plugin killed in between (podunit.service
// stopped or killed during a RunPodSandbox takes its plugins along) leaves
// an empty file that no DEL can match, so the address would stay taken
// for ever. The plugin's own lock is held meanwhile, so a reservation
// being written right now is never seen half done.
func ReleaseTornReservations(dir string, dryRun bool) ([]string, error) {
	lock, err := os.Open(filepath.Join(dir, "lock"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // nothing was ever reserved here
	}
	if err != nil {
		return nil, fmt.Errorf("host-local lock in %s: %w", dir, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("host-local lock in %s: %w", dir, err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN) //nolint:errcheck // closing releases it too
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("host-local reservations: %w", err)
	}
	var torn []string
	for _, e := range entries {
		if !e.Type().IsRegular() || net.ParseIP(e.Name()) == nil {
			continue // lock, last_reserved_ip.N
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) != "" {
			continue
		}
		torn = append(torn, p)
		if dryRun {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return torn, fmt.Errorf("release torn reservation: %w", err)
		}
	}
	return torn, nil
}
