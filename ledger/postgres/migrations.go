package postgres

// migrations are the schema's versions, in order: migrations[i] takes a
// ledger from version i to i+1. Open applies those a ledger lacks, each
// in a transaction of its own with its row in schema_migrations, under an
// advisory lock so that instances starting together apply each once, and
// so a ledger written by an older version opens in this one. Never edit
// or reorder a migration that was released: add one.
//
// Keys are bytea (any bytes, compared bytewise); times are timestamptz
// (microseconds, as the algorithm package counts them); periods are
// integer microseconds.
var migrations = []struct{ name, sql string }{
	{"entries", `
CREATE TABLE ledger_entries (
	key          bytea       NOT NULL,
	id           text        NOT NULL,
	algorithm    text        NOT NULL,
	quota        bigint      NOT NULL,
	period_us    bigint      NOT NULL CHECK (period_us > 0),
	alignment    text        NOT NULL,
	window_start timestamptz NOT NULL,
	units        bigint      NOT NULL CHECK (units >= 0),
	committed_at timestamptz NOT NULL,
	PRIMARY KEY (key, id)
)`},
	// Usage reads one key's windows and Report reads windows in key
	// order; v1 had only the primary key (key, id). (Both versions came in
	// the ledger's first release; v2 is separate so that the upgrade of an
	// existing ledger is tested from the start.)
	{"window index", `
CREATE INDEX ledger_entries_window ON ledger_entries (key, window_start, period_us)`},
	// The overrides of limits set through the admin API (OverrideStore):
	// each subject's document, the audit of every change, and the one
	// version counter whose row lock serializes the changes, so that
	// versions commit in order.
	{"overrides", `
CREATE TABLE ledger_overrides (
	subject    bytea       PRIMARY KEY,
	doc        bytea       NOT NULL,
	version    bigint      NOT NULL,
	changed_by text        NOT NULL,
	changed_at timestamptz NOT NULL
);
CREATE TABLE ledger_override_audit (
	version    bigint      PRIMARY KEY,
	subject    bytea       NOT NULL,
	old_doc    bytea,
	new_doc    bytea,
	changed_by text        NOT NULL,
	changed_at timestamptz NOT NULL
);
CREATE INDEX ledger_override_audit_subject ON ledger_override_audit (subject, version);
CREATE TABLE ledger_override_version (
	id      integer PRIMARY KEY CHECK (id = 1),
	version bigint  NOT NULL
);
INSERT INTO ledger_override_version VALUES (1, 0)`},
}

// migrationLock is the key of the advisory lock that serializes
// migrations: "floodgat" in ASCII.
const migrationLock = 0x666c6f6f64676174
