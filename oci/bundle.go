package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// WriteBundle writes dir/config.json atomically: a crash leaves either the old
// file or the new one, never a torn spec the runtime would start from.
func WriteBundle(dir string, spec *specs.Spec) error {
	if spec == nil {
		return invalid("spec", "nil")
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, "config.json"), b, 0o600)
}

// ReadBundle reads dir/config.json, e.g. for ContainerStatus' verbose info.
func ReadBundle(dir string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	return &s, nil
}

func writeFileAtomic(name string, data []byte, mode os.FileMode) (retErr error) {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// The rename is only durable once the directory entry is.
	return d.Sync()
}
