package stack

import "testing"

func TestLocalTokenizer(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "m=cl100k_base:llama3"},
		{[]string{"--preset", "x", "--chat-template", "chatml"}, "m=cl100k_base:chatml"},
		{[]string{"-tokenizer=o200k_base", "--chat-template=chatml"}, "m=o200k_base:chatml"},
		{[]string{"--tokenizer"}, "m=cl100k_base:llama3"},
	}
	for _, tt := range tests {
		if got := localTokenizer("m", tt.args); got != tt.want {
			t.Errorf("localTokenizer(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

// TestFreePortRunsDoNotOverlap: workers bind their ports only once
// started, so the runs handed out for one stack must not share a port even
// though none is bound yet (a worker of a `make demo` run once died on
// "address already in use" for a port probed twice).
func TestFreePortRunsDoNotOverlap(t *testing.T) {
	taken := map[int]bool{}
	seen := map[int]int{}
	for i := range 200 {
		base, err := freePortRun(t.Context(), 3, taken)
		if err != nil {
			t.Fatal(err)
		}
		for p := base; p < base+3; p++ {
			if j, dup := seen[p]; dup {
				t.Fatalf("port %d handed out to run %d and run %d", p, j, i)
			}
			seen[p] = i
		}
	}
}
