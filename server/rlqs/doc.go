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
// replica of `floodgate serve` reaches, or a grant.MemHome in one process), the
// same atomic step that hands out regions' shares of global limits.
// Protobuf types stay in this package.
//
//	svc, _ := rlqs.New(srv, &rlqs.Options{Home: home})
//	svc.Register(grpcServer)
//	...
//	svc.Drain(ctx) // before grpcServer.GracefulStop
//
// [docs/rlqs.md] has the whole design: the mapping of buckets to rules,
// Envoy's filter configuration, how assignments follow demand, and the
// proof of the bound below.
//
// # The mapping
//
// The domain of a stream's first report is the config's domain. A
// bucket_id (a map of strings) is one descriptor, its entries put in the
// order in which a rule of the domain nests exactly those keys; each
// bucket of a rule is counted apart, under the rule's key of its entries
// (config.Rule.Key). Every report is answered at once, one action per
// bucket reported:
//
//   - fixed_window, token_bucket and gcra rules: a token bucket that is
//     this Envoy's share s of the limit L per period P, tokens_per_fill
//     ⌊s×F/P⌋ every fill_interval F and max_tokens ⌊s×B/L⌋ (B the rule's
//     Limit.Capacity), both rounded down, so an Envoy never gets more
//     than its share;
//   - no rule, an unlimited rule, or a rule in shadow mode: ALLOW_ALL;
//     a rule of 0 requests: DENY_ALL;
//   - sliding windows and concurrency, which no token bucket expresses:
//     the rule's failure mode, counted in
//     floodgate_rlqs_inexpressible_total.
//
// A malformed report, or one beyond Options.MaxStreamBuckets,
// Options.MaxBuckets or Options.MaxStreams, ends the stream with
// InvalidArgument or ResourceExhausted naming the field.
//
// # Invariants
//
// Each stream is one holder at home (an Envoy naming itself by
// HolderHeader is one holder across its streams). Home never lets the
// live shares of a limit exceed L, and hands a holder more only from what
// the others gave back; a holder's share is held at no less than every
// share sent to it in the last TTL + Grace (the longest an assignment can
// be in force) that no later share confirmed by its stream (a report
// Grace after it was sent) has replaced. So the token buckets in force at
// all Envoys refill at most L/P together. One floor of each limit is kept
// free, so a newcomer's first report gets its floor; a report's demand is
// at most DemandCap × L; one client holds at most MaxClientStreams
// streams and MaxClientBuckets buckets.
// One holder's bucket changes at most once per Options.ChangeEvery (M),
// and the buckets created in any span of M are held at home at its end,
// so their max_tokens add up to at most B (for a fixed window, whose
// buckets hold a second of their share, L×1s/P plus one per holder).
// Over any span of length D the fleet therefore admits at most
//
//	L×D/P + B×(1 + ⌈D/M⌉) + F(D)
//
// where F(D) is what the Envoys admit on their own fallbacks (0 with
// DENY_ALL fallbacks). TestFleetBoundAndFairness checks each step of the
// argument on two replicas over a real Redis with simulated Envoys.
//
// A dropped stream's grant is not returned: it runs out TTL + Grace
// after the holder's last report, unless the Envoy comes back under its
// name and keeps it. Drain expires a replica's assignments
// (TTL 0) so that its Envoys fall back at once. When home does not answer,
// a report gets no action for the bucket and the Envoy falls back within
// TTL. Not covered: home losing its state, and an Envoy whose
// expired_assignment_behavior is reuse_last_assignment.
//
// [docs/rlqs.md]: https://github.com/floodgate-rl/floodgate/blob/main/docs/rlqs.md
package rlqs
