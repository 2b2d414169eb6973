package cri

import (
	"context"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The Stream* RPCs (KEP-5825) exist because one List* answer can outgrow
// the client's gRPC message limit on a busy node. Each Stream* RPC gets its
// items from the same code as its List* twin, so filters, validation and
// errors are the same, and sends them in batches no bigger than
// streamBatchBytes: far below the 4 MiB default receive limit of a gRPC
// client, so any client reads them, while large enough that a node's
// lists still take few messages.
const streamBatchBytes = 1 << 20

// sendBatches sends items in order, each exactly once, in batches whose
// encoded response stays within limit bytes; an item bigger than limit
// goes alone, since the CRI wants at least one item per message. No items
// means no message: the stream just ends. A client that went away stops
// the sending at the next batch.
func sendBatches[T proto.Message](ctx context.Context, items []T, limit int, send func([]T) error) error {
	for len(items) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, size := 0, 0
		for n < len(items) {
			// Every Stream*Response holds its items in field 1.
			sz := protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(items[n]))
			if n > 0 && size+sz > limit {
				break
			}
			size += sz
			n++
		}
		if err := send(items[:n]); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}
