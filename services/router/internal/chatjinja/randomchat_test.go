package chatjinja

import (
	"math/rand/v2"
	"strings"

	"github.com/warmpath/warmpath/libs/chattemplate"
)

// RandomChat generates a conversation of varied roles and contents:
// unicode, markers, quotes, Jinja-looking text, long runs.
func RandomChat(rng *rand.Rand) []chattemplate.Message {
	roles := []string{"system", "user", "assistant", "tool"}
	bits := []string{"hello", " world", "\n", "\n\n", "  ", "<|eot_id|>", "<|im_end|>", "{{ x }}", "{% if %}", "'s", "\"q\"", "naïve café", "日本語", "🚀", "123456", "!?", "\t", "\\n"}
	msgs := make([]chattemplate.Message, rng.IntN(7))
	for i := range msgs {
		var sb strings.Builder
		for range rng.IntN(12) {
			sb.WriteString(bits[rng.IntN(len(bits))])
		}
		if rng.IntN(10) == 0 {
			sb.WriteString(strings.Repeat("long content ", 200))
		}
		msgs[i] = chattemplate.Message{Role: roles[rng.IntN(len(roles))], Content: sb.String()}
	}
	return msgs
}
