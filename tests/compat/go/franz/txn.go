// franz-go transactions (mode "txn"; tests/compat/test_transactions_clients.py).
//
// Usage: franz BOOTSTRAP TOPIC GROUP txn
//
// One run, in order (each step prints one JSON line {"op": STEP, ...}; a failed step adds "error" with the text,
// "error_name" and "error_code" of the Kafka error it wraps, if any; later steps run where they can):
//
//	create        TOPIC and TOPIC-in, 1 partition each (kadm)
//	commit        client A (TransactionalID GROUP-txn): BeginTransaction, ProduceSync c-0..c-2, EndTransaction(TryCommit)
//	abort         A: BeginTransaction, ProduceSync a-0 a-1, EndTransaction(TryAbort)
//	fence_open    A: BeginTransaction, ProduceSync f-0 (left open)
//	fence_init    client B with the same TransactionalID: ProducerID (InitProducerId: fences A, aborts its transaction)
//	fenced_commit A: EndTransaction(TryCommit): must fail
//	b_commit      B: BeginTransaction, ProduceSync b-0, EndTransaction(TryCommit)
//	input         a plain producer: in-0..in-5 to TOPIC-in
//	ctp_commit    a GroupTransactSession (group GROUP, TransactionalID GROUP-ctp, read_committed) polls in-0..in-3
//	              (bounded: it stops polling at 4 records), Begin, ProduceSync OUT-in-i, End(TryCommit)
//	offsets_commit  GROUP's committed offsets (kadm FetchOffsets; asked again while the input has none, at most
//	              50 times 100 ms apart: Kafka writes the commit's markers after EndTxn answers)
//	ctp_abort     the session polls in-4 in-5, Begin, ProduceSync OUT-in-4 OUT-in-5, End(TryAbort)
//	ends          ListEndOffsets (log end) and ListCommittedOffsets (LSO) of TOPIC, once they are the same (the
//	              abort's marker is written; asked at most 50 times, 100 ms apart)
//	offsets_abort GROUP's committed offsets again (unchanged)
//	read          TOPIC from the start, read_committed and read_uncommitted ("isolation"): values and offsets, until
//	              the count that isolation level may see came (8, 13) or 15 s passed, then 1 s more (nothing more
//	              may come)
package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func txnErr(op string, err error, extra map[string]any) {
	m := map[string]any{}
	for k, v := range extra {
		m[k] = v
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		m["error_name"] = ke.Message
		m["error_code"] = ke.Code
	}
	emitErr(op, err, m)
}

func txnProduce(ctx context.Context, produceSync func(context.Context, ...*kgo.Record) kgo.ProduceResults,
	t string, values ...string) ([]int64, error) {
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: t, Partition: 0, Value: []byte(v)})
	}
	var offsets []int64
	for _, r := range produceSync(ctx, recs...) {
		if r.Err != nil {
			return offsets, r.Err
		}
		offsets = append(offsets, r.Record.Offset)
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	return offsets, nil
}

// txnClient is a transactional producer to TOPIC-0 (a manual partitioner: every record names partition 0).
func txnClient(id string) *kgo.Client {
	return newClient(kgo.TransactionalID(id), kgo.TransactionTimeout(60*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(5))
}

func runTxn(ctx context.Context) {
	in := topic + "-in"
	adm := kadm.NewClient(newClient())
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		fatal("create", err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, in); err != nil {
		fatal("create", err)
	}
	emit(map[string]any{"op": "create"})

	// -- commit, abort ---------------------------------------------------------------------------------------
	a := txnClient(group + "-txn")
	defer a.Close()
	// end: "commit", "abort" or "open" (the transaction is left open)
	round := func(op string, cl *kgo.Client, end string, values ...string) bool {
		if err := cl.BeginTransaction(); err != nil {
			txnErr(op, err, map[string]any{"at": "begin"})
			return false
		}
		offsets, err := txnProduce(ctx, cl.ProduceSync, topic, values...)
		if err != nil {
			txnErr(op, err, map[string]any{"at": "produce"})
			_ = cl.AbortBufferedRecords(ctx)
			_ = cl.EndTransaction(ctx, kgo.TryAbort)
			return false
		}
		if end != "open" {
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(end == "commit")); err != nil {
				txnErr(op, err, map[string]any{"at": "end", "offsets": offsets})
				return false
			}
		}
		emit(map[string]any{"op": op, "offsets": offsets})
		return true
	}
	round("commit", a, "commit", "c-0", "c-1", "c-2")
	round("abort", a, "abort", "a-0", "a-1")

	// -- fencing: B with A's transactional id while A's transaction is open ------------------------------------
	if round("fence_open", a, "open", "f-0") {
		b := txnClient(group + "-txn")
		defer b.Close()
		if _, epoch, err := b.ProducerID(ctx); err != nil {
			txnErr("fence_init", err, nil)
		} else {
			emit(map[string]any{"op": "fence_init", "epoch_positive": epoch > 0})
		}
		if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
			txnErr("fenced_commit", err, nil)
		} else {
			emit(map[string]any{"op": "fenced_commit"})
		}
		round("b_commit", b, "commit", "b-0")
	}

	// -- consume-transform-produce in GROUP ----------------------------------------------------------------------
	p := newClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var inputs []string
	for i := 0; i < 6; i++ {
		inputs = append(inputs, fmt.Sprintf("in-%d", i))
	}
	if offsets, err := txnProduce(ctx, p.ProduceSync, in, inputs...); err != nil {
		txnErr("input", err, nil)
	} else {
		emit(map[string]any{"op": "input", "offsets": offsets})
	}
	p.Close()

	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(bootstrap), kgo.ClientID("compat-franz"),
		kgo.RequestTimeoutOverhead(5*time.Second), kgo.RetryTimeout(20*time.Second),
		kgo.TransactionalID(group+"-ctp"), kgo.TransactionTimeout(60*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		fatal("ctp_session", err)
	}
	ctpRound := func(op string, n int, end kgo.TransactionEndTry) {
		var got []*kgo.Record
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		for len(got) < n && pctx.Err() == nil {
			fs := s.PollRecords(pctx, n-len(got))
			fs.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					txnErr(op, err, map[string]any{"at": "poll"})
				}
			})
			got = append(got, fs.Records()...)
		}
		cancel()
		consumed := []string{}
		consumedOffsets := []int64{}
		var outs []string
		for _, r := range got {
			consumed = append(consumed, string(r.Value))
			consumedOffsets = append(consumedOffsets, r.Offset)
			outs = append(outs, "OUT-"+string(r.Value))
		}
		if len(got) != n {
			emitErr(op, fmt.Errorf("polled %d records, wanted %d", len(got), n),
				map[string]any{"at": "poll", "consumed": consumed})
			return
		}
		if err := s.Begin(); err != nil {
			txnErr(op, err, map[string]any{"at": "begin"})
			return
		}
		offsets, err := txnProduce(ctx, s.ProduceSync, topic, outs...)
		if err != nil {
			txnErr(op, err, map[string]any{"at": "produce"})
		}
		committed, err := s.End(ctx, end)
		if err != nil {
			txnErr(op, err, map[string]any{"at": "end", "offsets": offsets})
			return
		}
		emit(map[string]any{"op": op, "consumed": consumed, "consumed_offsets": consumedOffsets,
			"offsets": offsets, "committed": committed})
	}
	// Kafka's EndTxn answers before the markers are written (the coordinator writes them next): what the group
	// and readers see settles a moment later. groupOffsets(op, true) asks again (at most 50 times, 100 ms apart)
	// while the input partition has no committed offset; settle asks until the LSO is the log end.
	inTP := in + "-0"
	groupOffsets := func(op string, wait bool) {
		for attempt := 1; ; attempt++ {
			offs, err := adm.FetchOffsets(ctx, group)
			if err == nil {
				err = offs.Error()
			}
			if err != nil {
				txnErr(op, err, nil)
				return
			}
			offsets := map[string]int64{}
			offs.Each(func(o kadm.OffsetResponse) {
				offsets[o.Topic+"-"+strconv.Itoa(int(o.Partition))] = o.At
			})
			if o, ok := offsets[inTP]; wait && (!ok || o < 0) && attempt < 50 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			emit(map[string]any{"op": op, "offsets": offsets})
			return
		}
	}
	ctpRound("ctp_commit", 4, kgo.TryCommit)
	groupOffsets("offsets_commit", true)
	ctpRound("ctp_abort", 2, kgo.TryAbort)
	s.Close()

	// -- what readers see ----------------------------------------------------------------------------------------
	for attempt := 1; ; attempt++ {
		ends := map[string]any{"op": "ends"}
		if los, err := adm.ListEndOffsets(ctx, topic); err == nil && los.Error() == nil {
			if o, ok := los.Lookup(topic, 0); ok {
				ends["log_end"] = o.Offset
			}
		} else {
			ends["error"] = fmt.Sprint(err, los.Error())
		}
		if los, err := adm.ListCommittedOffsets(ctx, topic); err == nil && los.Error() == nil {
			if o, ok := los.Lookup(topic, 0); ok {
				ends["lso"] = o.Offset
			}
		} else {
			ends["error"] = fmt.Sprint(err, los.Error())
		}
		if _, failed := ends["error"]; failed || ends["lso"] == ends["log_end"] || attempt >= 50 {
			emit(ends)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	groupOffsets("offsets_abort", false)
	readTopic(ctx, "read_committed", kgo.ReadCommitted(), readCommittedCount)
	readTopic(ctx, "read_uncommitted", kgo.ReadUncommitted(), readUncommittedCount)
}

// What the readers must see at most: c-0..c-2, b-0, OUT-in-0..3 committed; a-0 a-1, f-0, OUT-in-4 OUT-in-5 not.
const readCommittedCount, readUncommittedCount = 8, 13

// readTopic reads TOPIC-0 from the start until n records came or 15 s passed, then polls 1 s more (nothing more
// may come).
func readTopic(ctx context.Context, iso string, level kgo.IsolationLevel, n int) {
	cl := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(level), kgo.FetchMaxWait(300*time.Millisecond))
	defer cl.Close()
	values, offsets := []string{}, []int64{}
	deadline, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	lingerUntil := time.Time{}
	for {
		pctx := deadline
		var cancelLinger context.CancelFunc
		if !lingerUntil.IsZero() {
			pctx, cancelLinger = context.WithDeadline(deadline, lingerUntil)
		}
		fs := cl.PollFetches(pctx)
		if cancelLinger != nil {
			cancelLinger()
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				txnErr("read", err, map[string]any{"isolation": iso})
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			values = append(values, string(r.Value))
			offsets = append(offsets, r.Offset)
		})
		if lingerUntil.IsZero() && len(values) >= n {
			lingerUntil = time.Now().Add(time.Second)
		}
		if deadline.Err() != nil || (!lingerUntil.IsZero() && time.Now().After(lingerUntil)) {
			break
		}
	}
	emit(map[string]any{"op": "read", "isolation": iso, "values": values, "offsets": offsets})
}
