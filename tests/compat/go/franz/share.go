package main

// The share mode: one franz-go share consumer (KIP-932, kgo.ShareGroup) of GROUP on TOPIC.
//
//	share N  first sets the group's share.auto.offset.reset to earliest (IncrementalAlterConfigs on the GROUP
//	         resource; a broker without group configs answers an error, printed, and the consumer goes on), then
//	         polls until it has seen N records (or 150 empty polls of up to 500 ms before a first record, 20 after
//	         one: counts, not time; the program's 90 s guard above all): a record whose value starts with "rel"
//	         is released at its first delivery (and accepted at the next), "rej" is rejected, anything else
//	         accepted; the acknowledgements of each poll are flushed before the next poll.
//	         Lines: {"op":"config","error"?}, {"op":"record","p","o","v","dc","ack"}, {"op":"flush","error"?},
//	         {"op":"share_result","seen":n}.

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func setShareConfig(ctx context.Context) {
	cl := newClient()
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceType(32) // GROUP
	res.ResourceName = group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = "share.auto.offset.reset"
	v := "earliest"
	cfg.Value = &v
	cfg.Op = kmsg.IncrementalAlterConfigOpSet
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Resources) == 1 && resp.Resources[0].ErrorCode != 0 {
		msg := "error code " + strconv.Itoa(int(resp.Resources[0].ErrorCode))
		if resp.Resources[0].ErrorMessage != nil {
			msg += ": " + *resp.Resources[0].ErrorMessage
		}
		emit(map[string]any{"op": "config", "error": msg})
		return
	}
	if err != nil {
		emitErr("config", err, nil)
		return
	}
	emit(map[string]any{"op": "config"})
}

func share(ctx context.Context, n int) {
	setShareConfig(ctx)
	cl := newClient(kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
	defer cl.Close()
	seen, idle := 0, 0
	for seen < n {
		// hang guards by count of empty polls (each waits up to 500 ms), never by wall time: a broker on a busy
		// machine may take many polls to initialize a new share-partition (Kafka 4.4 beside the rest of the suite
		// took more than 30 s once)
		limit := 20
		if seen == 0 {
			limit = 150
		}
		if idle >= limit {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			break
		}
		got := 0
		fs.EachRecord(func(r *kgo.Record) {
			got++
			seen++
			v := string(r.Value)
			status, name := kgo.AckAccept, "ACCEPT"
			if strings.HasPrefix(v, "rel") && r.DeliveryCount() == 1 {
				status, name = kgo.AckRelease, "RELEASE"
			} else if strings.HasPrefix(v, "rej") {
				status, name = kgo.AckReject, "REJECT"
			}
			r.Ack(status)
			emit(map[string]any{"op": "record", "p": r.Partition, "o": r.Offset, "v": v,
				"dc": r.DeliveryCount(), "ack": name})
		})
		if got == 0 {
			idle++
		} else {
			idle = 0
			if err := cl.FlushAcks(ctx); err != nil {
				emitErr("flush", err, nil)
			} else {
				emit(map[string]any{"op": "flush"})
			}
		}
	}
	emit(map[string]any{"op": "share_result", "seen": seen})
}
