// Package rlqs serves Envoy's Rate Limit Quota Service,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService, the protocol of
// Envoy's rate_limit_quota HTTP filter: instead of one call per request,
// each Envoy reports its usage per bucket every reporting_interval over one
// stream and enforces the assignment it gets back (a token bucket, or
// ALLOW_ALL or DENY_ALL) in its own memory until the assignment's time to
// live runs out. This package hands each Envoy a token bucket that is its
// share of the limit, split by demand, so that the fleet together admits
// about the limit, and says exactly how much more it can admit.
//
// It only composes what Floodgate has: the rules are the server's config
// (server.Server.Config, matched as a descriptor is), the split is package
// share's, and the shares are grants of a grant.Home (the Redis every
// replica of `floodgate serve` reaches, or a grant.MemHome in one
// process), the same atomic step that hands out regions' shares of global
// limits.
// Protobuf types stay in this package.
//
//	svc, _ := rlqs.New(srv, &rlqs.Options{Home: home})
//	svc.Register(grpcServer)
//	...
//	svc.Drain(ctx) // before grpcServer.GracefulStop
//
// # The mapping
//
//   - domain (of the stream's first report; Envoy's filter sends its
//     configured domain in every report) is the config's domain. An empty
//     first domain, a domain the config does not have, or another domain
//     later on the same stream ends the stream with InvalidArgument.
//   - bucket_id, a map of strings, is one descriptor: its entries are the
//     descriptor's entries, put in the order in which a rule of the domain
//     nests exactly those keys (a bucket {route: /api, tenant: acme} finds
//     the rule at tenant → route). When several rules nest the same keys in
//     different orders, each order is tried in the order of the rules in
//     the config, and the first that matches (config.Domain.Match: exact
//     value, else the longest wildcard, else key-only) is the bucket's
//     rule. Extra keys are not ignored: a bucket matches a rule only if its
//     keys are exactly the rule's. Envoy's bucket_id_builder then names the
//     descriptor keys: a string_value for a fixed key, a custom_value (a
//     request header) for a per-request one.
//   - Each bucket of a rule is counted apart, under the rule's key of its
//     entries (config.Rule.Key), as each descriptor value is in the
//     per-request protocol.
//
// Every report is answered at once, with one action per bucket reported,
// in the report's order (none for a bucket whose grant home did not
// answer, see below):
//
//   - a rule of fixed_window, token_bucket or gcra: a token bucket that is
//     this Envoy's share s of the limit L per period P: tokens_per_fill
//     ⌊s×F/P⌋ every fill_interval F (P rounded up to whole seconds, as
//     Envoy reads only a fill interval's seconds), and max_tokens
//     ⌊s×B/L⌋, where B is the rule's capacity (Limit.Capacity: L for a
//     fixed window, the burst for token_bucket and gcra). Both are rounded
//     down, so an Envoy never gets more than its share; a share too small
//     for one token is DENY_ALL until its demand earns more;
//   - no rule, an unlimited rule, or a rule in shadow mode: ALLOW_ALL, as
//     the per-request protocol answers OK;
//   - a rule of 0 requests: DENY_ALL;
//   - a rule no token bucket expresses (sliding_window and
//     sliding_window_log promise at most L in every trailing period, which
//     a bucket of capacity L breaks, admitting up to 2L; concurrency holds
//     units until released, which the protocol cannot say): answered by
//     the rule's failure mode, DENY_ALL for fail_closed and ALLOW_ALL
//     otherwise, and counted in floodgate_rlqs_inexpressible_total. A
//     rule with such a limit serves the per-request protocol as ever.
//
// Each assignment's time to live is Options.TTL (whole seconds, as Envoy
// reads them), renewed by every report, so set it above the Envoys'
// reporting_interval. A bucket that has had no request for Options.Idle
// is answered AbandonAction; its share returns to the others when its
// grant ends. So is a bucket whose limit a reload changed, since Envoy
// keeps a token bucket whose max_tokens and tokens_per_fill are unchanged
// (its next request subscribes it again under the new limit). The
// stream remembers an abandoned bucket for TTL+Grace, so a new
// subscription finds its shares still held and gets no new token bucket
// within ChangeEvery of the last (DENY_ALL until then). A stream may hold Options.MaxStreamBuckets
// buckets and the replica Options.MaxBuckets and Options.MaxStreams;
// beyond them a report is refused (InvalidArgument naming the bucket, or
// ResourceExhausted), as is any malformed report (a bucket without an ID,
// an empty key, more than server.MaxEntries entries, more than
// MaxBucketIDBytes, a negative time_elapsed), the error naming the field.
//
// # Fair assignments
//
// Each stream is one holder at home, named by the replica's Options.Name
// and the stream. At each report of a bucket its demand is measured,
// (allowed + denied) per P over the report's time_elapsed (or the time
// since the previous report, when Envoy sends 0), averaged with the
// previous measure. Home keeps every holder's last demand and floor
// (Options.Floor × L), so that every replica computes the same split:
// this Envoy's target is share.Split of L over all of them
// (Options.Policy; proportional to demand by default). The Envoy's share
// moves to the target at most once per Options.ChangeEvery, not at all
// while the target is within 1/16 of the share in force (a new token
// bucket starts full, which costs more than the difference), and only by
// what home grants: home never lets the live shares of a limit exceed L,
// and hands a holder more only from what the others have given back. So
// the shares follow demand within about TTL + Grace + a reporting
// interval: a falling share is given back only once no assignment that
// carried the larger one can still be in force.
//
// # The bound
//
// For one bucket of a rule of limit L per period P and capacity B, let T
// be Options.TTL, G Options.Grace and M Options.ChangeEvery (M ≤ T). An
// assignment that carried share s to an Envoy is in force there at most
// until T after it arrived, which is at most T + G after it was sent, if G
// covers the delivery and the clock differences between replicas. Home
// holds each holder's share at no less than every share sent to it in the
// last T + G (a grant runs T + G from its last renewal, and a holder asks
// for no less than those shares), so at every moment the token buckets in
// force at all Envoys refill at most L/P together. A new token bucket at
// an Envoy starts full (Envoy replaces its bucket when max_tokens,
// tokens_per_fill or fill_interval change, and after an expiry), and one
// holder's bucket changes at most once per M; the buckets created in any
// span of M are all held at home at its end, so their max_tokens add up
// to at most B. Over any span of length D the fleet therefore admits at
// most
//
//	L×D/P + B×(1 + ⌈D/M⌉) + F(D)
//
// where B is the buckets in force at the span's start, and F(D) is what
// the Envoys admit on their own fallbacks (no_assignment_behavior, and
// expired_assignment_behavior after an expiry or a drain) during the
// span: 0 with DENY_ALL fallbacks. With the simulations' rule (L = 100
// per 10 s, B = 20, M = 2 s) that is 220 in any 10 s: the fleet admitted
// at most 127 there (TestFleetBoundAndFairness).
//
// When an Envoy's stream drops, its holder's grant is not returned: it
// runs out T + G after the holder's last report (a window of home rounded
// up to the second, plus G), the longest its last assignment can be in
// force, and the Envoy's reconnection is a new holder that gets only what
// the others leave. A replica that stops is the same: Drain expires its
// assignments (TTL 0) so that its Envoys fall back at once, and the
// grants run out by themselves; the Envoys reconnect to another replica,
// which shares the grants through home (TestReplicaRestart). When home
// does not answer, a report gets no action for the bucket: its
// assignment is not renewed past its grant, and the Envoy falls back
// within T (TestHomeDown). Not covered: home losing its
// state (a Redis restart without persistence, a failover that lost
// writes) frees every share while the Envoys still enforce theirs, up to
// L/P more per second until their assignments expire; and an Envoy whose
// expired_assignment_behavior is reuse_last_assignment, which keeps
// enforcing a share no grant holds (use a fallback_rate_limit, counted in
// F).
//
// TestFleetBoundAndFairness checks each step of the argument on two
// replicas over a real Redis, with simulated Envoys (the filter's cache,
// token buckets and expiry, a dropped stream, lost answers): the active
// rates never add up to more than L/P (the test fails without the hold),
// the buckets created in any M hold at most B, and the fleet's admissions
// in every span of P, 3P and 6P stay within the bound.
package rlqs
