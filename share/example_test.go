package share_test

import (
	"fmt"

	"github.com/floodgate-rl/floodgate/share"
)

func ExampleSplit() {
	// Three regions asked for 700, 200 and 100 of a limit of 1000 per
	// second in the last second; each keeps a floor of 50.
	regions := []share.Party{{Demand: 700, Floor: 50}, {Demand: 200, Floor: 50}, {Demand: 100, Floor: 50}}
	fmt.Println(share.Split(1000, regions, share.Proportional))
	fmt.Println(share.Split(1000, regions, share.MaxMin))
	fmt.Println(share.Split(1000, regions, share.Equal))
	// Output:
	// [645 220 135]
	// [700 200 100]
	// [334 333 333]
}
