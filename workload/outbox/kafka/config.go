package kafka

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Defaults and limits of Config.
const (
	// DefaultPartitions is the partition count of an outbox topic that Open
	// creates when Config.Partitions is zero.
	DefaultPartitions = 8
	// MaxPartitions is the largest Config.Partitions accepted.
	MaxPartitions = 4096
	// DefaultRetention is the retention.ms of an outbox topic Open creates:
	// longer than the outbox age backstop (default 26 h), so Kafka never
	// deletes a row before tetra's own GC would, and far shorter than the
	// history retention (default 90 days), so no outbox record outlives
	// its history row.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultRequestTimeout bounds Open's requests when
	// Config.RequestTimeout is zero.
	DefaultRequestTimeout = 10 * time.Second
)

// topicName is Kafka's rule for topic names.
var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// Config configures Open. ParseURL builds one from a kafka:// URL.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Topic is the outbox topic, partitioned by recipient. Required.
	Topic string
	// CursorTopic holds the relay's cursor (the last history Seq it
	// relayed), written in the same transaction as the records; default
	// Topic + "-cursor". Open creates it compacted, with one partition.
	CursorTopic string
	// Partitions is the partition count of the outbox topic when Open
	// creates it; default DefaultPartitions, allowed 0 to MaxPartitions.
	// An existing topic keeps its count. Do not add partitions to a topic
	// in use: PartitionOf would move recipients between partitions.
	Partitions int32
	// ReplicationFactor of topics Open creates; 0 means the broker's
	// default.replication.factor.
	ReplicationFactor int16
	// TransactionalID fences the relay's zombies: a relay that starts with
	// it aborts whatever an earlier holder left open, and an earlier
	// holder that tries to commit afterwards is refused. Default
	// "tetra-relay." + Topic. Every tetra process on one topic uses the
	// same id; one of them relays at a time (see Relay).
	TransactionalID string
	// ClientID names tetra's connections in broker logs; default "tetra".
	ClientID string
	// RequestTimeout bounds each of Open's requests; default
	// DefaultRequestTimeout. Log methods are bounded by their context.
	RequestTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ParseURL parses kafka://host:port[,host:port...]/topic with optional
// query parameters partitions, replication, cursor-topic and
// transactional-id, for example
// kafka://k1:9092,k2:9092/tetra-outbox?partitions=16&replication=3.
func ParseURL(raw string) (Config, error) {
	const form = "want kafka://host:port[,host:port]/topic[?partitions=N&replication=N&cursor-topic=T&transactional-id=ID]"
	rest, ok := strings.CutPrefix(raw, "kafka://")
	if !ok {
		return Config{}, fmt.Errorf("kafka: outbox URL %q: %s", raw, form)
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, topic, ok := strings.Cut(rest, "/")
	if !ok || hosts == "" || topic == "" {
		return Config{}, fmt.Errorf("kafka: outbox URL %q: %s", raw, form)
	}
	cfg := Config{Topic: topic}
	for _, h := range strings.Split(hosts, ",") {
		cfg.Brokers = append(cfg.Brokers, strings.TrimSpace(h))
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Config{}, fmt.Errorf("kafka: outbox URL %q: query: %w", raw, err)
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "partitions":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return Config{}, fmt.Errorf("kafka: outbox URL: partitions=%q: want an integer", v)
			}
			cfg.Partitions = int32(n)
		case "replication":
			n, err := strconv.ParseInt(v, 10, 16)
			if err != nil {
				return Config{}, fmt.Errorf("kafka: outbox URL: replication=%q: want an integer", v)
			}
			cfg.ReplicationFactor = int16(n)
		case "cursor-topic":
			cfg.CursorTopic = v
		case "transactional-id":
			cfg.TransactionalID = v
		default:
			return Config{}, fmt.Errorf("kafka: outbox URL: unknown parameter %q (known: partitions, replication, cursor-topic, transactional-id)", k)
		}
	}
	if _, err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// URL renders c as a kafka:// URL that ParseURL reads back (defaults are
// left out).
func (c Config) URL() string {
	u := "kafka://" + strings.Join(c.Brokers, ",") + "/" + c.Topic
	q := url.Values{}
	if c.Partitions != 0 {
		q.Set("partitions", strconv.Itoa(int(c.Partitions)))
	}
	if c.ReplicationFactor != 0 {
		q.Set("replication", strconv.Itoa(int(c.ReplicationFactor)))
	}
	if c.CursorTopic != "" {
		q.Set("cursor-topic", c.CursorTopic)
	}
	if c.TransactionalID != "" {
		q.Set("transactional-id", c.TransactionalID)
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// validate checks c and returns it with defaults filled in. Errors name the
// field and the allowed values.
func (c Config) validate() (Config, error) {
	if len(c.Brokers) == 0 {
		return c, fmt.Errorf("kafka: Config.Brokers is required (host:port of at least one broker)")
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return c, fmt.Errorf("kafka: Config.Brokers: %q is not host:port", b)
		}
	}
	if !topicName.MatchString(c.Topic) {
		return c, fmt.Errorf("kafka: Config.Topic %q: want 1 to 249 of [a-zA-Z0-9._-]", c.Topic)
	}
	if c.CursorTopic == "" {
		c.CursorTopic = c.Topic + "-cursor"
	}
	if !topicName.MatchString(c.CursorTopic) || c.CursorTopic == c.Topic {
		return c, fmt.Errorf("kafka: Config.CursorTopic %q: want 1 to 249 of [a-zA-Z0-9._-], not the outbox topic", c.CursorTopic)
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		return c, fmt.Errorf("kafka: Config.Partitions %d: want 0 (default %d) to %d", c.Partitions, DefaultPartitions, MaxPartitions)
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ReplicationFactor < 0 {
		return c, fmt.Errorf("kafka: Config.ReplicationFactor %d: want 0 (broker default) or more", c.ReplicationFactor)
	}
	if c.TransactionalID == "" {
		c.TransactionalID = "tetra-relay." + c.Topic
	}
	if c.ClientID == "" {
		c.ClientID = "tetra"
	}
	if c.RequestTimeout < 0 {
		return c, fmt.Errorf("kafka: Config.RequestTimeout %v: want 0 (default %v) or more", c.RequestTimeout, DefaultRequestTimeout)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
