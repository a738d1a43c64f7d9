package delivery

import (
	"encoding/json"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Nudge reasons (Nudge.Reason).
const (
	// NudgeOffline: the recipient had no live connection on this process
	// when the message was committed (the paper's offline recipient).
	NudgeOffline = "offline"
	// NudgeWithdrawn: the recipient's connection was withdrawn from live
	// delivery (4002, 4003, 4004) with the message sent and unacknowledged
	// (the paper's third touch of a withdrawal: "abandon touches only
	// presence + Redis + the offline nudge").
	NudgeWithdrawn = "withdrawn"
)

// Nudge is one (message, recipient) that live delivery did not reach: the
// embedding application may send the recipient a mobile push. The message
// itself is in history either way (G1); a nudge only says "pull".
type Nudge struct {
	MessageID string
	ChatID    string
	SenderID  string
	Recipient string
	Reason    string // NudgeOffline or NudgeWithdrawn
	// CloseCode is the withdrawal's close code (4002, 4003, 4004); 0 for
	// an offline recipient.
	CloseCode int
	// SentAt is the message's acceptance time.
	SentAt time.Time
}

// NudgeSink receives the nudges the engine determines and the presence of
// this process's connections (a shared sink checks offline candidates
// against the connections of the whole fleet). Config.Nudges; nil: no
// nudges. Every method is called on the delivery path and must not block.
type NudgeSink interface {
	// Nudge takes nudges for delivery. The slice is the callee's.
	Nudge(ns []Nudge)
	// Connected and Disconnected report a connection registered for, and
	// removed from, live delivery on this process.
	Connected(user, connID string)
	Disconnected(user, connID string)
}

// offlineNudges returns, for committed messages, one nudge per recipient
// other than the sender that has no connection registered on this process.
func (e *Engine) offlineNudges(batch []Committed) []Nudge {
	var out []Nudge
	for i := range batch {
		c := &batch[i]
		for _, d := range c.Rows {
			if d.Recipient == c.Message.SenderID || e.reg.hasUser(d.Recipient) {
				continue
			}
			out = append(out, Nudge{MessageID: c.Message.ID, ChatID: c.Message.ChatID, SenderID: c.Message.SenderID,
				Recipient: d.Recipient, Reason: NudgeOffline, SentAt: c.Message.SentAt})
		}
	}
	return out
}

// nudgesWithdrawal reports whether a withdrawal for reason nudges the
// messages the connection held unacknowledged: the reapers' withdrawals
// do; a superseded connection (its device reconnected), a shutdown and a
// lapsed owner (the client reconnects elsewhere) do not.
func nudgesWithdrawal(reason string) bool {
	switch reason {
	case ReasonIdle, ReasonOverload, ReasonAttempts:
		return true
	}
	return false
}

// withdrawnNudges returns one nudge per message in m's push window (sent,
// or about to be, and unacknowledged). Messages still waiting behind a full
// window are not enumerated (docs/nudge.md).
func withdrawnNudges(m *Member, code int) []Nudge {
	m.mu.Lock()
	frames := make([][]byte, 0, len(m.out))
	for _, o := range m.out {
		frames = append(frames, o.frame)
	}
	m.mu.Unlock()
	out := make([]Nudge, 0, len(frames))
	for _, f := range frames {
		var msg protocol.Message
		if err := json.Unmarshal(f, &msg); err != nil || msg.MessageID == "" {
			continue
		}
		out = append(out, Nudge{MessageID: msg.MessageID, ChatID: msg.ChatID, SenderID: msg.SenderID,
			Recipient: m.client.User, Reason: NudgeWithdrawn, CloseCode: code, SentAt: msg.SentAt})
	}
	return out
}
