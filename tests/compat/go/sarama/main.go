// IBM/sarama side of kafkalog's compatibility lab (default configuration: Kafka version 2.8, versions negotiated
// down with ApiVersions, range assignor, acks=1, FNV-1a hash partitioner).
//
// Usage: sarama BOOTSTRAP TOPIC GROUP MODE [COUNT [START]]
//
// Modes (each prints one JSON object per line on stdout, "op" names what the line reports; a failed call is
// {"op": ..., "error": "..."} and the program goes on with the next step where it can):
//
//	produce N START  create TOPIC (3 partitions) with ClusterAdmin, produce records START..START+N-1 keyed
//	                 "k<i>" with headers (SyncProducer), print each record's partition and offset, then end offsets
//	consume N        consume N records in GROUP (ConsumerGroup), mark and commit them, describe the group while
//	                 the member runs, leave, then describe the group again and fetch its committed offsets
//	admin            list groups, describe GROUP, fetch its committed offsets, list topics, end offsets
//	delete-offsets   delete GROUP's committed offset of partition 0 (OffsetDelete), then fetch its offsets
//	delete-group     delete GROUP, then list groups
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
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

func config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "compat-sarama"
	cfg.Producer.Return.Successes = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Return.Errors = true
	cfg.Admin.Timeout = 20 * time.Second
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: sarama BOOTSTRAP TOPIC GROUP MODE [COUNT [START]]")
		os.Exit(2)
	}
	bootstrap, topic, group, mode = os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	// a hung program is the test's failure, never a hung test
	time.AfterFunc(90*time.Second, func() { fatal("timeout", errors.New("sarama program ran over 90 s")) })
	switch mode {
	case "produce":
		produce(intArg(5, 6), intArg(6, 0))
	case "consume":
		consume(intArg(5, 6))
	case "admin":
		client, adm := newAdmin()
		defer adm.Close()
		listGroups(adm, "")
		describeGroup(adm, "")
		fetchOffsets(adm, "")
		listTopics(adm)
		endOffsets(client)
	case "delete-offsets":
		_, adm := newAdmin()
		defer adm.Close()
		if err := adm.DeleteConsumerGroupOffset(group, topic, 0); err != nil {
			emitErr("delete_offsets", err, nil)
		} else {
			emit(map[string]any{"op": "delete_offsets"})
		}
		fetchOffsets(adm, "after_delete")
	case "delete-group":
		_, adm := newAdmin()
		defer adm.Close()
		if err := adm.DeleteConsumerGroup(group); err != nil {
			emitErr("delete_group", err, nil)
		} else {
			emit(map[string]any{"op": "delete_group"})
		}
		listGroups(adm, "after")
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}

func newAdmin() (sarama.Client, sarama.ClusterAdmin) {
	client, err := sarama.NewClient([]string{bootstrap}, config())
	if err != nil {
		fatal("client", err)
	}
	adm, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		fatal("admin", err)
	}
	return client, adm
}

func produce(n, start int) {
	client, adm := newAdmin()
	defer adm.Close()
	err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false)
	switch {
	case err == nil:
		emit(map[string]any{"op": "create_topic"})
	case errors.Is(err, sarama.ErrTopicAlreadyExists):
		emit(map[string]any{"op": "create_topic", "exists": true})
	default:
		fatal("create_topic", err)
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		fatal("producer", err)
	}
	for i := start; i < start+n; i++ {
		msg := &sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("sarama-v%d", i)),
			Headers: []sarama.RecordHeader{
				{Key: []byte("idx"), Value: []byte(strconv.Itoa(i))},
				{Key: []byte("client"), Value: []byte("sarama")},
			},
		}
		p, off, err := producer.SendMessage(msg)
		if err != nil {
			fatal("produce", err)
		}
		emit(map[string]any{"op": "produced", "key": fmt.Sprintf("k%d", i), "partition": p, "offset": off})
	}
	if err := producer.Close(); err != nil {
		emitErr("producer_close", err, nil)
	}
	endOffsets(client)
}

// handler collects records from every claim until the main goroutine has seen enough and cancels the session
type handler struct {
	mu      sync.Mutex
	count   int
	enough  chan struct{}
	need    int
	session chan sarama.ConsumerGroupSession
}

func (h *handler) Setup(s sarama.ConsumerGroupSession) error {
	select {
	case h.session <- s:
	default:
	}
	return nil
}

func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-s.Context().Done():
			return nil
		case m, ok := <-c.Messages():
			if !ok {
				return nil
			}
			hs := map[string]string{}
			for _, h := range m.Headers {
				hs[string(h.Key)] = string(h.Value)
			}
			h.mu.Lock()
			emit(map[string]any{"op": "record", "key": string(m.Key), "value": string(m.Value), "headers": hs,
				"partition": m.Partition, "offset": m.Offset})
			s.MarkMessage(m, "")
			h.count++
			if h.count == h.need {
				close(h.enough)
			}
			h.mu.Unlock()
		}
	}
}

func consume(n int) {
	cfg := config()
	cg, err := sarama.NewConsumerGroup([]string{bootstrap}, group, cfg)
	if err != nil {
		fatal("consumer_group", err)
	}
	go func() {
		for err := range cg.Errors() {
			emitErr("consumer_error", err, nil)
		}
	}()
	_, adm := newAdmin()
	defer adm.Close()

	h := &handler{enough: make(chan struct{}), need: n, session: make(chan sarama.ConsumerGroupSession, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				emitErr("consume", err, nil)
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	var session sarama.ConsumerGroupSession
	select {
	case session = <-h.session:
	case <-time.After(30 * time.Second):
	}
	select {
	case <-h.enough:
	case <-time.After(30 * time.Second):
	}
	// keep consuming briefly: a resumed consumer must get nothing more
	time.Sleep(1500 * time.Millisecond)
	h.mu.Lock()
	emit(map[string]any{"op": "consumed", "count": h.count, "expected": n})
	h.mu.Unlock()
	if session != nil {
		session.Commit() // errors, if any, arrive on cg.Errors()
		emit(map[string]any{"op": "commit"})
	} else {
		emitErr("commit", errors.New("no consumer group session was set up"), nil)
	}
	// the member is still in the group: it must be listed and described as Stable with this member
	listGroups(adm, "running")
	describeGroup(adm, "running")
	cancel()
	<-done
	if err := cg.Close(); err != nil { // leaves the group
		emitErr("consumer_close", err, nil)
	}
	describeGroup(adm, "after")
	fetchOffsets(adm, "after")
}

func listGroups(adm sarama.ClusterAdmin, phase string) {
	gs, err := adm.ListConsumerGroups()
	if err != nil {
		emitErr("list_groups", err, map[string]any{"phase": phase})
		return
	}
	names := make([]string, 0, len(gs))
	for g := range gs {
		names = append(names, g)
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, g := range names {
		out = append(out, map[string]any{"group": g, "protocol_type": gs[g]})
	}
	emit(map[string]any{"op": "list_groups", "phase": phase, "groups": out})
}

func describeGroup(adm sarama.ClusterAdmin, phase string) {
	ds, err := adm.DescribeConsumerGroups([]string{group})
	if err == nil && len(ds) != 1 {
		err = fmt.Errorf("DescribeConsumerGroups answered %d groups", len(ds))
	}
	if err == nil && ds[0].Err != sarama.ErrNoError {
		err = ds[0].Err
	}
	if err != nil {
		emitErr("describe_group", err, map[string]any{"phase": phase})
		return
	}
	d := ds[0]
	members := []map[string]any{}
	for id, m := range d.Members {
		assigned := map[string][]int32{}
		a, err := m.GetMemberAssignment()
		if err != nil {
			emitErr("member_assignment", err, map[string]any{"phase": phase})
		} else if a != nil {
			for t, ps := range a.Topics {
				ps = append([]int32(nil), ps...)
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				assigned[t] = ps
			}
		}
		members = append(members, map[string]any{"member_id": id, "client_id": m.ClientId, "assigned": assigned})
	}
	emit(map[string]any{"op": "describe_group", "phase": phase, "group": d.GroupId, "state": d.State,
		"protocol_type": d.ProtocolType, "protocol": d.Protocol, "members": members})
}

func fetchOffsets(adm sarama.ClusterAdmin, phase string) {
	r, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	if err == nil && r.Err != sarama.ErrNoError {
		err = r.Err
	}
	if err == nil && r.GroupError() != sarama.ErrNoError {
		err = r.GroupError()
	}
	if err != nil {
		emitErr("fetch_offsets", err, map[string]any{"phase": phase})
		return
	}
	offsets := map[string]int64{}
	for p := int32(0); p < 3; p++ {
		b := r.GetBlock(topic, p)
		if b == nil {
			continue
		}
		if b.Err != sarama.ErrNoError {
			emitErr("fetch_offsets", b.Err, map[string]any{"phase": phase, "partition": p})
			return
		}
		offsets[strconv.Itoa(int(p))] = b.Offset
	}
	emit(map[string]any{"op": "fetch_offsets", "phase": phase, "offsets": offsets})
}

func listTopics(adm sarama.ClusterAdmin) {
	ts, err := adm.ListTopics()
	if err != nil {
		emitErr("list_topics", err, nil)
		return
	}
	topics := map[string]int{}
	for name, t := range ts {
		topics[name] = int(t.NumPartitions)
	}
	emit(map[string]any{"op": "list_topics", "topics": topics})
}

func endOffsets(client sarama.Client) {
	if err := client.RefreshMetadata(topic); err != nil {
		emitErr("end_offsets", err, nil)
		return
	}
	ps, err := client.Partitions(topic)
	if err != nil {
		emitErr("end_offsets", err, nil)
		return
	}
	offsets := map[string]int64{}
	for _, p := range ps {
		off, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			emitErr("end_offsets", err, map[string]any{"partition": p})
			return
		}
		offsets[strconv.Itoa(int(p))] = off
	}
	emit(map[string]any{"op": "end_offsets", "offsets": offsets})
}
