//go:build integration

package imagestore

import (
	"context"
	"log/slog"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's image calls on a store holding a few images, as critest's
// image benchmarks run them (issue 20): ImageStatus before every container
// creation, ListImages for image GC and the node status.
//
//	go test -tags integration,... -run '^$' -bench . ./imagestore/
func BenchmarkImageCalls(b *testing.B) {
	// Debug logs of every call would be what the benchmark measures.
	env := newTestEnv(b, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	s, ctx := env.store, context.Background()
	refs := []string{tagsImage + ":1", tagsImage + ":2", tagsImage + ":3", tagImage, "busybox:1.37.0", "gcr.io/k8s-staging-cri-tools/test-image-1:latest"}
	for _, ref := range refs {
		if _, err := s.Pull(ctx, ref, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Status", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.Status(ctx, tagImage, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("List", func(b *testing.B) {
		for b.Loop() {
			imgs, err := s.List(ctx, &runtimeapi.ImageFilter{})
			if err != nil || len(imgs) < 2 {
				b.Fatal(len(imgs), err)
			}
		}
	})
}
