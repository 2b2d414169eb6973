//go:build tools

package main

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/coreos/go-systemd/v22/activation"
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/coreos/go-systemd/v22/dbus"
	_ "github.com/coreos/go-systemd/v22/journal"
	_ "github.com/godbus/dbus/v5"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.podman.io/image/v5/copy"
	_ "go.podman.io/storage"
	_ "google.golang.org/grpc"
	_ "k8s.io/cri-api/pkg/apis/runtime/v1"
	_ "k8s.io/cri-streaming/pkg/streaming"
)
