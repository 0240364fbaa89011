package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/warmpath/warmpath/tools/bench/demo"
	"github.com/warmpath/warmpath/tools/bench/live"
)

func words(seed string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s%d ", seed, i%97)
	}
	return b.String()
}

func tmpWorkloads() []demo.Workload {
	var mr []live.Request
	sys := words("sys", 500)
	for u := 0; u < 16; u++ {
		hist := []live.Message{{Role: "system", Content: sys}}
		prev := -1
		for r := 0; r < 4; r++ {
			q := words(fmt.Sprintf("u%dq%d", u, r), 150)
			msgs := append(append([]live.Message(nil), hist...), live.Message{Role: "user", Content: q})
			req := live.Request{After: prev, Arrival: time.Duration(u) * 150 * time.Millisecond, Think: 50 * time.Millisecond, Session: fmt.Sprint(u), Messages: msgs, MaxTokens: 50}
			prev = len(mr)
			mr = append(mr, req)
			hist = append(msgs, live.Message{Role: "assistant", Content: words(fmt.Sprintf("a%d%d", u, r), 50)})
		}
	}
	var ld []live.Request
	for d := 0; d < 12; d++ {
		doc := words(fmt.Sprintf("doc%d", d), 4000)
		for k := 0; k < 4; k++ {
			ld = append(ld, live.Request{After: -1, Arrival: time.Duration(k*12+d) * 60 * time.Millisecond, Session: fmt.Sprint("d", d), Prompt: doc + words(fmt.Sprintf("q%d%d", d, k), 30), MaxTokens: 30})
		}
	}
	return []demo.Workload{{Name: "multi-round", Requests: mr}, {Name: "long-doc", Requests: ld}}
}
