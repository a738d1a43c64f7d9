package redisinfo

import (
	"fmt"
	"strings"
)

// Fields are the key:value lines of an INFO reply, of every section it
// holds.
type Fields map[string]string

// Parse reads the key:value lines of INFO text (one or more sections, "\r\n"
// or "\n" line ends); "# Section" headers and blank lines are skipped, and
// a value keeps everything after the first colon. Malformed lines (no
// colon) are ignored. Later keys win: pass the sections of one server.
func Parse(info string) Fields {
	out := Fields{}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// Role is INFO replication's role: "master", "slave" (a replica), or ""
// when the reply lacks the replication section.
func (f Fields) Role() string { return f["role"] }

// Identity returns the identity of the server that answered; Addr is left
// empty (the caller knows where it asked). Fields missing from the reply
// are empty: INFO "server" gives RunID, INFO "replication" the
// replication IDs.
func (f Fields) Identity() Identity {
	return Identity{RunID: f["run_id"], MasterReplID: f["master_replid"], MasterReplID2: f["master_replid2"]}
}

// Identity names one incarnation of a Redis master.
type Identity struct {
	// RunID is INFO server's run_id: new on every start of the process.
	RunID string
	// MasterReplID is INFO replication's master_replid: new when the
	// server is promoted (or, on a master, when its first replica
	// attaches without a backlog: Renewed).
	MasterReplID string
	// MasterReplID2 is INFO's master_replid2: the replication ID this
	// server followed before it was promoted (NoReplID when none). A
	// replica promoted by Sentinel is another process (its run_id
	// differs), so this, equal to the old master's master_replid, is what
	// tells a promotion from a restart. Not part of the identity (Same,
	// Key).
	MasterReplID2 string
	// Addr is where INFO was read (host:port); informational only, never
	// compared.
	Addr string
}

// NoReplID is INFO's master_replid2 when there is no previous history.
const NoReplID = "0000000000000000000000000000000000000000"

// Key is the identity as the waterline index records it at MarkPrimed and
// compares it before every GC pass: "run_id/master_replid". The index's
// scripts compute the same string inside Redis (waterline/redis
// identityLua). Two identities are Same exactly when their Keys are equal.
func (a Identity) Key() string { return a.RunID + "/" + a.MasterReplID }

// Same reports whether a and b are the same master incarnation.
func (a Identity) Same(b Identity) bool { return a.Key() == b.Key() }

// PromotedFrom reports whether a is old's successor by promotion: the
// same process with a new replication ID (REPLICAOF NO ONE; not Renewed),
// or a replica whose previous replication ID (master_replid2) is old's
// master_replid, so it followed old's history until it was promoted.
// Anything else (a new process with a history of its own: a restart
// without persistence, another server at the address) is a restart.
func (a Identity) PromotedFrom(old Identity) bool {
	if a.RunID == old.RunID {
		return a.MasterReplID != old.MasterReplID && !a.Renewed(old)
	}
	return old.MasterReplID != "" && a.MasterReplID2 == old.MasterReplID
}

// Renewed reports whether a is old's process with a fresh replication ID
// and no previous one: a master that had no replication backlog creates
// one, with a new ID and master_replid2 cleared, when its first replica
// attaches (Redis' syncCommand). Its data did not change: not a failover.
// (A process that was a replica and was promoted in between has its old
// ID in master_replid2, so it is not Renewed.)
func (a Identity) Renewed(old Identity) bool {
	return a.RunID == old.RunID && a.MasterReplID != old.MasterReplID && a.MasterReplID2 == NoReplID
}

// String is the identity for people: shortened IDs and the address.
func (a Identity) String() string {
	return fmt.Sprintf("run_id=%s master_replid=%s at %s", short(a.RunID), short(a.MasterReplID), a.Addr)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
