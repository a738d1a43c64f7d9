package kafka

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tetra-messenger/tetra/workload/outbox"
)

var _ outbox.Log = (*Log)(nil)

// Sizes of the fetches the log issues.
const (
	// fetchBytes is the most one fetch returns (a first batch larger than
	// it still comes whole).
	fetchBytes = 1 << 20
	// countFetches bounds the fetches DeleteBelow and Stats spend counting
	// rows exactly; beyond it the rest is counted as its offset span.
	countFetches = 8
	// leaderRetries bounds the retries of a fetch after a leadership
	// change or a broken connection (each refreshes the metadata first).
	leaderRetries = 3
)

// Offsets of ListOffsets.
const (
	latest   = -1
	earliest = -2
)

// errOutOfRange: a fetch asked for an offset below the log start or past
// the high watermark.
var errOutOfRange = errors.New("kafka: offset out of range")

// Log is the outbox in a Kafka topic: one partition per slice of
// recipients, positions are offsets, reads are read_committed. It
// implements outbox.Log; the Relay appends to it. Safe for concurrent use.
type Log struct {
	cfg    Config
	cl     *kgo.Client
	adm    *kadm.Client
	parts  int32
	logger *slog.Logger
	decomp kgo.Decompressor

	mu   sync.Mutex
	meta map[string]topicMeta

	// starts holds, per partition, a lower bound of the log start offset
	// (learned from deletes and out-of-range fetches; the start only
	// grows), so scans from below it skip a round trip.
	starts  []atomic.Int64
	skipped atomic.Int64

	closeOnce sync.Once
}

type topicMeta struct {
	id      [16]byte
	leaders map[int32]int32
}

// Open connects to the brokers of cfg, creates the outbox topic
// (cfg.Partitions partitions, cleanup.policy=delete, retention.ms
// DefaultRetention) and the cursor topic (one partition,
// cleanup.policy=compact) when they do not exist, and returns the log. An
// existing outbox topic keeps its partition count. Unreachable brokers or
// topics that cannot be created give an error wrapping
// outbox.ErrUnavailable. Close the log when done.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID(cfg.ClientID))
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	l := &Log{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), logger: cfg.Logger, decomp: kgo.DefaultDecompressor(), meta: map[string]topicMeta{}}
	if err := l.ensureTopics(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	l.starts = make([]atomic.Int64, l.parts)
	return l, nil
}

// ensureTopics creates the missing topics and waits until both have a
// leader for every partition.
func (l *Log) ensureTopics(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	rf := l.cfg.ReplicationFactor
	if rf == 0 {
		rf = -1
	}
	str := func(s string) *string { return &s }
	specs := []struct {
		topic   string
		parts   int32
		configs map[string]*string
	}{
		{l.cfg.Topic, l.cfg.Partitions, map[string]*string{
			"cleanup.policy": str("delete"),
			"retention.ms":   str(strconv.FormatInt(DefaultRetention.Milliseconds(), 10)),
		}},
		{l.cfg.CursorTopic, 1, map[string]*string{"cleanup.policy": str("compact")}},
	}
	for attempt := 0; ; attempt++ {
		meta, err := l.refresh(ctx, l.cfg.Topic, l.cfg.CursorTopic)
		if err != nil {
			return unavailable("open "+l.cfg.Topic, err)
		}
		ready := true
		for _, s := range specs {
			m, ok := meta[s.topic]
			if !ok && attempt == 0 {
				resp, err := l.adm.CreateTopic(ctx, s.parts, rf, s.configs, s.topic)
				if err == nil {
					err = resp.Err
				}
				switch {
				case err == nil:
					l.logger.Info("created Kafka topic", "topic", s.topic, "partitions", s.parts)
				case !errors.Is(err, kerr.TopicAlreadyExists): // another process was first
					return unavailable("create topic "+s.topic, err)
				}
			}
			if !ok || !m.led() {
				ready = false
			}
		}
		if ready {
			l.parts = int32(len(meta[l.cfg.Topic].leaders))
			for p := range l.parts {
				if _, ok := meta[l.cfg.Topic].leaders[p]; !ok {
					return unavailable("open "+l.cfg.Topic, fmt.Errorf("partitions are not numbered 0 to %d", l.parts-1))
				}
			}
			if l.parts != l.cfg.Partitions {
				l.logger.Info("outbox topic exists with its own partition count", "topic", l.cfg.Topic, "partitions", l.parts)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return unavailable("open "+l.cfg.Topic, fmt.Errorf("topics have no leaders: %w", ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// led reports whether every partition of the topic has a leader.
func (m topicMeta) led() bool {
	for _, leader := range m.leaders {
		if leader < 0 {
			return false
		}
	}
	return len(m.leaders) > 0
}

// Close closes the log's connections. Idempotent.
func (l *Log) Close() error {
	l.closeOnce.Do(l.cl.Close)
	return nil
}

// Config returns the configuration the log runs with, defaults filled in.
func (l *Log) Config() Config { return l.cfg }

// Skipped counts records the log could not decode and left out of scans
// (records in the topic that tetra did not write).
func (l *Log) Skipped() int64 { return l.skipped.Load() }

// Partitions returns 0 to n-1, n the outbox topic's partition count when
// the log was opened.
func (l *Log) Partitions(context.Context) ([]int32, error) {
	ps := make([]int32, l.parts)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps, nil
}

// PartitionOf returns FNV-1a (32 bit) of recipient modulo the partition
// count: stable across processes and restarts.
func (l *Log) PartitionOf(recipient string) int32 { return partitionOf(recipient, l.parts) }

func (l *Log) check(op string, p int32) error {
	if p < 0 || p >= l.parts {
		return fmt.Errorf("kafka: outbox %s: unknown partition %d: topic %s has partitions 0 to %d", op, p, l.cfg.Topic, l.parts-1)
	}
	return nil
}

// Head returns the last stable offset of partition minus one (a
// ListOffsets under read_committed): every committed record lies below
// it, and every record committed later lies above, since an open
// transaction's records are at or above the last stable offset. -1 when
// nothing was ever appended. It survives deletes.
func (l *Log) Head(ctx context.Context, partition int32) (int64, error) {
	if err := l.check("head", partition); err != nil {
		return 0, err
	}
	lso, err := l.listOffset(ctx, l.cfg.Topic, partition, latest, true)
	if err != nil {
		return 0, unavailable("head", err)
	}
	return lso - 1, nil
}

// Scan returns up to limit committed records of partition with offset
// above after, in offset order, read with read_committed fetches from the
// partition's leader: records of aborted transactions and transaction
// markers are skipped, so positions have gaps. A position below the log
// start starts at the log start. Records that are not tetra outbox records
// are skipped (and counted by Skipped).
func (l *Log) Scan(ctx context.Context, partition int32, after int64, limit int) ([]outbox.Row, error) {
	if err := l.check("scan", partition); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("kafka: outbox scan: limit %d, want at least 1", limit)
	}
	out := []outbox.Row{}
	offset := max(after+1, l.starts[partition].Load())
	for len(out) < limit {
		fp, next, err := l.fetch(ctx, l.cfg.Topic, partition, offset)
		if errors.Is(err, errOutOfRange) {
			start, err := l.listOffset(ctx, l.cfg.Topic, partition, earliest, false)
			if err != nil {
				return nil, unavailable("scan", err)
			}
			l.noteStart(partition, start)
			if offset < start {
				offset = start
				continue
			}
			break // past the end
		}
		if err != nil {
			return nil, unavailable("scan", err)
		}
		end := stableEnd(fp)
		for _, rec := range fp.Records {
			if rec.Offset < offset || rec.Offset >= end {
				continue
			}
			if row, ok := l.row(partition, rec); ok {
				out = append(out, row)
				if len(out) == limit {
					break
				}
			}
		}
		if next <= offset || next >= end {
			break
		}
		offset = next
	}
	return out, nil
}

// DeleteBelow deletes every record of partition below pos with one
// DeleteRecords (which moves the log start offset), after capping pos at
// the last stable offset. It returns how many committed records it
// deleted, counted by reading them first; beyond countFetches fetches the
// rest is counted as its offset span (an overcount by the transaction
// markers in it). An error deletes nothing.
func (l *Log) DeleteBelow(ctx context.Context, partition int32, pos int64) (int64, error) {
	if err := l.check("delete", partition); err != nil {
		return 0, err
	}
	lso, err := l.listOffset(ctx, l.cfg.Topic, partition, latest, true)
	if err != nil {
		return 0, unavailable("delete", err)
	}
	pos = min(pos, lso)
	start, err := l.listOffset(ctx, l.cfg.Topic, partition, earliest, false)
	if err != nil {
		return 0, unavailable("delete", err)
	}
	l.noteStart(partition, start)
	if pos <= start {
		return 0, nil
	}
	n, _, err := l.count(ctx, partition, start, pos)
	if err != nil {
		return 0, unavailable("delete", err)
	}
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = int32(l.cfg.RequestTimeout.Milliseconds())
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = l.cfg.Topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, pos
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, l.cl)
	if err != nil {
		return 0, unavailable("delete", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition != partition {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, unavailable("delete", err)
			}
			l.noteStart(partition, p.LowWatermark)
			return n, nil
		}
	}
	return 0, unavailable("delete", fmt.Errorf("no answer for partition %d", partition))
}

// Stats returns the depth (committed records between the log start and
// the last stable offset: counted exactly within countFetches fetches,
// beyond them the rest as its offset span), the head as Head returns it,
// and the timestamp of the first record (its CreatedAt).
func (l *Log) Stats(ctx context.Context, partition int32) (outbox.Stats, error) {
	if err := l.check("stats", partition); err != nil {
		return outbox.Stats{}, err
	}
	start, err := l.listOffset(ctx, l.cfg.Topic, partition, earliest, false)
	if err != nil {
		return outbox.Stats{}, unavailable("stats", err)
	}
	l.noteStart(partition, start)
	lso, err := l.listOffset(ctx, l.cfg.Topic, partition, latest, true)
	if err != nil {
		return outbox.Stats{}, unavailable("stats", err)
	}
	st := outbox.Stats{Partition: partition, Head: lso - 1}
	if start >= lso {
		return st, nil
	}
	st.Depth, st.OldestAt, err = l.count(ctx, partition, start, lso)
	if err != nil {
		return outbox.Stats{}, unavailable("stats", err)
	}
	return st, nil
}

// count counts the committed records of partition in [from, to) and
// returns the timestamp of the first. After countFetches fetches it adds
// the offset span left instead of reading on.
func (l *Log) count(ctx context.Context, partition int32, from, to int64) (int64, time.Time, error) {
	var n int64
	var first time.Time
	offset := from
	for i := 0; offset < to; i++ {
		if i == countFetches {
			return n + (to - offset), first, nil
		}
		fp, next, err := l.fetch(ctx, l.cfg.Topic, partition, offset)
		if errors.Is(err, errOutOfRange) {
			// Deleted meanwhile (another process's GC): go on from the
			// new start.
			start, err := l.listOffset(ctx, l.cfg.Topic, partition, earliest, false)
			if err != nil {
				return 0, time.Time{}, err
			}
			l.noteStart(partition, start)
			if offset < start {
				offset = start
				continue
			}
			break
		}
		if err != nil {
			return 0, time.Time{}, err
		}
		for _, rec := range fp.Records {
			if rec.Offset >= offset && rec.Offset < to {
				if first.IsZero() {
					first = rec.Timestamp
				}
				n++
			}
		}
		if next <= offset {
			break
		}
		offset = next
	}
	return n, first, nil
}

// row turns a fetched record into an outbox row; false for records that
// are not tetra outbox records.
func (l *Log) row(partition int32, rec *kgo.Record) (outbox.Row, bool) {
	recipient, msg, err := decodeRecord(rec.Value)
	if err != nil {
		if l.skipped.Add(1) == 1 || l.skipped.Load()%1000 == 0 {
			l.logger.Warn("skipping records that are not tetra outbox records", "topic", l.cfg.Topic,
				"partition", partition, "offset", rec.Offset, "skipped", l.skipped.Load(), "err", err)
		}
		return outbox.Row{}, false
	}
	return outbox.Row{Partition: partition, Pos: rec.Offset, Recipient: recipient, Message: msg, CreatedAt: rec.Timestamp}, true
}

func (l *Log) noteStart(partition int32, start int64) {
	if partition < 0 || int(partition) >= len(l.starts) {
		return
	}
	for {
		cur := l.starts[partition].Load()
		if start <= cur || l.starts[partition].CompareAndSwap(cur, start) {
			return
		}
	}
}

// stableEnd is the first offset a read_committed reader may not see yet.
func stableEnd(fp kgo.FetchPartition) int64 {
	if fp.LastStableOffset >= 0 {
		return fp.LastStableOffset
	}
	return fp.HighWatermark
}

// fetch issues one read_committed fetch of partition of topic from offset
// to the partition's leader and returns the decoded partition (aborted
// records and control records dropped) and the offset to fetch next. A
// leadership change refreshes the metadata and retries.
func (l *Log) fetch(ctx context.Context, topic string, partition int32, offset int64) (kgo.FetchPartition, int64, error) {
	for attempt := 0; ; attempt++ {
		leader, id, err := l.leader(ctx, topic, partition)
		if err != nil {
			return kgo.FetchPartition{}, 0, err
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 0
		req.MinBytes = 1
		req.MaxBytes = fetchBytes
		req.IsolationLevel = 1 // read_committed
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, fetchBytes
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, l.cl.Broker(int(leader)))
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		var part *kmsg.FetchResponseTopicPartition
		if err == nil {
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					if resp.Topics[i].Partitions[j].Partition == partition {
						part = &resp.Topics[i].Partitions[j]
					}
				}
			}
			if part == nil {
				err = fmt.Errorf("fetch answered without partition %d", partition)
			} else {
				err = kerr.ErrorForCode(part.ErrorCode)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, kerr.OffsetOutOfRange):
			return kgo.FetchPartition{}, 0, errOutOfRange
		default:
			// The leader may have moved or the broker gone: ask again.
			l.forget(topic)
			if attempt < leaderRetries && ctx.Err() == nil && retriable(err) {
				if err := sleep(ctx, time.Duration(attempt+1)*50*time.Millisecond); err != nil {
					return kgo.FetchPartition{}, 0, err
				}
				continue
			}
			return kgo.FetchPartition{}, 0, fmt.Errorf("fetch %s/%d at %d from broker %d: %w", topic, partition, offset, leader, err)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset: offset, IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: partition,
		}, part, l.decomp, nil)
		if fp.Err != nil {
			return kgo.FetchPartition{}, 0, fmt.Errorf("decode %s/%d at %d: %w", topic, partition, offset, fp.Err)
		}
		return fp, next, nil
	}
}

// retriable: a transport error (a connection to a broker that went away
// or restarted), a retriable Kafka error, or a leadership change.
func retriable(err error) bool {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return true
	}
	return kerr.IsRetriable(err) || isLeadership(err)
}

func isLeadership(err error) bool {
	for _, e := range []error{kerr.NotLeaderForPartition, kerr.UnknownTopicOrPartition, kerr.LeaderNotAvailable,
		kerr.FencedLeaderEpoch, kerr.UnknownLeaderEpoch, kerr.UnknownTopicID, kerr.BrokerNotAvailable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// leader returns the leader of partition of topic and the topic's id,
// from the cache or a metadata request.
func (l *Log) leader(ctx context.Context, topic string, partition int32) (int32, [16]byte, error) {
	l.mu.Lock()
	m, ok := l.meta[topic]
	leader, known := m.leaders[partition]
	l.mu.Unlock()
	if !ok || !known || leader < 0 {
		meta, err := l.refresh(ctx, topic)
		if err != nil {
			return 0, [16]byte{}, err
		}
		m = meta[topic]
		leader, known = m.leaders[partition]
		if !known || leader < 0 {
			return 0, [16]byte{}, fmt.Errorf("%s/%d has no leader", topic, partition)
		}
	}
	return leader, m.id, nil
}

// ID names the outbox topic: "kafka:", the topic name and the topic's id
// (a UUID the cluster mints when the topic is created, so a topic deleted
// and created again under the same name is another outbox). A broker that
// reports no topic id (before Kafka 2.8) gives the seed brokers instead.
func (l *Log) ID(ctx context.Context) (string, error) {
	_, id, err := l.leader(ctx, l.cfg.Topic, 0)
	if err != nil {
		return "", unavailable("outbox id", err)
	}
	if id == ([16]byte{}) {
		return "kafka:" + l.cfg.Topic + "@" + strings.Join(l.cfg.Brokers, ","), nil
	}
	return "kafka:" + l.cfg.Topic + "@" + hex.EncodeToString(id[:]), nil
}

func (l *Log) forget(topic string) {
	l.mu.Lock()
	delete(l.meta, topic)
	l.mu.Unlock()
}

// refresh reads the metadata of topics and caches it. Topics that do not
// exist are absent from the result.
func (l *Log) refresh(ctx context.Context, topics ...string) (map[string]topicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, l.cl)
	if err != nil {
		return nil, err
	}
	out := map[string]topicMeta{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("metadata of %s: %w", *t.Topic, err)
		}
		m := topicMeta{id: t.TopicID, leaders: map[int32]int32{}}
		for _, p := range t.Partitions {
			m.leaders[p.Partition] = p.Leader
		}
		out[*t.Topic] = m
	}
	l.mu.Lock()
	for t, m := range out {
		l.meta[t] = m
	}
	l.mu.Unlock()
	return out, nil
}

// listOffset returns the earliest or latest offset of partition of topic;
// latest with committed is the last stable offset.
func (l *Log) listOffset(ctx context.Context, topic string, partition int32, which int64, committed bool) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	if committed {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = partition, which, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, l.cl)
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition != partition {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, fmt.Errorf("list offsets of %s/%d: %w", topic, partition, err)
			}
			return p.Offset, nil
		}
	}
	return 0, fmt.Errorf("list offsets of %s/%d: no answer", topic, partition)
}

// readCursor returns the value of the last committed cursor record with
// key in the cursor topic (read_committed), or found false when there is
// none. It reads backwards in growing windows from the last stable offset,
// so a long, not yet compacted cursor partition costs a few fetches.
func (l *Log) readCursor(ctx context.Context, key string) (seq int64, found bool, err error) {
	topic := l.cfg.CursorTopic
	start, err := l.listOffset(ctx, topic, 0, earliest, false)
	if err != nil {
		return 0, false, err
	}
	end, err := l.listOffset(ctx, topic, 0, latest, true)
	if err != nil {
		return 0, false, err
	}
	for window := int64(64); ; window *= 8 {
		from := max(start, end-window)
		offset := from
		for offset < end {
			fp, next, err := l.fetch(ctx, topic, 0, offset)
			if errors.Is(err, errOutOfRange) {
				break // compacted or deleted under us: the next window reads on
			}
			if err != nil {
				return 0, false, err
			}
			for _, rec := range fp.Records {
				if rec.Offset < end && string(rec.Key) == key {
					v, err := decodeCursor(rec.Value)
					if err != nil {
						return 0, false, fmt.Errorf("cursor record at %s/0@%d: %w", topic, rec.Offset, err)
					}
					seq, found = v, true
				}
			}
			if next <= offset {
				break
			}
			offset = next
		}
		if found || from == start {
			return seq, found, nil
		}
	}
}

// unavailable wraps a broker failure for the outbox.Log methods.
func unavailable(op string, err error) error {
	return fmt.Errorf("kafka: outbox %s: %w: %w", op, outbox.ErrUnavailable, err)
}
