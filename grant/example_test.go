package grant_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/share"
)

// Two holders share a limit of 100 per second: the first asks for all of
// it, the second gets only what the first leaves free until the first
// gives some back.
func Example() {
	ctx := context.Background()
	home := &grant.MemHome{} // a deployment's holders share a grant.RedisHome
	limit := floodgate.Limit{Limit: 100, Period: time.Second}
	now := time.Unix(1_700_000_000, 0)
	ask := func(holder string, want, demand int64) grant.Grant {
		g, _ := home.Grant(ctx, grant.Request{Key: "tenant:acme", Limit: limit, Holder: holder, Now: now,
			Term: 10 * time.Second, Grace: time.Second, Want: want, Demand: demand})
		return g
	}
	a := ask("a#1", 100, 90)
	b := ask("b#1", 100, 30)
	fmt.Println(a.Share, b.Share)
	// a's target: the limit split by demand over every holder home
	// reported (90 and 30), 75 of 100.
	at, _ := ask("a#1", 100, 90).Target(limit.Limit, share.Party{Demand: 90}, share.Proportional)
	a = ask("a#1", at, 90) // a lowers its own decisions first, then tells home
	b = ask("b#1", 100, 30)
	fmt.Println(a.Share, b.Share, a.Until.Sub(now))
	// Output:
	// 100 0
	// 75 25 10s
}
