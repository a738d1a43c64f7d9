package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

func BenchmarkScratch(b *testing.B) {
	base := `CREATE TABLE history (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL UNIQUE, chat_id TEXT NOT NULL,
	sender_id TEXT NOT NULL, sender_device TEXT NOT NULL, correlation_id TEXT NOT NULL, body TEXT NOT NULL, sent_at INTEGER NOT NULL,
	UNIQUE(sender_id, correlation_id));
	CREATE INDEX history_chat ON history(chat_id, id);
	CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, recipient TEXT NOT NULL, history_id INTEGER NOT NULL %s, created_at INTEGER NOT NULL);`
	for _, v := range []struct {
		name, fk, extra string
		rows           int
		dsn            string
	}{
		{"all-ckpt10k", "REFERENCES history(id)", "CREATE INDEX o_h ON outbox(history_id); CREATE INDEX h_sent ON history(sent_at);", 2, "&_pragma=wal_autocheckpoint(10000)"},
		{"all-cache64m", "REFERENCES history(id)", "CREATE INDEX o_h ON outbox(history_id); CREATE INDEX h_sent ON history(sent_at);", 2, "&_pragma=cache_size(-65536)"},
		{"all-both", "REFERENCES history(id)", "CREATE INDEX o_h ON outbox(history_id); CREATE INDEX h_sent ON history(sent_at);", 2, "&_pragma=cache_size(-65536)&_pragma=wal_autocheckpoint(10000)"},
		{"minimal-1row", "", "", 1, ""},
		{"minimal-2rows", "", "", 2, ""},
		{"sentidx-2rows", "", "CREATE INDEX h_sent ON history(sent_at);", 2, ""},
		{"fk+idx-2rows", "REFERENCES history(id)", "CREATE INDEX o_h ON outbox(history_id);", 2, ""},
		{"all-2rows", "REFERENCES history(id)", "CREATE INDEX o_h ON outbox(history_id); CREATE INDEX h_sent ON history(sent_at);", 2, ""},
	} {
		b.Run(v.name, func(b *testing.B) {
			db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "x.db")+"?_journal_mode=WAL&_synchronous=FULL&_foreign_keys=1&_txlock=immediate"+v.dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			if _, err := db.Exec(fmt.Sprintf(base, v.fk) + v.extra); err != nil {
				b.Fatal(err)
			}
			insH, _ := db.Prepare(`INSERT INTO history (message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at) VALUES (?,?,?,?,?,?,?)`)
			insO, _ := db.Prepare(`INSERT INTO outbox (recipient, history_id, created_at) VALUES (?,?,?)`)
			n := 0
			start := time.Now()
			for b.Loop() {
				tx, _ := db.Begin()
				h, o := tx.Stmt(insH), tx.Stmt(insO)
				for range 36 {
					r, err := h.Exec(ulid.Make().String(), fmt.Sprintf("c_01KB00000000000000000000%02d", n%100), fmt.Sprintf("u%03d", n%100), "d", fmt.Sprint(n), "hello, this is a message of about sixty bytes of text....", time.Now().UnixNano())
					if err != nil {
						b.Fatal(err)
					}
					id, _ := r.LastInsertId()
					for k := range v.rows {
						if _, err := o.Exec(fmt.Sprintf("u%03d", (n+k)%100), id, time.Now().UnixNano()); err != nil {
							b.Fatal(err)
						}
					}
					n++
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
