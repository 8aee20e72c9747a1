// Package config reads rate limit policies from YAML: the descriptor format
// of envoyproxy/ratelimit, read unchanged, plus optional Floodgate fields.
// It matches request descriptors to rules and names the counters the store
// keeps. `floodgate serve` loads it; `floodgate config validate` runs
// Validate.
//
//	domain: sms
//	descriptors:
//	  - key: category
//	    value: promotional
//	    descriptors:
//	      - key: recipient          # any value; each value counted on its own
//	        rate_limit:
//	          unit: day
//	          requests_per_unit: 3
//	  - key: recipient
//	    rate_limit:
//	      name: per_recipient
//	      algorithm: gcra         # a Floodgate extension
//	      unit: day
//	      requests_per_unit: 50
//	      burst: 10
//
// Most callers load a directory with LoadDir (or files and directories with
// Load), then for each request call Config.MatchAll with its domain and
// descriptors, and for each Match that is Limited ask the store with
// Rule.Key as the key and Rule.Limit as the limit. A Config is immutable
// and safe for concurrent use; a reload loads a new one and swaps it in.
//
// Every problem of every file is reported at once, as an errors.Join of
// *Error with file, line, column and field:
//
//	shop.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit "minutes" (want second, minute, hour, day, week, month or year; or a period such as 90s)
//	shop.yaml:7:5: descriptors[1].key: duplicate descriptor: key "user" without a value is already at this level
//
// Parse never panics, whatever its input (it is fuzzed), and bounds what a
// hostile file can cost: 16 MiB, 64 nested descriptor levels, aliases
// expanding the file to at most four YAML nodes per byte (and 64k; 2M in
// all), 1000 problems.
//
// # The format, as upstream defines it
//
// These behave exactly as in envoyproxy/ratelimit (its README and
// src/config/config_impl.go):
//
//   - A file holds one domain: domain (required, not empty) and
//     descriptors. Each domain is in one file: a domain defined twice,
//     across the files loaded together, is an error (upstream's default,
//     without MERGE_DOMAIN_CONFIG). Loader.MergeDomains merges them, as
//     MERGE_DOMAIN_CONFIG=true: a later file's top-level descriptors join
//     the domain's, and one already there (same key and value) is an error.
//   - A descriptor has a key (required), and optionally a value,
//     rate_limit, nested descriptors, shadow_mode, quota_mode, metadata,
//     detailed_metric, value_to_metric and share_threshold. Two
//     descriptors with the same key and value at the same level are an
//     error.
//   - rate_limit has unit and requests_per_unit, and optionally name,
//     unlimited and replaces: [{name: ...}]. The units are second, minute,
//     hour, day, week, month and year, in any case; as upstream's
//     UnitToDivider defines them, a month is 30 days and a year 365 days,
//     and windows are aligned to multiples of the unit since the Unix epoch.
//     requests_per_unit is 0 to 2^32-1 (upstream's uint32); 0 denies every
//     request. Without algorithm a limit is a fixed window that admits a
//     request while the count plus its hits stays within requests_per_unit.
//   - unlimited: true matches without limiting and takes no unit.
//     A rate_limit that is null ("rate_limit:" and nothing) is no limit.
//   - Matching walks the request's entries down the tree. At each level it
//     takes the most specific descriptor for the entry: the exact value,
//     else a wildcard value (each "*" stands for any text: "foo*" matches
//     every value that starts with "foo", "/api*v1" and "svc*ep*rpc" the
//     values made of those parts in order), else the key-only descriptor, which
//     matches any value. It never goes back to try a less specific one. The
//     rule applies only if the request has exactly as many entries as the
//     rule's depth ("no match" otherwise, as upstream's Example 4).
//   - A key-only or wildcard descriptor gives each distinct request value a
//     counter of its own: Rule.Key holds the request's values. With
//     share_threshold: true on a wildcard descriptor, every value matching
//     it shares one counter (upstream's envoyproxy/ratelimit#1016);
//     share_threshold on a value without "*" is an error, as upstream.
//   - shadow_mode: true decides and counts as usual, but the request is
//     allowed. replaces: a rule matched by one descriptor of a request
//     drops, for that request, every matched rule whose name it replaces
//     (see Config.MatchAll). A replaces entry with an empty name, or naming
//     its own rate_limit, is an error.
//   - quota_mode: true makes the rule a quota: its descriptor still says
//     OVER_LIMIT, but quotas deny a request only when every quota of the
//     request is over (server.Options.GlobalQuotaMode makes every
//     descriptor a quota, as upstream's QUOTA_MODE).
//   - metadata: any mapping, kept in Rule.Metadata, which the Envoy
//     adapter returns in the response's dynamic metadata (upstream's
//     RESPONSE_DYNAMIC_METADATA) for the rules a request passed.
//   - shadow_mode, quota_mode and metadata belong to the descriptor's
//     rate_limit: on a descriptor without one they do nothing, as
//     upstream.
//   - detailed_metric and value_to_metric put request values into the
//     rule's metric name (Rule.MetricKey).
//   - YAML is read as upstream's yaml.v2 reads it: YAML 1.1 booleans (yes,
//     no, on, off), numbers and addresses as values read as their text
//     (value: 8080, value: 10.0.0.1), anchors, aliases and << merge keys.
//
// # What differs from upstream, and why
//
//   - A denied request is not counted. Upstream adds every request's hits
//     to the counter, denied or not, so a client that keeps retrying stays
//     denied for ever; Floodgate counts only admitted requests, and a
//     retry after the window opens is admitted. Set count_rejected: true
//     on a rate_limit for upstream's behaviour.
//   - Field names are checked where they are used. Upstream accepts any
//     known name anywhere (a unit in a descriptor, a shadow_mode in a
//     rate_limit) and then ignores it; here that is an error saying where
//     the field belongs, and a misspelled name gets a suggestion.
//   - A replaces naming no rate_limit of the domain is an error; upstream
//     ignores it, silently leaving the limit it meant to replace in force.
//   - requests_per_unit is required unless unlimited, as upstream's README
//     documents; upstream's loader would read a missing one as 0, denying
//     everything.
//   - Among wildcards of one key that match, the one with the most text
//     besides its "*"s wins (the longest prefix, for "foo*"); upstream
//     takes the first in file order. Upstream matches a wildcard against the
//     text "key_value", so that key a with value b* also caught key a_b;
//     here key and value are compared apart, and for the same reason
//     key a_b and key a with value b are two descriptors, not a duplicate.
//     A key is always literal ("*" means something only in a value).
//   - Metadata is checked when the file loads: a float that is NaN or
//     infinite is an error (upstream fails only when Envoy's metadata
//     cannot carry it), and a key given twice in a metadata mapping is an
//     error (yaml.v2 keeps the last).
//   - A file holds one YAML document: a second one is an error (upstream
//     reads the first and drops the rest). Integers with a leading zero
//     (010) are an error, since YAML 1.1 reads them as octal and YAML 1.2
//     as decimal; quoted numbers and booleans are errors, as in yaml.v2.
//   - A directory is read one level deep: its *.yaml and *.yml files, not
//     names starting with "." (upstream's runtime loader reads a whole
//     tree). Symbolic links are followed, so a Kubernetes ConfigMap volume
//     loads as is.
//   - Metric names (Rule.MetricKey) follow upstream's stats keys,
//     "domain.key_value.key", but are only names: the server decides what
//     it exports.
//
// # Floodgate's extensions
//
// All optional, all inside rate_limit; a config without them behaves as
// upstream, but for the counting of denied requests above.
//
//   - algorithm: fixed_window (the default, upstream's), sliding_window,
//     sliding_window_log, token_bucket, gcra or concurrency; see
//     floodgate.Algorithm.
//   - burst: the capacity of token_bucket and gcra (default
//     requests_per_unit).
//   - period: any Go duration (90s, 1m30s, 36h) instead of unit; giving
//     both is an error.
//   - window: aligned (default) or first_hit, for fixed_window.
//   - count_rejected: true to count denied requests, as upstream does.
//   - local_budget: lets each server decide without a round trip to a
//     shared store, never admitting more in total than the limit. For
//     fixed_window and sliding_window, the most units one server claims at
//     once from the store's budget; for token_bucket and gcra, the most of
//     the rate (units per unit of time, at most requests_per_unit) one
//     server leases, with the same fraction of the burst. See
//     floodgate.Limit.LocalBudget.
//   - durable: true for a paid quota (a fixed_window without local_budget)
//     whose use is recorded in a ledger (floodgate serve -ledger): a
//     commit is acknowledged once the ledger holds it, and a counter the
//     store lost is rebuilt from it; see floodgate.Limit.Durable.
//   - global: true makes the limit one budget shared by every region of a
//     deployment (floodgate serve -region and -home): each region decides
//     it on a share leased from the home store (package region). Only an
//     aligned fixed_window can be global; without -region the field
//     changes nothing.
//   - failure_mode: fail_open, fail_closed or local, how the server answers
//     when the store fails; absent means the server's default. local
//     decides in the server's memory with the limit divided by the number
//     of instances (see floodgate.FailLocal).
//
// Each rate_limit must pass floodgate.Limit.Validate; its problems are
// reported at the YAML field they are about.
//
// # The YAML library
//
// The package uses go.yaml.in/yaml/v3, the YAML organisation's maintained
// continuation of gopkg.in/yaml.v3, and not github.com/goccy/go-yaml.
// Reporting every problem at once, at its line, column and field, means
// walking the document ourselves: decoding into structs, yaml.v3 with
// KnownFields collects unknown fields and type errors with a line only (no
// column, no field path), goccy's Strict mode stops at the first problem,
// and neither knows duplicate descriptors, replaces or invalid limits. For
// that walk yaml.v3's Node is all that is needed: every node with its
// line, column, style and resolved tag, anchors and aliases kept. It has no dependencies, a small API unchanged for years, is what
// most of the Go ecosystem (Kubernetes' sigs.k8s.io/yaml included) already
// parses with, and reads the same YAML as upstream's yaml.v2 but for the
// YAML 1.1 booleans, which this package accepts itself. goccy/go-yaml is
// larger (its own AST, path queries, colored error source), changes
// faster, and offers nothing this walk needs. go.yaml.in/yaml/v4 has just
// reached v4.0.0; moving to it later touches only this package, the only
// one (with server/ and cmd/) allowed to import a YAML library.
package config
