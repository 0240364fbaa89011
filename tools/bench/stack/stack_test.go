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
