package sqlite

// migrations are the schema's versions, in order: migrations[i] takes a
// ledger from version i to i+1. Open applies those a ledger lacks, each
// in a transaction of its own with its row in schema_migrations, so a
// ledger written by an older version opens in this one. Never edit or
// reorder a migration that was released: add one.
//
// Times are integer microseconds since the Unix epoch (UTC), as in the
// algorithm package; keys are BLOBs, compared bytewise.
var migrations = []struct{ name, sql string }{
	{"entries", `
CREATE TABLE ledger_entries (
	key             BLOB    NOT NULL,
	id              TEXT    NOT NULL,
	algorithm       TEXT    NOT NULL,
	quota           INTEGER NOT NULL,
	period_us       INTEGER NOT NULL CHECK (period_us > 0),
	alignment       TEXT    NOT NULL,
	window_start_us INTEGER NOT NULL,
	units           INTEGER NOT NULL CHECK (units >= 0),
	committed_at_us INTEGER NOT NULL,
	PRIMARY KEY (key, id)
)`},
	// Usage reads one key's windows and Report reads windows in key
	// order; v1 had only the primary key (key, id). (Both versions came in
	// the ledger's first release; v2 is separate so that the upgrade of an
	// existing ledger is tested from the start.)
	{"window index", `
CREATE INDEX ledger_entries_window ON ledger_entries (key, window_start_us, period_us)`},
	// The overrides of limits set through the admin API (OverrideStore):
	// each subject's document, the audit of every change, and the one
	// version counter (changes are serialized by SQLite's one writer).
	{"overrides", `
CREATE TABLE ledger_overrides (
	subject       BLOB    PRIMARY KEY,
	doc           BLOB    NOT NULL,
	version       INTEGER NOT NULL,
	changed_by    TEXT    NOT NULL,
	changed_at_us INTEGER NOT NULL
);
CREATE TABLE ledger_override_audit (
	version       INTEGER PRIMARY KEY,
	subject       BLOB    NOT NULL,
	old_doc       BLOB,
	new_doc       BLOB,
	changed_by    TEXT    NOT NULL,
	changed_at_us INTEGER NOT NULL
);
CREATE INDEX ledger_override_audit_subject ON ledger_override_audit (subject, version);
CREATE TABLE ledger_override_version (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	version INTEGER NOT NULL
);
INSERT INTO ledger_override_version VALUES (1, 0)`},
}
