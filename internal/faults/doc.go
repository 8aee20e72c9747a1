// Package faults injects faults into real redis-server processes while a
// load of floodgate.Limiter calls runs over redisstore, and checks the
// bounds the README and docs/guarantees.md promise: no caller waits past
// its deadline, the failure policy answers every call that failed, the
// store recovers by itself, and the requests admitted above a limit stay
// within a stated figure.
//
// The tests are the package; the only code outside them is Proxy, a TCP
// proxy that adds latency and resets connections, for the slow-network
// faults. Each fault test records its measurements, and
// TestGuaranteesDoc checks docs/guarantees.md against the same bounds;
// `go test ./internal/faults -update` reruns every fault and rewrites the
// table in the doc.
package faults
