package hrw

import (
	"fmt"
	"slices"
	"testing"
)

func TestOwner(t *testing.T) {
	ids := []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"}
	const keys = 30000
	counts := make([]int, len(ids))
	moved := 0
	fewer := ids[:2]
	for k := range uint64(keys) {
		key := k * 0x9e3779b97f4a7c15
		o := Owner(key, ids)
		counts[o]++
		// Every process agrees whatever order it lists the ids in.
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		if got := rev[Owner(key, rev)]; got != ids[o] {
			t.Fatalf("key %d: owner %s in reverse order, %s in order", key, got, ids[o])
		}
		// Removing the third id moves only the keys it owned.
		if o < 2 && fewer[Owner(key, fewer)] != ids[o] {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys moved between the ids that stayed", moved)
	}
	for i, c := range counts {
		if c < keys/3*9/10 || c > keys/3*11/10 {
			t.Errorf("%s owns %d of %d keys, want about a third", ids[i], c, keys)
		}
	}
}

func TestOwnerEdges(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want int
	}{
		{nil, -1},
		{[]string{"a"}, 0},
	} {
		t.Run(fmt.Sprint(tc.ids), func(t *testing.T) {
			if got := Owner(42, tc.ids); got != tc.want {
				t.Errorf("Owner = %d, want %d", got, tc.want)
			}
		})
	}
}
