package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Features are what a handler advertises in the CRI Status
// (runtime_handlers[].features) and what GenerateSpec may rely on.
type Features struct {
	RecursiveReadOnlyMounts bool
	UserNamespaces          bool
	IDMappedMounts          bool
}

// featuresDoc is the part of the runtime-spec features document
// (`runc features`, `crun features`) podunit reads.
type featuresDoc struct {
	MountOptions []string `json:"mountOptions"`
	Linux        *struct {
		Namespaces []string `json:"namespaces"`
	} `json:"linux"`
}

// ParseFeatures reads a runtime-spec features document.
func ParseFeatures(b []byte) (*Features, error) {
	var d featuresDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("features document: %w", err)
	}
	f := &Features{
		RecursiveReadOnlyMounts: slices.Contains(d.MountOptions, "rro"),
		IDMappedMounts:          slices.Contains(d.MountOptions, "idmap") || slices.Contains(d.MountOptions, "ridmap"),
	}
	if d.Linux != nil {
		f.UserNamespaces = slices.Contains(d.Linux.Namespaces, "user")
	}
	return f, nil
}

// crunWithoutFeatures: crun before 1.9 has no `features` command. Its 1.8
// support for rro mounts and user namespaces is what this package's
// integration tests exercise; idmapped mounts are not claimed.
var crunWithoutFeatures = Features{RecursiveReadOnlyMounts: true, UserNamespaces: true}

// Features asks the runtime what it supports.
func (c *CLI) Features(ctx context.Context) (*Features, error) {
	out, err := c.command(ctx, append(c.global(), "features"))
	if err != nil {
		if c.flavor == FlavorCrun && strings.Contains(err.Error(), "unknown command") {
			f := crunWithoutFeatures
			return &f, nil
		}
		return nil, err
	}
	return ParseFeatures(out)
}
