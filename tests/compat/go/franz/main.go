// franz-go (kgo + kadm) side of kafkalog's compatibility lab.
//
// Usage: franz BOOTSTRAP TOPIC GROUP MODE [COUNT [START]]
//
// Modes (each prints one JSON object per line on stdout, "op" names what the line reports; a failed call is
// {"op": ..., "error": "..."} and the program goes on with the next step where it can):
//
//	produce N START  create TOPIC (3 partitions) with the admin API, produce records START..START+N-1 keyed
//	                 "k<i>" with headers, print each record's partition and offset, then the end offsets
//	consume N        consume N records in GROUP, commit them, describe the group while the member runs,
//	                 leave, then describe the group again and fetch its committed offsets
//	admin            list groups, describe GROUP, fetch its committed offsets, list topics, end offsets
//	delete-offsets   delete GROUP's committed offset of partition 0 (OffsetDelete), then fetch its offsets
//	delete-group     delete GROUP, then list groups
//	txn              transactions: commit, abort, fencing, a GroupTransactSession round in GROUP (txn.go)
//	share N          a share consumer (KIP-932) of GROUP: ACCEPT, RELEASE, REJECT by value (share.go)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	bootstrap, topic, group, mode string
)

func emit(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(b, '\n'))
}

func emitErr(op string, err error, extra map[string]any) {
	m := map[string]any{"op": op, "error": err.Error()}
	for k, v := range extra {
		m[k] = v
	}
	emit(m)
}

func fatal(op string, err error) {
	emitErr(op, err, nil)
	os.Exit(1)
}

func intArg(i int, def int) int {
	if len(os.Args) <= i {
		return def
	}
	n, err := strconv.Atoi(os.Args[i])
	if err != nil {
		fatal("args", err)
	}
	return n
}

func newClient(opts ...kgo.Opt) *kgo.Client {
	base := []kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.ClientID("compat-franz"),
		kgo.RequestTimeoutOverhead(5 * time.Second),
		kgo.RetryTimeout(20 * time.Second),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		fatal("client", err)
	}
	return cl
}

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: franz BOOTSTRAP TOPIC GROUP MODE [COUNT [START]]")
		os.Exit(2)
	}
	bootstrap, topic, group, mode = os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	switch mode {
	case "produce":
		produce(ctx, intArg(5, 6), intArg(6, 0))
	case "consume":
		consume(ctx, intArg(5, 6))
	case "admin":
		cl := newClient()
		defer cl.Close()
		adm := kadm.NewClient(cl)
		listGroups(ctx, adm, "")
		describeGroup(ctx, adm, "")
		fetchOffsets(ctx, adm, "")
		listTopics(ctx, adm)
		endOffsets(ctx, adm)
	case "delete-offsets":
		cl := newClient()
		defer cl.Close()
		adm := kadm.NewClient(cl)
		rs, err := adm.DeleteOffsets(ctx, group, kadm.TopicsSet{topic: {0: {}}})
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			emitErr("delete_offsets", err, nil)
		} else {
			emit(map[string]any{"op": "delete_offsets"})
		}
		fetchOffsets(ctx, adm, "after_delete")
	case "txn":
		runTxn(ctx) // txn.go
	case "share":
		share(ctx, intArg(5, 6)) // share.go
	case "delete-group":
		cl := newClient()
		defer cl.Close()
		adm := kadm.NewClient(cl)
		deleteGroup(ctx, adm)
		listGroups(ctx, adm, "after")
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}

func produce(ctx context.Context, n, start int) {
	cl := newClient(kgo.DefaultProduceTopic(topic), kgo.RecordRetries(5))
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, 3, 1, nil, topic)
	switch {
	case err == nil:
		emit(map[string]any{"op": "create_topic", "partitions": resp.NumPartitions})
	case errors.Is(err, kerr.TopicAlreadyExists):
		emit(map[string]any{"op": "create_topic", "exists": true})
	default:
		fatal("create_topic", err)
	}
	for i := start; i < start+n; i++ {
		rec := &kgo.Record{
			Key:   []byte(fmt.Sprintf("k%d", i)),
			Value: []byte(fmt.Sprintf("franz-v%d", i)),
			Headers: []kgo.RecordHeader{
				{Key: "idx", Value: []byte(strconv.Itoa(i))},
				{Key: "client", Value: []byte("franz")},
			},
		}
		r, err := cl.ProduceSync(ctx, rec).First()
		if err != nil {
			fatal("produce", err)
		}
		emit(map[string]any{"op": "produced", "key": string(r.Key), "partition": r.Partition, "offset": r.Offset})
	}
	endOffsets(ctx, adm)
}

func consume(ctx context.Context, n int) {
	cl := newClient(
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	adm := kadm.NewClient(newClient())
	defer adm.Close()

	deadline, cancelPoll := context.WithTimeout(ctx, 30*time.Second)
	defer cancelPoll()
	var got []*kgo.Record
	lingerUntil := time.Time{}
	for {
		pctx := deadline
		var cancelLinger context.CancelFunc
		if !lingerUntil.IsZero() {
			// after the N-th record, keep polling briefly: a resumed consumer must get nothing more
			pctx, cancelLinger = context.WithDeadline(deadline, lingerUntil)
		}
		fs := cl.PollFetches(pctx)
		if cancelLinger != nil {
			cancelLinger()
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				emitErr("fetch", err, map[string]any{"topic": t, "partition": p})
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, r)
			hs := map[string]string{}
			for _, h := range r.Headers {
				hs[h.Key] = string(h.Value)
			}
			emit(map[string]any{"op": "record", "key": string(r.Key), "value": string(r.Value), "headers": hs,
				"partition": r.Partition, "offset": r.Offset})
		})
		if len(got) >= n && lingerUntil.IsZero() {
			lingerUntil = time.Now().Add(1500 * time.Millisecond)
		}
		if deadline.Err() != nil || (!lingerUntil.IsZero() && time.Now().After(lingerUntil)) {
			break
		}
	}
	emit(map[string]any{"op": "consumed", "count": len(got), "expected": n})
	if err := cl.CommitRecords(ctx, got...); err != nil {
		emitErr("commit", err, nil)
	} else {
		emit(map[string]any{"op": "commit"})
	}
	// the member is still in the group: it must be listed and described as Stable with this member
	listGroups(ctx, adm, "running")
	describeGroup(ctx, adm, "running")
	cl.Close() // leaves the group
	describeGroup(ctx, adm, "after")
	fetchOffsets(ctx, adm, "after")
}

func listGroups(ctx context.Context, adm *kadm.Client, phase string) {
	gs, err := adm.ListGroups(ctx)
	if err != nil {
		emitErr("list_groups", err, map[string]any{"phase": phase})
		return
	}
	out := []map[string]any{}
	for _, g := range gs.Sorted() {
		out = append(out, map[string]any{"group": g.Group, "protocol_type": g.ProtocolType, "state": g.State})
	}
	emit(map[string]any{"op": "list_groups", "phase": phase, "groups": out})
}

func describeGroup(ctx context.Context, adm *kadm.Client, phase string) {
	ds, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		err = ds.Error()
	}
	if err != nil {
		emitErr("describe_group", err, map[string]any{"phase": phase})
		return
	}
	d := ds[group]
	members := []map[string]any{}
	for _, m := range d.Members {
		assigned := map[string][]int32{}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range c.Topics {
				ps := append([]int32(nil), t.Partitions...)
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				assigned[t.Topic] = ps
			}
		}
		members = append(members, map[string]any{"member_id": m.MemberID, "client_id": m.ClientID,
			"assigned": assigned})
	}
	emit(map[string]any{"op": "describe_group", "phase": phase, "group": d.Group, "state": d.State,
		"protocol_type": d.ProtocolType, "protocol": d.Protocol, "members": members})
}

func fetchOffsets(ctx context.Context, adm *kadm.Client, phase string) {
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		emitErr("fetch_offsets", err, map[string]any{"phase": phase})
		return
	}
	offsets := map[string]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic {
			offsets[strconv.Itoa(int(o.Partition))] = o.At
		}
	})
	emit(map[string]any{"op": "fetch_offsets", "phase": phase, "offsets": offsets})
}

func listTopics(ctx context.Context, adm *kadm.Client) {
	ts, err := adm.ListTopics(ctx)
	if err != nil {
		emitErr("list_topics", err, nil)
		return
	}
	topics := map[string]int{}
	for name, t := range ts {
		topics[name] = len(t.Partitions)
	}
	emit(map[string]any{"op": "list_topics", "topics": topics})
}

func endOffsets(ctx context.Context, adm *kadm.Client) {
	los, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = los.Error()
	}
	if err != nil {
		emitErr("end_offsets", err, nil)
		return
	}
	offsets := map[string]int64{}
	los.Each(func(o kadm.ListedOffset) {
		offsets[strconv.Itoa(int(o.Partition))] = o.Offset
	})
	emit(map[string]any{"op": "end_offsets", "offsets": offsets})
}

func deleteGroup(ctx context.Context, adm *kadm.Client) {
	rs, err := adm.DeleteGroups(ctx, group)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		emitErr("delete_group", err, nil)
		return
	}
	emit(map[string]any{"op": "delete_group"})
}
