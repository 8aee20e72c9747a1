package region_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/region"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

func Example() {
	ctx := context.Background()
	// A deployment's regions share a grant.RedisHome (grant.DialHome); a
	// grant.MemHome keeps the grants in this process.
	home := &grant.MemHome{}
	eu, _ := region.New(memstore.New(nil), home, &region.Options{Name: "eu-west"})
	defer eu.Close()
	lim, _ := floodgate.New(eu, nil)

	limit := floodgate.Limit{Limit: 100, Period: time.Minute, Global: true}
	// The first decision of the key waits for its first grant: alone,
	// eu-west is granted the whole limit.
	d, err := lim.Allow(ctx, "tenant:acme", limit)
	fmt.Println(d.Allowed, d.Limit, d.Remaining, err)
	fmt.Println(eu.Held("tenant:acme", limit).Share)
	// Output:
	// true 100 99 <nil>
	// 100
}
