package proxy

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// parsed is what the router needs from a request body. The body itself is
// forwarded unchanged.
type parsed struct {
	model  string
	stream bool
	user   string
	route  strategy.Request
}

// badRequest is a client error with the offending field.
type badRequest struct {
	param, msg string
}

func (e *badRequest) Error() string { return e.msg }

// parseBody extracts routing facts from a JSON body. It rejects what no
// worker could accept (malformed JSON, a missing model, wrongly typed
// routing fields) and leaves all other validation to the worker.
//
// It validates once and then reads only the fields it routes on (gjson),
// instead of decoding the whole body: prompts are large, and the router
// forwards the body unchanged anyway.
func parseBody(raw []byte) (*parsed, error) {
	// View the body as a string without copying it: raw is never modified
	// after it is read (it is forwarded as is), and every result below
	// slices this string, which keeps raw's memory alive for as long as a
	// result is referenced.
	var js string
	if len(raw) > 0 {
		js = unsafe.String(&raw[0], len(raw))
	}
	if !gjson.Valid(js) {
		return nil, &badRequest{msg: "invalid JSON body"}
	}
	root := gjson.Parse(js)
	if !root.IsObject() {
		return nil, &badRequest{msg: "request body must be a JSON object"}
	}
	var model, stream, user, salt, prompt, messages gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			model = v
		case "stream":
			stream = v
		case "user":
			user = v
		case "cache_salt":
			salt = v
		case "prompt":
			prompt = v
		case "messages":
			messages = v
		}
		return true
	})
	switch {
	case !model.Exists() || model.Type == gjson.Null || (model.Type == gjson.String && model.Str == ""):
		return nil, &badRequest{param: "model", msg: "the model field is required"}
	case model.Type != gjson.String:
		return nil, &badRequest{param: "model", msg: "invalid type for field \"model\": want a string"}
	}
	p := &parsed{model: model.Str}
	p.route.Model = p.model
	if stream.Exists() && stream.Type != gjson.Null {
		if stream.Type != gjson.True && stream.Type != gjson.False {
			return nil, &badRequest{param: "stream", msg: "invalid type for field \"stream\": want a boolean"}
		}
		p.stream = stream.Bool()
	}
	for _, f := range []struct {
		name string
		v    gjson.Result
		dst  *string
	}{{"user", user, &p.user}, {"cache_salt", salt, &p.route.CacheSalt}} {
		v := f.v
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if v.Type != gjson.String {
			return nil, &badRequest{param: f.name, msg: fmt.Sprintf("invalid type for field %q: want a string", f.name)}
		}
		*f.dst = v.Str
	}
	if prompt.Exists() {
		text, err := promptText(prompt)
		if err != nil {
			return nil, &badRequest{param: "prompt", msg: err.Error()}
		}
		p.route.Prompt = text
		p.route.TokenIDs = promptTokens(prompt)
	}
	if msgs := messages; msgs.Exists() && msgs.Type != gjson.Null {
		if !msgs.IsArray() {
			return nil, &badRequest{param: "messages", msg: "messages must be a list"}
		}
		var err error
		msgs.ForEach(func(i, m gjson.Result) bool {
			if !m.IsObject() {
				err = &badRequest{param: "messages", msg: fmt.Sprintf("messages[%d] must be an object", i.Int())}
				return false
			}
			var text string
			if text, err = contentText(m.Get("content")); err != nil {
				err = &badRequest{param: "messages", msg: fmt.Sprintf("messages[%d].content: %v", i.Int(), err)}
				return false
			}
			p.route.Messages = append(p.route.Messages, strategy.Message{Role: m.Get("role").String(), Content: text})
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// promptText renders a prompt (string, list of strings, token ids, or lists
// of token ids) as text for prefix hashing. Token ids keep their decimal
// form, so equal id prefixes still hash equal.
func promptText(v gjson.Result) (string, error) {
	switch {
	case v.Type == gjson.Null:
		return "", nil
	case v.Type == gjson.String:
		return v.Str, nil
	case !v.IsArray():
		return "", fmt.Errorf("prompt must be a string, a list of strings, or a list of token ids")
	}
	var sb strings.Builder
	var err error
	v.ForEach(func(i, item gjson.Result) bool {
		if i.Int() > 0 {
			// Ids of one flat list are space-separated; prompts of a batch
			// are separate lines.
			sep := byte('\n')
			if item.Type == gjson.Number {
				sep = ' '
			}
			sb.WriteByte(sep)
		}
		switch {
		case item.Type == gjson.String:
			sb.WriteString(item.Str)
		case item.Type == gjson.Number:
			sb.WriteString(item.Raw)
		case item.IsArray():
			first := true
			item.ForEach(func(_, id gjson.Result) bool {
				if id.Type != gjson.Number {
					err = fmt.Errorf("prompt token ids must be numbers")
					return false
				}
				if !first {
					sb.WriteByte(' ')
				}
				first = false
				sb.WriteString(id.Raw)
				return true
			})
		default:
			err = fmt.Errorf("prompt must be a string, a list of strings, or a list of token ids")
		}
		return err == nil
	})
	return sb.String(), err
}

// promptTokens returns a prompt given as one flat list of token ids, which
// kvaware can use without asking a tokenizer; nil for anything else.
func promptTokens(v gjson.Result) []uint32 {
	if !v.IsArray() {
		return nil
	}
	var ids []uint32
	ok := true
	v.ForEach(func(_, id gjson.Result) bool {
		n := id.Uint()
		if id.Type != gjson.Number || n > 1<<32-1 || float64(n) != id.Num {
			ok = false
			return false
		}
		ids = append(ids, uint32(n))
		return true
	})
	if !ok || len(ids) == 0 {
		return nil
	}
	return ids
}

// contentText returns a message's text: the string, or its text parts
// joined. Other parts (images, audio) are left for the worker to judge.
func contentText(v gjson.Result) (string, error) {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return "", nil
	case v.Type == gjson.String:
		return v.Str, nil
	case !v.IsArray():
		return "", fmt.Errorf("must be a string or a list of content parts")
	}
	var sb strings.Builder
	v.ForEach(func(_, part gjson.Result) bool {
		if part.Get("type").Str == "text" {
			sb.WriteString(part.Get("text").String())
		}
		return true
	})
	return sb.String(), nil
}
