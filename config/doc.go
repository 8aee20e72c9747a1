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
// The format, what differs from envoyproxy/ratelimit and why, and each
// extension are in [docs/service.md]. In brief: the upstream fields
// (domain, descriptors, key, value with "*" wildcards, rate_limit with
// unit, requests_per_unit, name, unlimited and replaces, shadow_mode,
// quota_mode, metadata, detailed_metric, value_to_metric,
// share_threshold) behave as upstream's loader reads them, with windows
// aligned to the unit since the Unix epoch; a field in the wrong place, a
// replaces that names no rate_limit, a missing requests_per_unit or a
// second YAML document is an error here where upstream ignores it. Matching
// takes, at each level, the exact value, else the most specific wildcard,
// else the key-only descriptor, and never goes back.
//
// Floodgate's extensions, all optional and inside rate_limit, map to
// floodgate.Limit: algorithm, burst, period (any Go duration instead of
// unit), window (aligned or first_hit), count_rejected, local_budget,
// durable, global and failure_mode. Each rate_limit must pass
// floodgate.Limit.Validate; its problems are reported at the YAML field
// they are about. share_by names a level of the rule's path whose values
// are flows sharing one counter by max-min fairness (Rule.ShareBy,
// Rule.Flow; docs/fairness.md).
//
// Two more extensions sit beside rate_limit and domain: rate_limits, a
// list of rate_limit mappings that puts several limits on one
// descriptor, decided all or nothing (Rule.Limits); and plans, named
// lists of limits that the server's overrides give a descriptor in
// place of its rule's (Domain.Plan).
//
// A denied request is not counted, unlike upstream (which counts every
// request's hits, so a client that keeps retrying stays denied);
// count_rejected: true restores upstream's behaviour per rule.
//
// The package walks go.yaml.in/yaml/v3 nodes itself, so that it can report
// every problem at its line, column and field at once; it is the only
// package besides server/ and cmd/ allowed to import a YAML library.
//
// [docs/service.md]: https://github.com/floodgate-rl/floodgate/blob/main/docs/service.md#config
package config
